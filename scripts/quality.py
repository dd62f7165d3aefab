"""The quality suite: a fit recipe on several datasets and seeds, beside TF-IDF, in one table.

One `tscratch fit` recipe on each dataset for each seed, next to TF-IDF + logistic regression on
exactly the same splits, printed as one Markdown table (issue 20, item 4).

Usage: `python scripts/quality.py [--config NAME_OR_YAML] [--datasets bbc_news bbc_headlines
trec6 chnsenticorp DIR ...] [--seeds 0 1 2] [--threads N] [--parallel 1|2] [--out DIR]
[--results FILE.jsonl] [--smoke] [--table_only] [--extra FIT_FLAGS...]` (`--extra` comes last:
every flag after it goes to `tscratch fit`).

Datasets: `bbc_news` (built in); `bbc_headlines`, each BBC file's first line only (one CSV built
by `scripts/recipe_check.py`, that fit splits itself); `trec6` and `chnsenticorp`, the folders
under `../shared/data/` beside the repository (skipped with one line when missing); any other
value is a path to a folder of CSVs (or a data file) as `--data.dataset` takes it.

Each cell (dataset, seed) is a real `tscratch fit --config RECIPE` in a subprocess with its own
`--trainer.default_root_dir`, `OMP_NUM_THREADS`, and `--seed_everything SEED`: the seed is the
model's (weights, dropout, the order of batches); the split is the data's own (`data.seed`,
42 unless the recipe or `--extra` says otherwise), so every seed and the TF-IDF bar see the
same train/validation/test rows. The test figures are read from the summary line fit prints;
the split arguments and the precision from the `config.yaml` the run saved, and TF-IDF is
fitted here (`tscratch.baseline.tfidf_scores`) on the splits those arguments give (a warning
if it disagrees with the bar fit reports beside its own score). Wall time is measured around
the subprocess: compare it within one table (same machine, same `--parallel`), never across.

Resumable: each finished cell is appended to the results file (`OUT/results.jsonl` unless
`--results` says otherwise) with its command, wall time, precision, threads, torch version and
CPU flags, and a rerun skips the cells already there (key: recipe + fit flags + dataset + seed).
A progress line per cell goes to stderr and the table to stdout; `--table_only` prints the
table from the results file and runs nothing. `--smoke` runs the tiny config for one short
epoch on at most 200 training rows: seconds per cell, for the script's own test.
Needs scikit-learn (a dependency of tscratch) for the TF-IDF bar.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import difflib
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tscratch.configs import packaged_config
from tscratch.errors import MissingFile, UserError, report

REPO = Path(__file__).resolve().parents[1]
SHARED = {name: REPO.parent / "shared" / "data" / name for name in ("trec6", "chnsenticorp")}
NAMED = ("bbc_news", "bbc_headlines", *SHARED)
SMOKE_FLAGS = [
    "--trainer.max_epochs", "1", "--data.train_rows", "200",
    "--trainer.limit_test_batches", "1.0",  # tiny.yaml scores 2 batches: TF-IDF scores all
]  # fmt: skip
OWN_FLAGS = ("--config", "--data.dataset", "--seed_everything", "--trainer.default_root_dir")
SUMMARY = re.compile(
    r"^test accuracy (?P<acc>[\d.]+), macro-F1 (?P<f1>[\d.]+)"
    r"(?: on (?P<rows>[\d,]+) of [\d,]+ test rows)?"  # a run limited to some test batches
    r"(?: \((?:--trainer\.limit_test_batches [^;)]*(?:; )?)?"  # and the bar fit reports beside
    r"(?:TF-IDF \+ logistic regression on the same (?:split|rows): "  # it, on the same rows:
    r"accuracy (?P<bar_acc>[\d.]+), macro-F1 (?P<bar_f1>[\d.]+))?\)?)?",
    re.MULTILINE,
)


def final_summary(output: str) -> re.Match | None:
    """The main run's summary line: the last one (a recipe's teacher stage prints its own)."""
    return ([None, *SUMMARY.finditer(output)])[-1]


@dataclass(frozen=True)
class Dataset:
    key: str  # in the results file: the name, or the resolved path of a folder
    name: str  # in the table
    source: str  # what --data.dataset gets (bbc_headlines: built before the runs)


@dataclass(frozen=True)
class Cell:
    dataset: Dataset
    seed: int
    folder: Path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add(
        "--config",
        dest="recipe",
        help="fit's packaged config name or YAML file (default: default; smoke: tiny); fit's own "
        "--recipe goes after --extra",
    )
    add("--datasets", nargs="+", help=f"{', '.join(NAMED)} or folders (default: those four)")
    add("--seeds", nargs="+", type=int, default=[0, 1, 2], help="model seeds")
    add("--threads", type=int, help="OMP_NUM_THREADS per run (default: cores / --parallel)")
    add("--parallel", type=int, choices=(1, 2), default=1, help="runs at a time")
    add("--out", type=Path, default=Path("quality"), help="where the runs' folders go")
    add("--results", type=Path, help="JSONL of finished runs (default: OUT/results.jsonl)")
    add("--smoke", action="store_true", help="tiny config, one short epoch: seconds per run")
    add("--table_only", action="store_true", help="print the table from --results; run nothing")
    add("--extra", nargs=argparse.REMAINDER, default=[], help="last: flags for tscratch fit")
    args = parser.parse_args(argv)
    if args.smoke and args.recipe not in (None, "tiny"):
        parser.error("--smoke runs the tiny config; drop --config")
    if own := [a for a in args.extra if a.split("=")[0] in OWN_FLAGS]:
        parser.error(f"--extra {own[0]}: set by this script (use --config, --datasets, --seeds)")
    args.recipe = args.recipe or ("tiny" if args.smoke else "default")
    args.flags = [*(SMOKE_FLAGS if args.smoke else []), *args.extra]
    args.threads = args.threads or max(1, (os.cpu_count() or 1) // args.parallel)
    args.results = args.results or args.out / "results.jsonl"
    return args


def recipe_file(recipe: str) -> Path:
    """The YAML file of a packaged config name or a path (a `UserError` when neither)."""
    try:
        path = Path(packaged_config(recipe))
    except UserError as error:  # it names fit's flag, --config
        raise UserError(str(error)) from None
    if not path.is_file():
        raise MissingFile(f"--config {recipe}: no such file; pass a packaged config or a YAML file")
    return path


def resolve_dataset(value: str) -> Dataset | None:
    """A `Dataset`, None for a shared folder that is missing (said on stderr), or a `UserError`."""
    if value in ("bbc_news", "bbc_headlines"):
        return Dataset(value, value, value)
    if value in SHARED:
        if not SHARED[value].is_dir():
            print(f"skipping {value}: {SHARED[value]} is missing", file=sys.stderr)
            return None
        return Dataset(value, value, str(SHARED[value]))
    path = Path(value).expanduser()
    if path.exists():
        return Dataset(str(path.resolve()), path.resolve().name, str(path.resolve()))
    near = difflib.get_close_matches(value, NAMED, n=1)
    hint = f"did you mean {near[0]}? " if near else ""
    raise MissingFile(
        f"--datasets {value}: no such folder, nor one of {', '.join(NAMED)}; {hint}"
        "pass a folder of train/validation/test CSVs (text,label)"
    )


def cell_key(recipe: str, flags: list[str], dataset: str, seed: int) -> str:
    return json.dumps([recipe, flags, dataset, seed])


def read_results(path: Path) -> list[dict]:
    """The finished cells (a torn last line, from a killed run, is skipped with a warning)."""
    rows = []
    if path.is_file():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                print(f"warning: {path}:{number} is not JSON; skipped", file=sys.stderr)
    return rows


def short_hash(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:8]


def command(recipe: Path, cell: Cell, flags: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "tscratch", "fit", "--config", str(recipe),
        "--data.dataset", cell.dataset.source, "--seed_everything", str(cell.seed),
        "--trainer.default_root_dir", str(cell.folder), "--trainer.enable_progress_bar", "false",
        *flags,
    ]  # fmt: skip


def run_cell(cell: Cell, cmd: list[str], threads: int) -> dict:
    """Runs one fit (in a worker thread): its figures, wall time and saved config. Its output
    goes to `fit.log` in its folder as it runs (`tail -f` it)."""
    import yaml

    shutil.rmtree(cell.folder, ignore_errors=True)  # a run killed before it was recorded
    cell.folder.mkdir(parents=True)
    log = cell.folder / "fit.log"
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    with log.open("w", encoding="utf-8") as file:
        start = time.perf_counter()
        code = subprocess.run(cmd, stdout=file, stderr=subprocess.STDOUT, env=env).returncode
        wall = time.perf_counter() - start
    output = log.read_text(encoding="utf-8", errors="replace")
    found = final_summary(output)
    configs = sorted(cell.folder.glob("lightning_logs/version_*/config.yaml"))
    if code or not found or not configs:
        said = "".join(f"; {line}" for line in output.splitlines() if line.startswith("error:"))
        raise UserError(
            f"tscratch fit failed on {cell.dataset.name} seed {cell.seed} (exit {code}{said}); "
            f"see {log}"
        )
    config = yaml.safe_load(configs[-1].read_text(encoding="utf-8"))
    bar = [None if found[k] is None else float(found[k]) for k in ("bar_acc", "bar_f1")]
    return {
        "acc": float(found["acc"]),
        "f1": float(found["f1"]),
        "fit_tfidf_acc": bar[0],
        "fit_tfidf_f1": bar[1],
        "wall_s": round(wall, 1),
        "precision": str(config["trainer"]["precision"]),
        "limit_test_batches": config["trainer"]["limit_test_batches"],
        "data": config["data"],
        "log": str(log),
    }


def tfidf(data: dict, memo: dict) -> dict:
    """Rows and TF-IDF figures of the splits that a run's saved `data` arguments give (None
    for text pairs and multi-label data, which the bar does not score, as in fit)."""
    from tscratch.baseline import tfidf_scores
    from tscratch.data.splits import SPLIT_ARGS, load_labeled_splits

    args = {name: data[name] for name in SPLIT_ARGS if name in data}  # older runs: no encoding
    key = json.dumps(args, sort_keys=True)
    if key not in memo:
        splits = load_labeled_splits(**args, cache_dir=data.get("cache_dir"))
        found = {"rows": {s: len(splits[s]) for s in ("train", "validation", "test")}}
        found |= dict.fromkeys(("tfidf_acc", "tfidf_f1", "tfidf_val_acc"))
        if not args["text_pair_column"] and not isinstance(splits.train[0]["labels"], list):
            validation, test = tfidf_scores(splits)
            found["tfidf_acc"], found["tfidf_f1"] = float(test["acc"]), float(test["f1"])
            found["tfidf_val_acc"] = float(validation["acc"])
        memo[key] = found
    return memo[key]


def machine() -> dict:
    """What a wall time depends on: torch, the CPU and its bf16/AMX support, the GPU if any."""
    import torch

    try:
        cpu = re.search(r"^model name\s*: (.*)$", Path("/proc/cpuinfo").read_text(), re.M)[1]
    except (OSError, TypeError):  # not Linux
        cpu = ""
    info = {
        "torch": torch.__version__,
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "avx512_bf16": torch.cpu._is_avx512_bf16_supported(),
        "amx_tile": torch.cpu._is_amx_tile_supported(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def plan(args: argparse.Namespace, datasets: list[Dataset], rows: list[dict]) -> list[Cell]:
    """The cells not yet in `rows`, in dataset-then-seed order."""
    done = {cell_key(r["recipe"], r["flags"], r["dataset"], r["seed"]) for r in rows}
    setting = args.out / "runs" / f"{Path(args.recipe).stem}-{short_hash(args.recipe, args.flags)}"
    todo = [
        Cell(d, seed, setting / f"{d.name}-{short_hash(d.key)}" / f"seed{seed}")
        for d in datasets
        for seed in args.seeds
        if cell_key(args.recipe, args.flags, d.key, seed) not in done
    ]
    skipped = len(datasets) * len(args.seeds) - len(todo)
    print(f"{len(todo)} runs to do, {skipped} already in {args.results}", file=sys.stderr)
    if any(c.dataset.key == "bbc_headlines" for c in todo):
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from recipe_check import build  # the headlines CSV that recipe_check measures too

        headlines = Dataset(
            "bbc_headlines", "bbc_headlines", build("headlines", args.out / "data")[0]
        )
        todo = [
            Cell(headlines, c.seed, c.folder) if c.dataset.key == headlines.key else c for c in todo
        ]
    return todo


def run_cells(args: argparse.Namespace, recipe: Path, todo: list[Cell], rows: list[dict]) -> None:
    """Runs `todo`, `--parallel` at a time, appending each to `rows` and the results file as it
    ends. After a failure the runs under way finish (and are kept), and no other starts."""
    same = {
        "recipe": args.recipe,
        "flags": args.flags,
        "threads": args.threads,
        "parallel": args.parallel,
        "recipe_sha256": hashlib.sha256(recipe.read_bytes()).hexdigest(),
        **machine(),
    }
    memo, failure, stop = {}, None, threading.Event()

    def attempt(cell: Cell, cmd: list[str]) -> dict | None:
        if stop.is_set():  # a run failed (or Ctrl-C): start no other
            return None
        try:
            return run_cell(cell, cmd, args.threads)
        except BaseException:
            stop.set()
            raise

    args.results.parent.mkdir(parents=True, exist_ok=True)
    with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
        futures = {}
        for cell in todo:
            cmd = command(recipe, cell, args.flags)
            futures[pool.submit(attempt, cell, cmd)] = (cell, cmd)
        try:
            for future in concurrent.futures.as_completed(futures):
                try:
                    run = future.result()
                except UserError as error:
                    failure = failure or error
                    continue
                if run is not None:
                    rows.append(record(*futures[future], run, same, memo, args.results))
        finally:
            stop.set()
    if failure is not None:
        raise failure


def record(cell: Cell, cmd: list[str], run: dict, same: dict, memo: dict, results: Path) -> dict:
    """A finished run as a row of the results file, appended there at once."""
    row = {**same, "dataset": cell.dataset.key, "seed": cell.seed, "name": cell.dataset.name}
    row |= run | tfidf(run.pop("data"), memo) | {"command": cmd}
    row["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    append_line(results, json.dumps(row))
    print(progress(row), file=sys.stderr)
    return row


def append_line(path: Path, line: str) -> None:
    """Appends `line`, first ending a line torn by a killed run (which reading skips)."""
    with path.open("a+b") as file:  # writes append, wherever it has read
        end = file.seek(0, os.SEEK_END)
        if end and file.seek(end - 1) >= 0 and file.read(1) != b"\n":
            file.write(b"\n")
        file.write(line.encode() + b"\n")


def progress(row: dict) -> str:
    """One finished run, for stderr (with a warning if fit's own TF-IDF bar disagrees)."""
    line = (
        f"{row['name']} seed {row['seed']}: test accuracy {100 * row['acc']:.1f}%, macro-F1 "
        f"{100 * row['f1']:.1f}% (TF-IDF {_pct(row['tfidf_acc'])}%); {row['wall_s']:.0f} s, "
        f"{row['precision']}, {row['threads']} thread{'s' if row['threads'] > 1 else ''}"
    )
    if row["limit_test_batches"] not in (None, 1.0) or type(row["limit_test_batches"]) is int:
        line += (
            f"\nwarning: trainer.limit_test_batches {row['limit_test_batches']}: TF-IDF "
            "scored every test row, the model only some"
        )
    bar = row["fit_tfidf_acc"]
    limited = row["limit_test_batches"] not in (None, 1.0) or type(row["limit_test_batches"]) is int
    if bar is not None and not limited and abs(bar - (row["tfidf_acc"] or 0)) > 6e-5:  # 4 places
        line += f"\nwarning: fit's TF-IDF bar was {bar:.4f}, this script's {row['tfidf_acc']:.4f}"
    return line


def table(rows: list[dict], order: list[str], recipe: str, flags: list[str]) -> str:
    """The Markdown table of one recipe's cells, its per-seed lines and a legend."""
    by_dataset: dict[str, list[dict]] = {}
    for row in rows:
        by_dataset.setdefault(row["dataset"], []).append(row)
    lines = [
        "| dataset | rows (train / val / test) | seeds | test acc % (min–max) | macro-F1 % "
        "| TF-IDF acc % | TF-IDF macro-F1 % | Δ acc (points) | wall / run | precision | threads |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|---|--:|",
    ]
    seeds, mixed = [], []
    for key in (k for k in order if k in by_dataset):
        runs = sorted(by_dataset[key], key=lambda r: r["seed"])
        if len({json.dumps([r["rows"], r["tfidf_acc"]]) for r in runs}) > 1:
            mixed.append(runs[0]["name"])
        accs = [100 * r["acc"] for r in runs]
        acc, bar = statistics.mean(accs), runs[0]["tfidf_acc"]
        spread = f" ({min(accs):.1f}–{max(accs):.1f})" if len(accs) > 1 else ""
        rows_ = "{train:,} / {validation:,} / {test:,}".format(**runs[0]["rows"])
        lines.append(
            f"| {runs[0]['name']} | {rows_} | {len(runs)} | {acc:.1f}{spread} "
            f"| {statistics.mean(100 * r['f1'] for r in runs):.1f} | {_pct(bar)} "
            f"| {_pct(runs[0]['tfidf_f1'])} | {'–' if bar is None else f'{acc - 100 * bar:+.1f}'} "
            f"| {_seconds(statistics.mean(r['wall_s'] for r in runs))} "
            f"| {_values(runs, 'precision')} | {_values(runs, 'threads')} |"
        )
        each = ", ".join(f"seed {r['seed']} {a:.1f}" for r, a in zip(runs, accs, strict=True))
        seeds.append(f"- {runs[0]['name']}, test accuracy % per seed: {each}")
    extra = f" {' '.join(flags)}" if flags else ""
    legend = (
        f"Recipe: `tscratch fit --config {recipe}{extra}`. Test accuracy: mean over the model "
        "seeds (min–max); every seed and TF-IDF + logistic regression see the same split; "
        "Δ = recipe mean minus TF-IDF, in points. Wall time: mean per run, with "
        f"{_values(rows, 'parallel')} run(s) at a time."
    )
    if mixed:
        legend += f" Warning: the seeds of {', '.join(mixed)} saw different splits (data changed?)."
    return "\n".join([*lines, "", *seeds, "", legend])


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def _seconds(wall: float) -> str:
    return f"{wall:.0f} s" if wall < 100 else f"{wall / 60:.1f} min"


def _values(runs: list[dict], name: str) -> str:
    return ", ".join(sorted({str(r[name]) for r in runs}))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        recipe = recipe_file(args.recipe)
        values = args.datasets or ([] if args.table_only else list(NAMED))
        datasets = [d for v in values if (d := resolve_dataset(v)) is not None]
        if values and not datasets:
            raise UserError("no dataset left (see the lines above)")
        rows = read_results(args.results)
        try:
            if not args.table_only and (todo := plan(args, datasets, rows)):
                run_cells(args, recipe, todo, rows)
        finally:  # a failed run still shows the cells that finished
            shown = print_table(rows, datasets, args.recipe, args.flags)
        if not shown:
            flags = " ".join(args.flags) or "none"
            raise UserError(
                f"{args.results}: no results for --config {args.recipe} with fit flags {flags} "
                f"on these datasets ({len(rows)} rows of other runs); pass the --config, --smoke "
                "and --extra of the runs"
            )
    except UserError as error:
        return report(error)
    return 0


def print_table(rows: list[dict], datasets: list[Dataset], recipe: str, flags: list[str]) -> bool:
    """Prints the table of `recipe` + `flags` on `datasets` (all in `rows` when none); False
    when there is nothing to show."""
    ours = [r for r in rows if r["recipe"] == recipe and r["flags"] == flags]
    order = [d.key for d in datasets] or list(dict.fromkeys(r["dataset"] for r in ours))
    shown = [r for r in ours if r["dataset"] in order]
    if shown:
        print(table(shown, order, recipe, flags))
    return bool(shown)


if __name__ == "__main__":
    sys.exit(main())
