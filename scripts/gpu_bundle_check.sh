#!/usr/bin/env bash
# The GPU check's one command (scripts/gpu_bundle.py) in a clean Python like the GPU machines'
# (issue 41): a virtual environment of CPython 3.12 (no system site-packages) holding only
# packages of their image, at the versions /work/.library/device/KINDS.md gives (torch 2.11.0
# as a CUDA build, which runs on the CPU here, Lightning 2.6.6, torchmetrics 1.9.0, ...), and
# none of what tscratch needs beyond them. Then it builds the bundle, runs the printed command
# from the repository's root with $OUT in a temporary folder (gpu_check's CPU subset, with no
# GPU), and prints the times and sizes. Run by hand (about 5.5 GB and 3 minutes the first time,
# the environment is kept for later runs):
#
#   bash scripts/gpu_bundle_check.sh [ENV_DIR]     # default /tmp/gpu-image-env
#
# PYTHON312 names the interpreter (default: python3.12 on the PATH, else pyenv's 3.12).
set -euo pipefail
cd "$(dirname "$0")/.."
env_dir=${1:-/tmp/gpu-image-env}
python312=${PYTHON312:-$(command -v python3.12 || ls -d /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | tail -1)}
[ -x "$python312" ] || { echo "no Python 3.12 found: set PYTHON312" >&2; exit 1; }

# The image's packages that tscratch or gpu_check import, at the image's versions where known.
image_packages=(torch==2.11.0 lightning==2.6.6 pytorch-lightning==2.6.6 torchmetrics==1.9.0
  tokenizers==0.23.2 safetensors==0.8.0 huggingface-hub==1.33.0 transformers==5.17.0 numpy
  pyarrow pandas scikit-learn matplotlib tensorboard fsspec xxhash pyyaml tqdm requests
  charset-normalizer filelock packaging pytest pytest-xdist hypothesis)
if [ ! -x "$env_dir/bin/python3" ] || ! "$env_dir/bin/python3" -c "import torch" 2>/dev/null; then
  "$python312" -m venv "$env_dir"
  "$env_dir/bin/python3" -m pip install -q "${image_packages[@]}"
fi
# What pip brought that the image does not hold goes again (typer's pydantic, say), so nothing
# here hides a package the bundle should carry.
extra=$(python3 - "$env_dir/bin/python3" <<'EOF'
import json, subprocess, sys
sys.path.insert(0, "scripts")
from gpu_bundle import GPU_MACHINE
from packaging.utils import canonicalize_name
listed = subprocess.run([sys.argv[1], "-m", "pip", "list", "--format=json"], capture_output=True,
                        text=True, check=True).stdout
print(" ".join(p["name"] for p in json.loads(listed)
               if canonicalize_name(p["name"]) not in GPU_MACHINE))
EOF
)
if [ -n "$extra" ]; then
  echo "removing what the image lacks: $extra"
  "$env_dir/bin/python3" -m pip uninstall -q -y $extra
fi
"$env_dir/bin/python3" -c "import sys, torch; print('clean environment: Python', sys.version.split()[0], 'torch', torch.__version__)"
if "$env_dir/bin/python3" -c "import jsonargparse" 2>/dev/null; then
  echo "the environment already holds jsonargparse: not clean" >&2; exit 1
fi

began=$(date +%s.%N)
python3 scripts/gpu_bundle.py
built=$(date +%s.%N)
command=$(python3 scripts/gpu_bundle.py --print-command)
site=/tmp/tscratch-site
rm -rf "$site"
out=$(mktemp -d)
home=$(mktemp -d)
echo
echo "running, with $env_dir/bin first on the PATH and OUT=$out:"
echo "$command"
start=$(date +%s.%N)
status=0
PATH="$env_dir/bin:$PATH" OUT="$out" HOME="$home" bash -c "$command" || status=$?
end=$(date +%s.%N)
python3 - "$began" "$built" "$start" "$end" "$site" "$status" <<'EOF'
import sys
from pathlib import Path
began, built, start, end = map(float, sys.argv[1:5])
site = Path(sys.argv[5])
size = sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
print(f"bundle built in {built - began:.1f} s; the command ran {end - start:.0f} s "
      f"(exit {sys.argv[6]}); installed {size / 2**20:.1f} MiB into {site}")
EOF
exit "$status"
