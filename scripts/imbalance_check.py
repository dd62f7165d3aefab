"""Do class weights (and focal loss) help when one class is rare? Measured on BBC News.

Builds an imbalanced derivative of BBC News: the project's default split (80/10/10, seed 42),
with one class (the smallest in training, or `--minority NAME`) cut to `--keep` (5%) of its
training rows, drawn with a fixed seed; validation and test are left whole. The three splits are
written as JSONL files in one folder, and `python scripts/fit.py` trains on it for every arm and
seed (a run's own flags come after the `--` extras, so they win):

  none        cross-entropy, every class weighted 1 (fit.py's default)
  auto        cross-entropy with --model.class_weights auto (inverse label frequency)
  focal       focal loss (gamma 2) without class weights
  focal_auto  focal loss with --model.class_weights auto

Each run's best checkpoint (by `val/acc`) is evaluated on the whole test split by
`scripts/test.py`. Prints a Markdown table of the minority class's test recall, macro-F1 and
accuracy (mean ± sd over seeds, then each seed's value), fit.py's wall time and precision.
Each finished run is recorded in `OUT/results.json` as soon as it ends, and a rerun skips the
runs recorded there: an interrupted measurement resumes with the run it was in (delete the
file to measure again).

Usage: `python scripts/imbalance_check.py [--arms none auto] [--seeds 0 1 2] [--minority NAME]
[--keep 0.05] [--out DIR] [-- extra fit.py flags]`. With the default config each run takes
about as long as the default BBC run (minutes on a 2-core CPU); `-- --config tiny` checks the
plumbing in seconds.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import yaml

from tscratch.data.sources import column
from tscratch.data.splits import load_labeled_splits

SCRIPTS = Path(__file__).resolve().parent
ARMS = {
    "none": [],
    "auto": ["--model.class_weights", "auto"],
    "focal": ["--model.loss", "focal"],
    "focal_auto": ["--model.loss", "focal", "--model.class_weights", "auto"],
}
DATA_SEED = 0
"""Seed of the minority rows kept: the same data for every arm and run seed."""


def build(folder: Path, minority: str | None, keep: float) -> dict:
    """Writes the imbalanced splits to ``folder`` (train/validation/test.jsonl); returns what was
    cut: the minority class, its training rows before and after, and the split sizes."""
    splits = load_labeled_splits("bbc_news", None, None, None, None, 0.1, 0.1, 42, None)
    names = splits.label_names
    labels = column(splits.train, "labels")
    counts = Counter(labels)
    if minority is None:
        minority = names[min(counts, key=lambda c: (counts[c], c))]
    if minority not in names:
        raise SystemExit(f"--minority {minority!r} is not a class; pick one of {names}")
    target = names.index(minority)
    rows = [i for i, y in enumerate(labels) if y == target]
    kept = set(random.Random(DATA_SEED).sample(rows, max(1, round(keep * len(rows)))))
    train = [i for i, y in enumerate(labels) if y != target or i in kept]
    folder.mkdir(parents=True, exist_ok=True)
    for split, ds, indices in (
        ("train", splits.train, train),
        ("validation", splits.validation, range(len(splits.validation))),
        ("test", splits.test, range(len(splits.test))),
    ):
        texts, ids = column(ds, "text"), column(ds, "labels")
        with (folder / f"{split}.jsonl").open("w", encoding="utf-8") as file:
            for i in indices:
                file.write(json.dumps({"text": texts[i], "label": names[ids[i]]}) + "\n")
    return {
        "minority": minority,
        "minority_rows": [len(rows), len(kept)],
        "sizes": [len(train), len(splits.validation), len(splits.test)],
    }


def _run(script: str, args: list[str], log: Path) -> float:
    """Runs `scripts/<script> args`, its output saved to ``log``; returns its wall time (s)."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / script), *args], capture_output=True, text=True
    )
    log.write_text(done.stdout + done.stderr)
    if done.returncode:
        raise SystemExit(f"{script} failed (exit {done.returncode}); see {log}")
    return time.perf_counter() - start


