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
   default recipe), under `16-mixed`: wall time and test accuracy.

Without CUDA, steps 2-4 run their CPU subset (a minute) and 5-7 are skipped, each named so in
the summary; tests/test_gpu_check.py runs that in CI. Nothing needs the internet.

Usage: `python scripts/gpu_check.py [--out DIR] [--only STEP ...] [--skip STEP ...]`. With
`--budget S` (default 480) a step that would start after S seconds is skipped and a command
still running at S seconds is stopped (its step reports the time-out), so the whole run fits
the device time at hand; the JSON and the summary are rewritten after every step, so a run
killed from outside still leaves both.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = ("environment", "gpu_tests", "sdpa_kernels", "tiny_fit", "compile", "bench_grid",
         "bbc_default")  # fmt: skip
CUDA_ONLY = ("compile", "bench_grid", "bbc_default")
COMPILE_BATCH = (32, 512)
"""(B, T) of the compile step's fixed-shape training batch."""


DEADLINE = [float("inf")]
"""perf_counter() at which `--budget` runs out (set by `main`): a command still running then is
stopped (one started later gets a second); `subprocess.run` stops the command it started, not
processes that command spawned."""


def run(command: list[str], cwd: Path, timeout: float, env: dict | None = None) -> dict:
    """A subprocess: exit code, wall seconds and the tail of its output. It is stopped after
    ``timeout`` seconds or at the budget's end, whichever comes first."""
    start = time.perf_counter()
    timeout = max(1.0, min(timeout, DEADLINE[0] - start))
    try:
        done = subprocess.run(
            command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
            env={**os.environ, **(env or {})},
        )  # fmt: skip
        code, out = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as stop:
        code, out = 124, f"timed out after {timeout:.0f} s\n{stop.stdout or ''}{stop.stderr or ''}"
    return {"command": command, "rc": code, "wall_s": round(time.perf_counter() - start, 1),
            "tail": out[-3000:]}  # fmt: skip


def tscratch(*args: object) -> list[str]:
    return [sys.executable, "-m", "tscratch", *map(str, args)]


def environment(cuda: bool, out: Path) -> dict:
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
    return {"ok": True, **info}


def gpu_tests(cuda: bool, out: Path) -> dict:
    result = run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-n", "0", "-p",
                  "no:cacheprovider", "tests/test_gpu.py"], REPO, 300)  # fmt: skip
    counts = dict.fromkeys(("tests_passed", "tests_failed", "tests_skipped", "tests_error"), 0)
    for number, word in re.findall(r"(\d+) (passed|failed|skipped|error)", result["tail"]):
        counts[f"tests_{word}"] = int(number)
    return {"ok": result["rc"] == 0, **counts, "wall_s": result["wall_s"], "tail": result["tail"]}


def sdpa_kernels(cuda: bool, out: Path) -> dict:
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
        keep = torch.ones(8, 1, 1, 512, dtype=torch.bool, device=device)
        keep[:, :, :, 400:] = False
        for mask_name, mask in (("no mask", None), ("padding mask", keep)):
            works = []
            for backend in backends:
                try:
                    with sdpa_kernel([getattr(SDPBackend, backend)]):
                        F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
                    works.append(backend.lower())
                except RuntimeError:
                    pass
            table[f"{name}, {mask_name}"] = works
    return {"ok": True, "device": device, "backends": table}


