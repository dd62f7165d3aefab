"""Does self-pretraining pay? pretrain.py, then fit.py from it, against the same fit from scratch.

Runs, one after another (each alone on the machine, so the wall times compare):
  1. `python scripts/pretrain.py` (pretrain.yaml: masked-LM on the training split's texts), unless
     `--pretrained CKPT` names a finished one;
  2. for each seed, `python scripts/fit.py --model.init_from CKPT` (default.yaml's recipe);
  3. for each seed, the same fit.py recipe and architecture from random weights;
and TF-IDF + logistic regression on the same split. Prints a Markdown table (mean and each seed)
and appends JSON lines to `DIR/results.jsonl`; run again, it skips the runs recorded there.

Usage: `python scripts/pretrain_check.py [--seeds 0 1 2] [--out DIR] [--pretrained CKPT]
[-- extra fit.py flags]`. Needs scikit-learn for the TF-IDF row. With the defaults this is about
15 minutes of pretraining and 6 x 8 minutes of fine-tuning on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from tscratch.baseline import tfidf_scores
from tscratch.config import EncoderConfig
from tscratch.data.splits import load_labeled_splits

SCRIPTS = Path(__file__).resolve().parent


def run(script: str, args: list[str], root: Path) -> tuple[str, float]:
    """Runs `scripts/<script> args` with its run folder at ``root``; stdout and wall seconds."""
    root.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(SCRIPTS / script), *args]
    command += ["--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    (root / "run.log").write_text(done.stdout + done.stderr)
    if done.returncode:
        raise SystemExit(f"{script} failed (exit {done.returncode}); see {root / 'run.log'}")
    return done.stdout, wall


def architecture_flags(checkpoint: Path) -> list[str]:
    """`--model.<field> value` for every architecture field of a pretrain.py checkpoint."""
    hparams = torch.load(checkpoint, map_location="cpu", weights_only=True)["hyper_parameters"]
    skip = EncoderConfig.RUNTIME_FIELDS | {"vocab_size", "pad_id"}
    flags = []
    for field in dataclasses.fields(EncoderConfig):
        if field.name not in skip and field.name in hparams:
            value = hparams[field.name]
            flags += [
                f"--model.{field.name}",
                value if isinstance(value, str) else json.dumps(value),
            ]
    return flags


def test_scores(stdout: str) -> tuple[float, float]:
    found = re.search(r"test accuracy ([\d.]+), macro-F1 ([\d.]+)", stdout)
    if not found:
        raise SystemExit("fit.py printed no test accuracy")
    return float(found[1]), float(found[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path("pretrain_check"))
    parser.add_argument("--pretrained", type=Path, default=None, help="a pretrain.py last.ckpt")
    parser.add_argument("extra", nargs="*", help="after --: more fit.py flags for every fit")
    args = parser.parse_args()
    results = args.out / "results.jsonl"
    args.out.mkdir(parents=True, exist_ok=True)

    done = {}  # runs an earlier, interrupted call already finished: not run again
    if results.is_file():
        for line in results.read_text().splitlines():
            entry = json.loads(line)
            done[(entry["run"], entry.get("seed"))] = entry

    def record(**entry) -> dict:
        with results.open("a") as file:
            file.write(json.dumps(entry) + "\n")
        print(json.dumps(entry), flush=True)
        return entry

    checkpoint, pretrain_wall = args.pretrained, None
    if checkpoint is None:
        stdout, pretrain_wall = run("pretrain.py", [], args.out / "pretrain")
        checkpoint = next(
            (args.out / "pretrain").glob("lightning_logs/version_*/checkpoints/last.ckpt")
        )
        found = re.search(r"perplexity ([\d.]+), masked-token accuracy ([\d.]+)", stdout)
        record(run="pretrain", wall_s=round(pretrain_wall), perplexity=float(found[1]),
               mlm_acc=float(found[2]))  # fmt: skip

    rows: dict[str, list[dict]] = {"self-pretrained": [], "no pretraining": []}
    flags = {
        "self-pretrained": ["--model.init_from", str(checkpoint)],
        "no pretraining": architecture_flags(checkpoint),
    }
    for seed in args.seeds:  # seed by seed: the first pair already shows the direction
        for name, extra in flags.items():
            if (name, seed) in done:
                rows[name].append(done[(name, seed)])
                continue
            root = args.out / f"{name.replace(' ', '_')}-seed{seed}"
            stdout, wall = run(
                "fit.py", [*extra, "--seed_everything", str(seed), *args.extra], root
            )
            acc, f1 = test_scores(stdout)
            rows[name].append(record(run=name, seed=seed, acc=acc, f1=f1, wall_s=round(wall)))

    splits = load_labeled_splits("bbc_news", None, None, None, None, 0.1, 0.1, 42, None)
    tfidf = tfidf_scores(splits)[1]
    print("\n| model | test accuracy % (seeds) | macro-F1 % | wall per run |")
    print("|---|---|---|---|")
    for name, runs in rows.items():
        accs = [100 * r["acc"] for r in runs]
        spread = f" ({', '.join(f'{a:.2f}' for a in accs)})"
        wall = round(statistics.mean(r["wall_s"] for r in runs))
        if name == "self-pretrained" and pretrain_wall is not None:
            wall_text = f"{wall} s + {round(pretrain_wall)} s pretraining"
        else:
            wall_text = f"{wall} s"
        print(
            f"| {name} | {statistics.mean(accs):.2f}{spread} | "
            f"{100 * statistics.mean(r['f1'] for r in runs):.2f} | {wall_text} |"
        )
    print(
        f"| TF-IDF + logistic regression | {100 * tfidf['acc']:.2f} | {100 * tfidf['f1']:.2f} | - |"
    )


if __name__ == "__main__":
    main()
