"""Export a checkpoint as a folder that loads without Lightning: `tscratch.load(DIR)`.

`tscratch export --model CKPT --out DIR [--onnx] [--quantize] [--report DIR]`
writes config.json, model.safetensors, tokenizer.json and a README.md model card (see
`tscratch.export`); `--onnx` adds model.onnx, `--quantize` model.int8.onnx. `--report` takes
the folder `tscratch test --output` writes (per-class table and confusion matrix on the card);
`--metrics` the JSON line tscratch test prints. The run's config.yaml, when it sits where
tscratch fit leaves it (next to the `checkpoints/` folder), is copied as training_config.yaml.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from tscratch.cli.parsing import ArgumentParser
from tscratch.errors import MissingFile, UserError, run_command
from tscratch.filesystem import check_writable


def run(args: argparse.Namespace) -> None:
    """Check the flags, read the checkpoint once, write the folder and say what it holds."""
    # Imported here, after the flags parse: `--help` and a bad flag answer without torch.
    from tscratch.export import export, require_export_extra
    from tscratch.training.checkpointing import read_checkpoint
    from tscratch.training.classification import ClassificationTask

    if args.onnx or args.quantize:  # before the slow part
        require_export_extra("--onnx" if args.onnx else "--quantize")
    metrics = _read_metrics(args.metrics) if args.metrics else None
    report, picture = _read_report(args.report) if args.report else (None, None)
    path = Path(args.ckpt_path)
    if not path.is_file():
        raise MissingFile(f"--model {args.ckpt_path}: no such file")
    # The folder is written beside --out, then moved there: its parent must take files.
    check_writable(Path(args.out).parent, "--out", shown=args.out)
    checkpoint = read_checkpoint(path)  # data only; one line if torn or foreign
    task = ClassificationTask.from_checkpoint(checkpoint)
    if task.tokenizer_json is None:
        raise UserError(f"{path} holds no tokenizer; was it saved by tscratch?")
    saved = path.resolve().parent.parent / "config.yaml"
    training_config = None
    if path.resolve().parent.name == "checkpoints" and saved.is_file():
        training_config = saved.read_text(encoding="utf-8")
    out = export(
        checkpoint,
        args.out,
        model=task.model,
        onnx=args.onnx,
        quantize=args.quantize,
        metrics=metrics,
        training_config=training_config,
        report=report,
        confusion_png=picture,
    )
    files = ", ".join(sorted(p.name for p in out.iterdir()))
    sys.stdout.write(f"wrote {out}: {files}\n")


def _read_metrics(name: str) -> dict[str, float]:
    path = Path(name)
    if not path.is_file():
        raise MissingFile(f"--metrics {name}: no such file")
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
        ok = isinstance(metrics, dict) and all(math.isfinite(v) for v in metrics.values())
    except (ValueError, TypeError):
        ok = False
    if not ok:
        raise UserError(
            f"--metrics {name}: expected one JSON object of numbers, as tscratch test prints"
        )
    return {str(k): float(v) for k, v in metrics.items()}


def _read_report(name: str) -> tuple[dict, Path | None]:
    """The metrics.json (and confusion_matrix.png, if there) of `tscratch test --output`."""
    folder = Path(name)
    path = folder / "metrics.json"
    if not path.is_file():
        raise MissingFile(f"--report {name}: no metrics.json there; run tscratch test --output")
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
        ok = isinstance(report, dict) and {"per_class", "accuracy", "macro_f1"} <= report.keys()
    except ValueError:
        ok = False
    if not ok:
        raise UserError(f"--report {name}: {path} is not a report written by tscratch test")
    picture = folder / "confusion_matrix.png"
    return report, picture if picture.is_file() else None


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0], renamed={"--ckpt_path": "--model"})
    parser.add_argument(
        "--model", dest="ckpt_path", required=True, metavar="CKPT",
        help="checkpoint written by tscratch fit",
    )  # fmt: skip
    parser.add_argument("--out", required=True, help="folder to create (must not hold files)")
    parser.add_argument("--onnx", action="store_true", help="also write model.onnx")
    parser.add_argument(
        "--quantize", action="store_true", help="also write model.int8.onnx (implies --onnx)"
    )
    parser.add_argument("--metrics", help="JSON file of test metrics (tscratch test output)")
    parser.add_argument(
        "--report",
        help="folder written by tscratch test --output: per-class table and confusion picture "
        "on the model card",
    )
    return run_command(run, parser.parse_args(argv))