def tiny_fit(cuda: bool, out: Path) -> dict:
    precisions = ("16-mixed", "bf16-mixed") if cuda else ("32-true",)
    runs = {}
    for precision in precisions:
        root = out / "tiny_fit" / precision
        root.mkdir(parents=True, exist_ok=True)
        base = ["fit", "--config", "tiny", "--trainer.precision", precision,
                "--trainer.default_root_dir", root,
                "--trainer.enable_progress_bar", "false"]  # fmt: skip
        if not cuda:  # the CPU subset: a smoke run, seconds
            base += ["--trainer.limit_train_batches", "3", "--baseline", "false"]
        first = run(tscratch(*base), root, 300)
        resumed = run(tscratch(*base, "--ckpt_path", "last", "--trainer.max_epochs", "2"),
                      root, 300)  # fmt: skip
        last = root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
        predicted = run(tscratch("predict", "--model", last, "Shares fell sharply"), root, 120)
        accuracy = re.search(r"test accuracy (\d\.\d+)", resumed["tail"])
        runs[precision] = {
            "fit_rc": first["rc"], "fit_s": first["wall_s"],
            "resume_rc": resumed["rc"], "resume_s": resumed["wall_s"],
            "resumed_from": "resuming from" in resumed["tail"],
            "predict_rc": predicted["rc"], "test_acc": float(accuracy[1]) if accuracy else None,
            "tail": (first["tail"] if first["rc"] else resumed["tail"])[-1500:],
        }  # fmt: skip
    ok = all(r["fit_rc"] == r["resume_rc"] == r["predict_rc"] == 0 and r["resumed_from"]
             for r in runs.values())  # fmt: skip
    return {"ok": ok, "runs": runs}


def compile_steps(cuda: bool, out: Path) -> dict:
    """Train steps/s of eager, compiled and reduce-overhead models at fixed shapes."""
    import torch

    from tscratch.config import EncoderConfig
    from tscratch.model import TransformerClassifier

    shapes = {
        "default (d_model 128, 2 layers)": dict(d_model=128, num_heads=4, d_ff=512, num_layers=2,
                                                norm_first=True),
        "article (d_model 256, 6 layers)": dict(d_model=256, num_heads=8, d_ff=1024, num_layers=6),
    }  # fmt: skip
    results = {}
    for label, sizes in shapes.items():
        config = EncoderConfig(vocab_size=8000, max_len=COMPILE_BATCH[1], **sizes)
        device = "cuda" if cuda else "cpu"
        ids = torch.randint(1, 8000, COMPILE_BATCH, device=device)
        mask = torch.ones_like(ids, dtype=torch.bool)
        labels = torch.randint(0, 5, COMPILE_BATCH[:1], device=device)
        row = {}
        for mode in ("eager", "default", "reduce-overhead"):
            torch.manual_seed(0)
            model = TransformerClassifier(config, 5).to(device)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=cuda)
            step_model = model if mode == "eager" else torch.compile(model, mode=mode)
            row[mode] = _timed_steps(step_model, optimizer, (ids, mask, labels))
        results[label] = row
    shape = f"B={COMPILE_BATCH[0]}, T={COMPILE_BATCH[1]}, bf16 autocast, fused AdamW"
    return {"ok": True, "shape": shape, "results": results}


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


def bench_grid(cuda: bool, out: Path) -> dict:
    target = out / "bench.json"
    result = run([sys.executable, "scripts/bench.py", "--sizes", "128", "512", "2048",
                  "--precisions", "fp32", "fp16", "bf16", "--reps", "3", "--out", target],
                 REPO, 420)  # fmt: skip
    return {"ok": result["rc"] == 0, "wall_s": result["wall_s"], "json": str(target),
            "table": result["tail"]}  # fmt: skip


def bbc_default(cuda: bool, out: Path) -> dict:
    runs = {}
    for recipe in ("plain", "auto"):
        root = out / "bbc" / recipe
        root.mkdir(parents=True, exist_ok=True)
        result = run(tscratch("fit", "--recipe", recipe, "--trainer.precision", "16-mixed",
                              "--trainer.default_root_dir", root,
                              "--trainer.enable_progress_bar", "false"), root, 600)  # fmt: skip
        found = re.search(r"test accuracy (\d\.\d+), macro-F1 (\d\.\d+) \(TF-IDF .*?accuracy "
                          r"(\d\.\d+)", result["tail"])  # fmt: skip
        runs[recipe] = {"rc": result["rc"], "wall_s": result["wall_s"],
                        "test_acc": float(found[1]) if found else None,
                        "tfidf_acc": float(found[3]) if found else None,
                        "tail": result["tail"][-1500:]}  # fmt: skip
    return {"ok": all(r["rc"] == 0 for r in runs.values()), "runs": runs}


