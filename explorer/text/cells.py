"""Terminal cell widths: pad and shorten text by the cells it takes (CJK and emoji take two), never by len()."""

from __future__ import annotations

from rich.cells import cell_len, set_cell_size

__all__ = ["cell_len", "clip", "fit"]


def fit(text: str, width: int) -> str:
    """`text` in exactly `width` cells: padded with spaces, or shortened with `…` when longer."""
    if cell_len(text) <= width:
        return set_cell_size(text, width)
    return set_cell_size(text, max(0, width - 1)) + "…" if width > 0 else ""


def clip(text: str, cells: int) -> str:
    """`text` shortened to at most `cells` cells, at a space when one is in the second half, with `…`."""
    if cell_len(text) <= cells:
        return text
    cut = set_cell_size(text, max(0, cells - 1)).rstrip()
    space = cut.rfind(" ")
    if space > len(cut) // 2:
        cut = cut[:space]
    return cut + "…"
