"""The package version: the one place it is written (pyproject.toml reads it from here).

Checkpoints and exported folders record it, so a file that an older tscratch wrote and this one
cannot read fails with one line naming the version that made it.
"""

__version__ = "0.2.0"