STEP_FUNCTIONS: dict[str, Callable[[bool, Path], dict]] = {
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
        + f"; total {report['wall_s']:.0f} s.",
        "",
        "| step | result | seconds |",
        "|---|---|---|",
    ]
    for name in STEPS:
        step = report["steps"].get(name)
        if step is None:
            continue
        shown = step.get("skipped") or ("ok" if step.get("ok") else "FAILED")
        if name == "gpu_tests" and "tests_passed" in step:
            shown += f" ({step['tests_passed']} passed, {step['tests_skipped']} skipped)"
        lines.append(f"| {name} | {shown} | {step.get('step_s', 0):.0f} |")
    kernels = report["steps"].get("sdpa_kernels", {}).get("backends")
    if kernels:
        lines += ["", "SDPA backends that accept the call (B=8, H=4, T=512, head 32):", ""]
        lines += [f"- {case}: {', '.join(works) or 'none'}" for case, works in kernels.items()]
    fits = report["steps"].get("tiny_fit", {}).get("runs", {})
    if fits:
        lines += ["", "Tiny fit, resume and predict:", ""]
        lines += [f"- {p}: fit {r['fit_s']} s, resume {r['resume_s']} s, test accuracy "
                  f"{r['test_acc']}" for p, r in fits.items()]  # fmt: skip
    compiled = report["steps"].get("compile", {}).get("results", {})
    for label, row in compiled.items():
        cells = ", ".join(f"{mode} {r['ms_per_step']} ms/step ({r['tokens_per_s']:,} tokens/s, "
                          f"warm-up {r['warmup_s']} s)" for mode, r in row.items())  # fmt: skip
        lines.append(f"- {label}: {cells}")
    for recipe, r in report["steps"].get("bbc_default", {}).get("runs", {}).items():
        lines.append(f"- BBC News, --recipe {recipe}, 16-mixed: test accuracy {r['test_acc']} "
                     f"(TF-IDF {r['tfidf_acc']}), {r['wall_s']} s")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", type=Path, default=os.environ.get("OUT"),
                        help="where the JSON and Markdown go (default: $OUT)")  # fmt: skip
    parser.add_argument("--only", nargs="+", choices=STEPS, help="run these steps only")
    parser.add_argument("--skip", nargs="+", choices=STEPS, default=[], help="skip these")
    parser.add_argument("--budget", type=float, default=480, help="seconds for all steps")
    args = parser.parse_args(argv)
    if args.out is None:
        parser.error("no --out and no $OUT: say where the results go")
    import torch

    cuda = torch.cuda.is_available()
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "cuda": cuda, "steps": {}}
    start = time.perf_counter()
    DEADLINE[0] = start + args.budget
    for name in STEPS:
        if (args.only and name not in args.only) or name in args.skip:
            report["steps"][name] = {"skipped": "not asked for"}
        elif name in CUDA_ONLY and not cuda:
            report["steps"][name] = {"skipped": "skipped: no CUDA device"}
        elif time.perf_counter() - start > args.budget:
            report["steps"][name] = {"skipped": f"skipped: past the {args.budget:.0f} s budget"}
        else:
            print(f"gpu_check: {name} ...", file=sys.stderr, flush=True)
            began = time.perf_counter()
            try:
                result = STEP_FUNCTIONS[name](cuda, args.out)
            except Exception as error:  # a step's failure is reported, the others still run
                result = {"ok": False, "error": f"{type(error).__name__}: {error}"}
            result["step_s"] = round(time.perf_counter() - began, 1)
            report["steps"][name] = result
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
