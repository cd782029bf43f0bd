"""A table widget that fits any width: cells wrap between words, never inside one; narrow, rows become blocks."""

from __future__ import annotations

from rich import box
from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from textual.widget import Widget

from explorer.tui.safe import screen_text

#: The fewest cells a column that wraps is given (or its widest cell, when narrower): under that
#: its text would stand a word or two to a line, and the rows read better as blocks.
WRAP_MIN = 16
#: Cells between two columns: a space of padding each side of the box's (blank) column separator.
COLUMN_GAP = 3


def longest_word(text: str) -> int:
    """Cells of the longest space-separated word of `text` (0 for none)."""
    return max((cell_len(word) for word in text.split()), default=0)


def wrap_width(text: str) -> int:
    """The fewest cells a wrapping column needs for `text`: its longest word, and WRAP_MIN (or all of it)."""
    return max(longest_word(text), min(cell_len(text), WRAP_MIN))


class FitTable(Widget):
    """A table that always fits its width without breaking a word: a column that wraps (one with a
    ratio) wraps between words and is at least WRAP_MIN cells wide, the others keep their cells on one line. When the width cannot hold
    that (or is under `min_width`), the rows become blocks (`first column` then `label value · …`),
    which wrap between words like any text.

    Cells are plain strings (made terminal-safe here); `rows` keeps them for tests and copying.
    """

    DEFAULT_CSS = """
    FitTable { height: auto; margin: 1 0 0 0; }
    """

    def __init__(
        self, columns: tuple[str, ...], min_width: int = 0, ratios: tuple[int | None, ...] = (), **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.columns = columns
        self.min_width = min_width
        self.ratios = ratios or (3,) + (None,) * (len(columns) - 1)
        self.rows: list[tuple[str, ...]] = []
        self.styles_of: list[str] = []

    @property
    def row_count(self) -> int:
        """How many rows are shown."""
        return len(self.rows)

    @property
    def tabulated(self) -> bool:
        """True when the rows are drawn as a table at the current width (else as blocks)."""
        return self.fits(self.size.width)

    def fits(self, width: int) -> bool:
        """Whether a table of the rows fits `width` cells with no word broken: every column that
        wraps holds its longest word and WRAP_MIN cells, every other column its widest cell (and its header)."""
        if width < self.min_width:
            return False
        need = COLUMN_GAP * (len(self.columns) - 1)
        for i, name in enumerate(self.columns):
            cells = [row[i] for row in self.rows if i < len(row)]
            wraps = i < len(self.ratios) and self.ratios[i] is not None
            measure = wrap_width if wraps else cell_len
            need += max([measure(name), *(measure(c) for c in cells)])
        return need <= width

    def clear(self) -> None:
        """No rows."""
        self.rows, self.styles_of = [], []
        self.refresh(layout=True)

    def add_row(self, *cells: object, style: str = "") -> None:
        """Append a row of cells (any objects, shown as text)."""
        self.rows.append(tuple(screen_text(c) for c in cells))
        self.styles_of.append(style)
        self.refresh(layout=True)

    def on_resize(self) -> None:
        """A new width may change the layout (table or blocks)."""
        self.refresh(layout=True)

    def render(self) -> RenderableType:
        """A table when it fits without breaking a word, else one block per row; nothing is ever cut."""
        if not self.rows:
            return Text("")
        if self.fits(self.size.width):
            table = Table(box=box.SIMPLE_HEAD, expand=True, padding=(0, 1), show_edge=False, pad_edge=False)
            for i, name in enumerate(self.columns):
                ratio = self.ratios[i] if i < len(self.ratios) else None
                table.add_column(
                    name,
                    overflow="fold",
                    no_wrap=ratio is None,
                    ratio=ratio,
                    min_width=max([wrap_width(name), *(wrap_width(r[i]) for r in self.rows)])
                    if ratio is not None
                    else None,
                    justify="right" if i >= 2 else "left",
                    header_style="bold",
                )
            for row, style in zip(self.rows, self.styles_of):
                table.add_row(*row, style=style or None)
            return table
        blocks: list[RenderableType] = []
        for row, style in zip(self.rows, self.styles_of):
            rest = " · ".join(f"{name} {cell}" for name, cell in zip(self.columns[1:], row[1:]) if cell)
            # The rest wraps under itself (a hanging indent), not back at the block's left edge.
            blocks += [Text(row[0], style="bold"), Padding(Text(rest, style=style or ""), (0, 0, 0, 2))]
        return Group(*blocks)
