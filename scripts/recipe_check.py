"""Does the default recipe hold on short and long, small and large data? Measured, not assumed.

Builds offline variants of BBC News and runs `python scripts/fit.py` (default.yaml, whose `auto`
settings adapt to the data) on each, next to TF-IDF + logistic regression on the same split:

  articles          the built-in corpus (~450 tokens per text)
  headlines         each file's first line only (~8 tokens: a short-text task)
  first_sentence    the first sentence of each body (~25 tokens)
  articles_N        articles with only N training rows (validation and test stay whole)

Usage: `python scripts/recipe_check.py [--variants headlines articles_500] [--seeds 0 1 2]
[--split_seeds 42 1 2] [--out DIR] [--article_split] [-- extra fit.py flags]`.
`--split_seeds` runs each variant on other splits of the same rows too (`--data.seed`, which
also seeds the training order; TF-IDF is fitted on each split). By default a cut variant is one
CSV that fit.py splits itself; `--article_split` writes train/validation/test files that keep
each article's side of the articles' split instead, so a pretrain.py checkpoint (which read the
articles' training split) never saw a test headline or sentence: use it with
`-- --model.init_from CKPT`. Prints a Markdown table and appends JSON lines to
`DIR/results.jsonl`. Needs scikit-learn (for the TF-IDF bar: `pip install "tscratch[baseline]"`).
Each article run takes about as long as the default run (the epoch rule keeps ~450 updates);
headline runs one to two minutes.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tscratch.baseline import require_baseline_extra, tfidf_scores
from tscratch.data.loading import load_bbc_news
from tscratch.data.splits import load_labeled_splits

SCRIPTS = Path(__file__).resolve().parent
VARIANTS = ("articles", "headlines", "first_sentence", "articles_500", "articles_1000")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


def headline(text: str) -> str:
    return text.strip().split("\n", 1)[0].strip()


def first_sentence(text: str) -> str:
    body = text.strip().split("\n", 1)[1].strip() if "\n" in text.strip() else text
    return _SENTENCE_END.split(body, maxsplit=1)[0].strip()


def build(variant: str, folder: Path, article_split: bool = False) -> tuple[str, int | None]:
    """The `--data.dataset` value and `--data.train_rows` of a variant (writes a CSV if needed;
    with `article_split`, a folder of train/validation/test CSVs on the articles' split)."""
    if variant == "articles":
        return "bbc_news", None
    if variant.startswith("articles_"):
        return "bbc_news", int(variant.removeprefix("articles_"))
    cut = {"headlines": headline, "first_sentence": first_sentence}[variant]
    if article_split:
        return write_split_files(cut, folder / f"bbc_{variant}_article_split"), None
    corpus = load_bbc_news()
    names = corpus.features["label"].names
    path = folder / f"bbc_{variant}.csv"
    folder.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(["text", "label"])
        for row in corpus:
            writer.writerow([cut(row["text"]), names[row["label"]]])
    return str(path), None


def write_split_files(cut, folder: Path) -> str:
    """train/validation/test CSVs of `cut(article)` on fit.py's split of the articles."""
    splits = load_labeled_splits("bbc_news", None, None, None, None, 0.1, 0.1, 42, None)
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("train", "validation", "test"):
        with (folder / f"{name}.csv").open("w", newline="", encoding="utf-8") as file:
            writer = csv.writer(file)
            writer.writerow(["text", "label"])
            for text, label in zip(splits[name]["text"], splits[name]["labels"], strict=True):
                writer.writerow([cut(text), splits.label_names[label]])
    return str(folder)


def fit(
    dataset: str, rows: int | None, seed: int, split_seed: int, root: Path, extra: list[str]
) -> dict:
    """Runs fit.py; returns its test accuracy/F1, the auto settings it printed and wall time."""
    command = [sys.executable, str(SCRIPTS / "fit.py"), "--data.dataset", dataset]
    command += ["--seed_everything", str(seed), "--trainer.default_root_dir", str(root)]
    command += ["--data.seed", str(split_seed)]
    command += ["--trainer.enable_progress_bar", "false"]
    if rows is not None:
        command += ["--data.train_rows", str(rows)]
    start = time.perf_counter()
    done = subprocess.run([*command, *extra], capture_output=True, text=True)
    wall = time.perf_counter() - start
    (root / "fit.log").write_text(done.stdout + done.stderr)
    found = re.search(r"test accuracy ([\d.]+), macro-F1 ([\d.]+)", done.stdout)
    if done.returncode or not found:
        raise SystemExit(f"fit.py failed (exit {done.returncode}); see {root / 'fit.log'}")
    auto = re.findall(r"^  (\S+)\s+(\S+)\s", done.stdout, flags=re.MULTILINE)
    return {
        "acc": float(found[1]),
        "f1": float(found[2]),
        "wall_s": round(wall),
        "auto": dict(auto),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--out", type=Path, default=Path("recipe_check"))
    parser.add_argument(
        "--article_split", action="store_true",
        help="cut variants keep the articles' train/validation/test split (for init_from)",
    )  # fmt: skip
    parser.add_argument(
        "--split_seeds", nargs="+", type=int, default=[42],
        help="data.seed of each split to run on (TF-IDF is fitted on each): one split of a few "
        "hundred test rows cannot tell models a few points apart",
    )  # fmt: skip
    parser.add_argument("extra", nargs="*", help="after --: more fit.py flags")
    args = parser.parse_args()
    if args.article_split and args.split_seeds != [42]:
        parser.error("--article_split keeps the articles' own split (seed 42); drop --split_seeds")
    if any(arg.split("=")[0] == "--data.seed" for arg in args.extra):
        parser.error("pass split seeds as --split_seeds (TF-IDF must see the same split)")
    require_baseline_extra()  # before any file is written
    table = []
    for variant in args.variants:
        dataset, rows = build(variant, args.out / "data", args.article_split)
        for split_seed in args.split_seeds:
            splits = load_labeled_splits(
                dataset, None, None, None, None, 0.1, 0.1, split_seed, rows
            )
            tfidf_val, tfidf = tfidf_scores(splits)
            runs = []
            for seed in args.seeds:
                name = f"{variant}-seed{seed}" + ("" if split_seed == 42 else f"-split{split_seed}")
                run = fit(dataset, rows, seed, split_seed, args.out / name, args.extra)
                record = {"variant": variant, "split_seed": split_seed, "seed": seed, **run}
                record |= {"tfidf_acc": tfidf["acc"], "tfidf_val_acc": tfidf_val["acc"]}
                with (args.out / "results.jsonl").open("a") as file:
                    file.write(json.dumps(record) + "\n")
                print(json.dumps(record), flush=True)
                runs.append(run)
            accs = [r["acc"] for r in runs]
            table.append(
                f"| {variant} | {split_seed} | {len(splits.train):,} | {runs[0]['auto']} | "
                f"{100 * statistics.mean(accs):.1f} "
                f"({', '.join(f'{100 * a:.1f}' for a in accs)}) | "
                f"{100 * statistics.mean(r['f1'] for r in runs):.1f} | {100 * tfidf['acc']:.1f} | "
                f"{round(statistics.mean(r['wall_s'] for r in runs))} s |"
            )
    print(
        "\n| data | split seed | train rows | auto settings | test acc % (seeds) | macro-F1 % "
        "| TF-IDF acc % | wall |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(table))


if __name__ == "__main__":
    main()
