"""Fonts for labels in any script: token and class names drawn without empty boxes.

matplotlib's default font, DejaVu Sans, has no CJK glyphs: Chinese tokens come out as empty
boxes (with a "Glyph ... missing from font" warning). `readable_labels` finds, among the
installed fonts, one whose character map covers each character, and returns a font family list
for matplotlib's per-glyph fallback (matplotlib >= 3.6). A character no installed font covers is
written as its code point (`U+4E2D`), which can at least be read and looked up. Installing a CJK
font (Debian: `fonts-noto-cjk`) gives the real glyphs; matplotlib's font cache may need
refreshing after that (delete `~/.cache/matplotlib`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import matplotlib
from matplotlib import font_manager
from matplotlib.ft2font import FT2Font


def readable_labels(labels: Sequence[str]) -> tuple[list[str], list[str]]:
    """Labels to draw and the font family list to draw them with.

    Returns:
        ``labels`` with every character no installed font covers replaced by ``U+XXXX``, and
        matplotlib's default family followed by each family needed for the rest (pass it as
        ``fontfamily=``).
    """
    families = list(matplotlib.rcParams["font.family"])
    default = _default_family()
    shown = []
    for label in labels:
        chars = []
        for char in label:
            family = covering_family(char)
            if family is None:
                chars.append(f"U+{ord(char):04X}")
                continue
            if family != default and family not in families:
                families.append(family)
            chars.append(char)
        shown.append("".join(chars))
    return shown, families


@functools.cache
def covering_family(char: str) -> str | None:
    """The first font family, the default one first, with a glyph for ``char``; None if none."""
    code = ord(char)
    for family, path in _candidates():
        if code in _charmap(path):
            return family
    return None


@functools.cache
def _default_family() -> str:
    return font_manager.FontProperties(fname=_default_path()).get_name()


def _default_path() -> str:
    return font_manager.findfont(font_manager.FontProperties())


@functools.cache
def _candidates() -> tuple[tuple[str, str], ...]:
    """(family, file of its regular face) of every installed family, the default first."""
    default = _default_family()
    regular: dict[str, font_manager.FontEntry] = {}
    for entry in font_manager.fontManager.ttflist:
        # Last Resort (bundled since matplotlib 3.10) maps every code point to a placeholder box.
        if entry.name == default or entry.name.startswith("Last Resort"):
            continue
        if entry.name not in regular or _irregularity(entry) < _irregularity(regular[entry.name]):
            regular[entry.name] = entry
    others = ((name, regular[name].fname) for name in sorted(regular))
    return ((default, _default_path()), *others)


def _irregularity(entry: font_manager.FontEntry) -> tuple[bool, bool, float]:
    """How far a face is from the upright, normal-width, weight-400 one that is drawn."""
    weight = entry.weight
    if isinstance(weight, str):
        weight = font_manager.weight_dict.get(weight, 400)
    return entry.style != "normal", entry.stretch != "normal", abs(weight - 400)


@functools.cache
def _charmap(path: str) -> frozenset[int]:
    try:
        return frozenset(FT2Font(path).get_charmap())
    except (OSError, RuntimeError, ValueError):  # unreadable or unsupported font file
        return frozenset()
