"""The package's shape: layers import downward only, and no module imports one that imports it.

scripts, __main__ -> cli -> recipe -> training, export, baseline -> model -> nn -> config -> errors
                                \\-> data (beside the model: never imports model, nn or training)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tscratch"

# Rank of each layer: a module may import its own layer or a lower one, never a higher one.
LAYERS = {
    "errors": 0, "config": 1, "nn": 2, "model": 3, "pretrained": 3, "data": 3, "training": 4,
    "recipe": 5, "cli": 6, "masked_lm": 3, "export": 4, "version": 0, "checkpoint_files": 1,
    "seq2seq": 3,
    "filesystem": 1,  # output folders checked before the work; what dead processes left
    "lab": 6,  # experiments on the training side, run by cli/lab.py; may read cli's configs
    "baseline": 4,  # the TF-IDF bar (scripts): reads the splits and the CJK ranges (data)
    "configs": 1,  # the packaged YAML files and their names: read by cli and lab
    "peak": 1,  # a device's measured matmul peak: torch only, no Lightning (scripts/bench.py)
    "electra": 3,  # like masked_lm, which it builds on: it may import masked_lm and model
    "__main__": 7,  # `python -m tscratch`: the console command, above everything
}  # fmt: skip
# Same rank, kept apart: the data side knows nothing of the model side and vice versa.
APART = {("data", "model"), ("model", "data"), ("data", "nn"), ("data", "pretrained")}
APART |= {("data", "masked_lm"), ("masked_lm", "data")}
APART |= {("data", "electra"), ("electra", "data")}
APART |= {("data", "seq2seq"), ("seq2seq", "data")}
# An exported folder loads without Lightning: the exporter never imports the training side.
APART |= {("export", "training")}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """The tscratch modules `path` imports (at any depth of its code, lazy imports included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tscratch"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("tscratch")}
    return found


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None  # the top-level tscratch/__init__ re-exports


MODULES = {module_name(p): imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if layer(m)))
def test_imports_run_downward_only(module):
    mine = layer(module)
    for target in MODULES[module]:
        theirs = layer(target)
        assert theirs is not None, f"{module} imports the package root"
        assert LAYERS[theirs] <= LAYERS[mine], f"{module} ({mine}) imports {target} ({theirs})"
        assert (mine, theirs) not in APART, f"{module} ({mine}) imports {target} ({theirs})"


def test_no_import_cycles():
    def resolve(target: str) -> str:
        # `from tscratch.nn.positions import X` may name a module or a package's re-export.
        return target if target in MODULES else target.rsplit(".", 1)[0]

    graph = {m: {resolve(t) for t in targets} - {m} for m, targets in MODULES.items()}
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycle = [*path[path.index(nxt) :], nxt] if nxt in path else [node, nxt]
                pytest.fail(f"import cycle: {' -> '.join(cycle)}")
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_every_module_is_in_a_known_layer():
    unknown = {m for m in MODULES if layer(m) and layer(m) not in LAYERS}
    assert not unknown, f"modules outside the declared layers: {unknown}"


def test_files_stay_small():
    long = {
        module_name(p): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 400
    }
    assert not long, f"split these by concern: {long}"