def fit(dataset: Path, arm: str, seed: int, root: Path, extra: list[str], minority: str) -> dict:
    """Trains with fit.py, then evaluates its best checkpoint on the whole test split with
    scripts/test.py; returns minority recall, macro-F1, accuracy, fit.py's wall time and its
    precision (from the run's config.yaml)."""
    shutil.rmtree(root, ignore_errors=True)  # a run cut short earlier starts over
    root.mkdir(parents=True)
    args = [*extra, "--data.dataset", str(dataset), "--seed_everything", str(seed)]
    args += ["--trainer.default_root_dir", str(root), "--test", "false"]
    # The CSV logger skips the TensorBoard pictures, which only cost time here.
    args += ["--trainer.logger", "lightning.pytorch.loggers.CSVLogger"]
    args += ["--trainer.logger.save_dir", str(root), "--trainer.enable_progress_bar", "false"]
    wall = _run("fit.py", [*args, *ARMS[arm]], root / "fit.log")
    run = root / "lightning_logs" / "version_0"
    (best,) = (run / "checkpoints").glob("best-*.ckpt")
    _run("test.py", ["--ckpt_path", str(best), "--output", str(root / "test")], root / "test.log")
    report = json.loads((root / "test" / "metrics.json").read_text(encoding="utf-8"))
    (recall,) = [c["recall"] for c in report["per_class"] if c["label"] == minority]
    config = yaml.safe_load((run / "config.yaml").read_text())
    return {
        "recall": recall,
        "f1": report["macro_f1"],
        "acc": report["accuracy"],
        "wall_s": round(wall, 1),
        "precision": str(config["trainer"]["precision"]),
    }


def spread(values: list[float]) -> str:
    """``mean ± sd (each)`` in percent; no sd for a single value."""
    pct = [100 * v for v in values]
    each = ", ".join(f"{v:.1f}" for v in pct)
    if len(pct) == 1:
        return each
    return f"{statistics.mean(pct):.1f} ± {statistics.stdev(pct):.1f} ({each})"


def table(info: dict, results: dict, arms: list[str], seeds: list[int]) -> str:
    """The Markdown report of the runs of ``arms`` x ``seeds`` found in ``results``."""
    before, after = info["minority_rows"]
    train, val, test = info["sizes"]
    lines = [
        f"Imbalanced BBC News: {info['minority']} cut to {after} of its {before} training rows "
        f"({after / before:.0%}); {train:,} training rows; validation ({val}) and test ({test}) "
        f"whole. Test split, best checkpoint; seeds {seeds}.",
        "",
        f"| arm | {info['minority']} recall % | macro-F1 % | accuracy % | wall per run | "
        "precision |",
        "|---|---|---|---|---|---|",
    ]
    for arm in arms:
        runs = [results[f"{arm}-seed{s}"] for s in seeds if f"{arm}-seed{s}" in results]
        if not runs:
            continue
        lines.append(
            f"| {arm} | {spread([r['recall'] for r in runs])} | {spread([r['f1'] for r in runs])}"
            f" | {spread([r['acc'] for r in runs])} | "
            f"{statistics.mean(r['wall_s'] for r in runs):.0f} s | "
            f"{', '.join(sorted({r['precision'] for r in runs}))} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=["none", "auto"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--minority", help="class to cut (default: the smallest in training)")
    parser.add_argument("--keep", type=float, default=0.05, help="share of its rows kept")
    parser.add_argument("--out", type=Path, default=Path("imbalance_check"))
    parser.add_argument("extra", nargs="*", help="after --: more fit.py flags")
    args = parser.parse_args()
    if not 0 < args.keep <= 1:
        raise SystemExit(f"--keep ({args.keep}) must be in (0, 1]")
    info = build(args.out / "data", args.minority, args.keep)
    store = args.out / "results.json"
    results = json.loads(store.read_text()) if store.is_file() else {}
    settings = {"minority": info["minority"], "keep": args.keep, "extra": args.extra}
    if results.setdefault("settings", settings) != settings:
        raise SystemExit(
            f"{store} holds runs measured with {results['settings']}, not {settings}; "
            "pass another --out (or delete the file)"
        )
    for seed in args.seeds:
        for arm in args.arms:
            key = f"{arm}-seed{seed}"
            if key in results:
                continue
            run = fit(args.out / "data", arm, seed, args.out / key, args.extra, info["minority"])
            results[key] = run
            partial = store.with_suffix(".tmp")
            partial.write_text(json.dumps(results, indent=1))
            partial.replace(store)  # whole or not at all: a kill never tears it
            print(key, json.dumps(run), flush=True)
    print("\n" + table(info, results, args.arms, args.seeds))


if __name__ == "__main__":
    main()
