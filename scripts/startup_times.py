"""How long commands take to answer, beside `python -c "import torch"` on the same machine.

Usage: `python scripts/startup_times.py --model FOLDER [--repeats 5]` (FOLDER: an exported
model, `tscratch export --model CKPT --out FOLDER`). Each command runs `--repeats` times, the
commands interleaved (A B C A B C ...) so a busy machine slows them alike; prints one Markdown
table of median wall seconds and the ratio to importing torch. Compare ratios, not seconds.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def commands(model: str) -> dict[str, list[str]]:
    py, cli = sys.executable, [sys.executable, "-m", "tscratch"]
    return {
        'python -c "import torch"': [py, "-c", "import torch"],
        "tscratch --help": [*cli, "--help"],
        "tscratch predict --help": [*cli, "predict", "--help"],
        "tscratch predict --model FOLDER TEXT": [*cli, "predict", "--model", model, "Shares fell"],
        "tscratch test --help": [*cli, "test", "--help"],
        "tscratch serve --help": [*cli, "serve", "--help"],
        "tscratch fit --help": [*cli, "fit", "--help"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="an exported folder")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    runs = commands(args.model)
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, command in runs.items():
            start = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True)
            seconds[name].append(time.perf_counter() - start)
            if done.returncode != 0:
                sys.exit(f"error: {name} exited {done.returncode}: {done.stderr[-500:]}")
    torch_s = statistics.median(seconds['python -c "import torch"'])
    print(f"| command | median wall s ({args.repeats} runs) | x import torch |\n|---|--:|--:|")
    for name, values in seconds.items():
        median = statistics.median(values)
        print(f"| `{name}` | {median:.2f} | {median / torch_s:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
