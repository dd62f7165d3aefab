"""`RunLogger`: a new run's `version_N` folder is claimed when its number is chosen, so two runs
started together in one folder never share one."""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.loggers import TensorBoardLogger

from tscratch.training.run_logger import RunLogger


def test_a_new_run_claims_the_next_free_folder_as_it_picks_it(tmp_path):
    first = RunLogger(tmp_path, name="lightning_logs")
    assert first.version == 0
    assert (tmp_path / "lightning_logs" / "version_0").is_dir()  # claimed at once, not later
    assert RunLogger(tmp_path, name="lightning_logs").version == 1
    assert sorted(p.name for p in (tmp_path / "lightning_logs").iterdir()) == [
        "version_0",
        "version_1",
    ]


def test_a_run_that_read_a_stale_listing_moves_to_the_next_number(tmp_path, monkeypatch):
    # Two runs listed lightning_logs/ at the same moment: both read "next is 0". The other run
    # created version_0 first; this one must not write into it.
    (tmp_path / "lightning_logs" / "version_0").mkdir(parents=True)
    (tmp_path / "lightning_logs" / "version_1").mkdir()
    monkeypatch.setattr(TensorBoardLogger, "_get_next_version", lambda self: 0)
    assert RunLogger(tmp_path, name="lightning_logs").version == 2
    assert (tmp_path / "lightning_logs" / "version_2").is_dir()
    # The test can fail: Lightning's own logger, given the same listing, takes version_0.
    assert TensorBoardLogger(tmp_path, name="lightning_logs").version == 0


def test_a_given_version_is_used_as_given_and_nothing_is_created(tmp_path):
    logger = RunLogger(tmp_path, name="lightning_logs", version=3)
    assert logger.version == 3 and logger.log_dir.endswith("version_3")
    assert not (tmp_path / "lightning_logs").exists()


def test_other_processes_of_a_run_take_lightnings_number_and_claim_nothing(tmp_path, monkeypatch):
    from lightning.pytorch.utilities import rank_zero_only

    monkeypatch.setattr(rank_zero_only, "rank", 1)
    assert RunLogger(tmp_path, name="lightning_logs").version == 0
    assert not (tmp_path / "lightning_logs").exists()


def test_release_removes_the_folders_it_made_while_empty_and_keeps_written_ones(tmp_path):
    root = tmp_path / "root"
    logger = RunLogger(root, name="lightning_logs")
    assert logger.version == 0 and (root / "lightning_logs" / "version_0").is_dir()
    logger.release()
    assert not root.exists() and tmp_path.is_dir()  # what it made, nothing above
    (tmp_path / "kept" / "lightning_logs" / "version_0").mkdir(parents=True)
    logger = RunLogger(tmp_path / "kept", name="lightning_logs")
    assert logger.version == 1
    (tmp_path / "kept" / "lightning_logs" / "version_1" / "events").write_text("x")
    logger.release()  # written into: kept, and so is every folder above it
    assert (tmp_path / "kept" / "lightning_logs" / "version_1" / "events").is_file()
    RunLogger(tmp_path / "kept", name="lightning_logs", version=7).release()  # claimed nothing
    assert sorted(p.name for p in (tmp_path / "kept" / "lightning_logs").iterdir()) == [
        "version_0",
        "version_1",
    ]


def test_the_folder_claimed_is_the_one_lightning_writes_to_with_home_and_dots(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    logger = RunLogger("~/runs", name="lightning_logs")
    assert logger.version == 0
    assert Path(logger.log_dir) == tmp_path / "home" / "runs" / "lightning_logs" / "version_0"
    assert Path(logger.log_dir).is_dir() and not (tmp_path / "~").exists()  # no literal ~ folder
    logger.release()
    assert not (tmp_path / "home").exists()
    (tmp_path / "keep").mkdir()  # the user's, empty: `new/..` must not count it as made here
    logger = RunLogger("new/../keep/sub", name="lightning_logs")
    assert logger.version == 0 and (tmp_path / "keep" / "sub" / "lightning_logs").is_dir()
    logger.release()
    assert (tmp_path / "keep").is_dir() and not (tmp_path / "keep" / "sub").exists()
