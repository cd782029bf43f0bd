"""A read-only view of a long text that draws only the rows on screen: wrapped between words, with line numbers."""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate
from typing import ClassVar

from rich.cells import cell_len, chop_cells, set_cell_size
from rich.segment import Segment
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

#: Narrowest wrap width (cells) however small the view is.
MIN_WRAP = 8


def row_starts(line: str, wrap: int) -> list[int]:
    """Where each row of `line` starts when it wraps at `wrap` cells: after the last space that
    leaves the row within `wrap` (the spaces at a break end the row and are not drawn); a word
    longer than a row is folded, as `less` folds it."""
    starts = [0]
    single = line.isascii() or cell_len(line) == len(line)
    pos, n = 0, len(line)
    while True:
        if single:
            if n - pos <= wrap:
                return starts
            end = pos + wrap
        else:
            rest = line[pos:]
            if cell_len(rest) <= wrap:
                return starts
            end = pos + len(chop_cells(rest, wrap)[0])
        space = line.rfind(" ", pos, end + 1)
        if space > pos and line[pos:space].strip(" "):
            cut = space + 1
            while cut < n and line[cut] == " ":
                cut += 1
        else:
            cut = max(end, pos + 1)
        if cut >= n:
            return starts
        starts.append(cut)
        pos = cut


class LongText(ScrollView, can_focus=True):
    """Shows a text of any length at the cost of the rows on screen.

    Opening a note of 400 KB must not wait for all of it to be laid out (a TextArea lays out
    every line first, about half a second per 400 KB). Here setting the text only splits it into
    lines and counts each line's rows at the current width (a length division for the usual
    single-width text whose lines fit, a scan for the last space of each row otherwise); a row is
    cut and styled when it is drawn. Lines wrap between words at the view's width (a word longer
    than a row is folded); the text is given already made terminal-safe.
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {"long-text--gutter", "long-text--mark"}

    DEFAULT_CSS = """
    LongText { background: $surface; scrollbar-gutter: stable; overflow-x: hidden; }
    LongText > .long-text--gutter { color: $text-muted; }
    LongText > .long-text--mark { background: $boost; text-style: bold; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._text = ""
        self._lines: list[str] = [""]
        self._starts: list[int] = [0, 1]
        self._wrap = 0
        self._gutter = 2
        self._pieces: dict[int, list[int]] = {}
        """Where each row of a line that wraps starts, by line (for the lines drawn lately)."""
        self._wanted = 0
        """The line to bring to the top once the view has a width (it has none while hidden)."""
        self.mark: int | None = None
        """The line shown highlighted (where the view was opened), or None."""

    @property
    def text(self) -> str:
        """The whole text shown."""
        return self._text

    @property
    def line_count(self) -> int:
        """Lines of the text."""
        return len(self._lines)

    def line(self, index: int) -> str:
        """One line of the text (tabs expanded)."""
        return self._lines[index]

    def set_text(self, text: str, mark: int | None = None) -> None:
        """Show `text` (terminal-safe already) from its top; `mark` highlights a line."""
        self._text = text
        self._lines = text.replace("\r\n", "\n").expandtabs(4).split("\n")
        self._gutter = len(str(len(self._lines))) + 1
        self.mark = mark
        self._wrap = 0
        self._layout()
        self.scroll_to_line(0)

    def scroll_to_line(self, line: int) -> None:
        """Scroll so that `line` (0-based) is the top row."""
        line = max(0, min(line, len(self._lines) - 1))
        self._wanted = line
        if self._wrap:
            self.scroll_to(0, self._starts[line], animate=False, immediate=True, force=True)

    def row_of(self, line: int) -> int:
        """The first row (from the top of the text) of `line`."""
        return self._starts[max(0, min(line, len(self._lines) - 1))]

    def top_line(self) -> int:
        """The line at the top of the view."""
        return bisect_right(self._starts, int(self.scroll_offset.y)) - 1

    def on_resize(self) -> None:
        """Lines fold again at the new width, keeping the top line in view."""
        top = self.top_line() if self._wrap else self._wanted
        if self._layout():
            self.scroll_to_line(top)

    def _width(self) -> int:
        return max(MIN_WRAP, self.scrollable_content_region.width - self._gutter)

    def _layout(self) -> bool:
        """Count each line's rows at the current width; True when the width changed.

        Nothing is counted while the view has no width (hidden, or not laid out yet)."""
        if self.scrollable_content_region.width <= self._gutter:
            self._wrap = 0
            self._starts = [0, *range(1, len(self._lines) + 1)]
            return False
        wrap = self._width()
        if wrap == self._wrap:
            return False
        self._wrap = wrap
        self._pieces.clear()
        rows = [self._rows(line, wrap) for line in self._lines]
        self._starts = [0, *accumulate(rows)]
        self.virtual_size = Size(wrap + self._gutter, self._starts[-1])
        self.refresh()
        return True

    @staticmethod
    def _rows(line: str, wrap: int) -> int:
        if len(line) <= wrap and (line.isascii() or cell_len(line) <= wrap):
            return 1
        return len(row_starts(line, wrap))

    def _piece(self, index: int, row: int) -> str:
        """Row `row` of line `index` as wrapped at the current width (its trailing spaces left out)."""
        line = self._lines[index]
        wrap = self._wrap
        if len(line) <= wrap and (line.isascii() or cell_len(line) <= wrap):
            return line if row == 0 else ""
        starts = self._pieces.get(index)
        if starts is None:
            if len(self._pieces) > 512:
                self._pieces.clear()
            starts = self._pieces[index] = row_starts(line, wrap)
        if row >= len(starts):
            return ""
        piece = line[starts[row] : starts[row + 1] if row + 1 < len(starts) else len(line)]
        return set_cell_size(piece.rstrip(" "), wrap).rstrip(" ") if cell_len(piece) > wrap else piece

    def render_line(self, y: int) -> Strip:
        """One row on screen: a line number on a line's first row, then its piece of the line."""
        width = self.scrollable_content_region.width
        base = self.rich_style
        row = int(self.scroll_offset.y) + y
        if row >= self._starts[-1] or row < 0:
            return Strip.blank(width, base)
        index = bisect_right(self._starts, row) - 1
        part = row - self._starts[index]
        number = f"{index + 1:>{self._gutter - 1}} " if part == 0 else " " * self._gutter
        style = base + self.get_component_rich_style("long-text--mark") if index == self.mark else base
        gutter = base + self.get_component_rich_style("long-text--gutter")
        segments = [Segment(number, gutter), Segment(self._piece(index, part), style)]
        return Strip(segments).adjust_cell_length(width, style)
