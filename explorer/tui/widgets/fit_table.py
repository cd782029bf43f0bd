"""A table widget that fits any width: cells wrap instead of being cut; narrow, rows become blocks."""

from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text
from textual.widget import Widget

from explorer.tui.safe import screen_text


class FitTable(Widget):
    """A table that always fits its width: every cell wraps (folds) instead of being cut, and
    below `min_width` cells the rows become blocks (`first column` then `label value · …`).

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

    def render(self) -> Table | Text:
        """A table when it fits, else one block per row; nothing is ever cut."""
        if not self.rows:
            return Text("")
        if self.size.width >= self.min_width:
            table = Table(box=box.SIMPLE_HEAD, expand=True, padding=(0, 1), show_edge=False, pad_edge=False)
            for i, name in enumerate(self.columns):
                table.add_column(
                    name,
                    overflow="fold",
                    ratio=self.ratios[i] if i < len(self.ratios) else None,
                    justify="right" if i >= 2 else "left",
                    header_style="bold",
                )
            for row, style in zip(self.rows, self.styles_of):
                table.add_row(*row, style=style or None)
            return table
        out = Text()
        for n, (row, style) in enumerate(zip(self.rows, self.styles_of)):
            if n:
                out.append("\n")
            out.append(row[0], style="bold")
            rest = " · ".join(f"{name} {cell}" for name, cell in zip(self.columns[1:], row[1:]) if cell)
            out.append("\n  " + rest, style=style or "")
        return out
