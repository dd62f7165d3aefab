"""The package version: the one place it is written (pyproject.toml reads it from here).

Checkpoints and exported folders record it, so a file that an older tscratch wrote and this one
cannot read fails with one line naming the version that made it.
"""

__version__ = "0.2.0"


def load_hint(record: dict) -> str:
    """What to tell a user whose checkpoint (or export) does not load: which tscratch wrote it,
    from its `tscratch_version` entry, and what to do."""
    made = record.get("tscratch_version")
    if made is None:
        return "it records no tscratch version: written by tscratch 0.1 or by other code"
    if made != __version__:
        return f"it was written by tscratch {made}; load it with that version, or retrain"
    return "pass one written by the matching script"
