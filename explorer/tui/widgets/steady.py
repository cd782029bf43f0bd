"""Update a Static's text without laying the whole screen out again when its size stays the same."""

from __future__ import annotations

from typing import cast

from textual.content import Content
from textual.css.styles import RulesMap
from textual.widgets import Static


def same_content(a: object, b: object) -> bool:
    """True when `a` and `b` are the same text with the same styles (Content's `==` ignores styles)."""
    if isinstance(a, Content) and isinstance(b, Content):
        return a.plain == b.plain and a.spans == b.spans
    return type(a) is type(b) and isinstance(a, str) and a == b


def steady_update(static: Static, content: Content | str) -> None:
    """Show `content` in `static`: nothing happens when it is what is shown, and the screen is laid
    out again only when the widget's size can change (an auto width or height that the new text
    changes). A layout costs a reflow of every widget and usually a repaint of the moved ones:
    at 120x40 that made each results update a 20-40 ms frame, where a repaint alone is a few ms."""
    old = static.content
    if same_content(old, content):
        return
    styles = static.styles
    width = static.content_region.width
    layout = True
    if width > 0 and isinstance(content, Content) and isinstance(old, Content):
        same_height = not styles.is_auto_height or _rows(static, content, width) == _rows(static, old, width)
        same_width = not styles.is_auto_width or content.get_optimal_width(
            _rules(static), 0
        ) == old.get_optimal_width(_rules(static), 0)
        layout = not (same_height and same_width)
    static.update(content, layout=layout)


def _rows(static: Static, content: Content, width: int) -> int:
    """The rows `content` takes in `static` at `width`, within its min-height and max-height (in cells)."""
    styles = static.styles
    rows = content.get_height(_rules(static), width)
    low, high = styles.min_height, styles.max_height
    if low is not None and low.cells is not None:
        rows = max(rows, low.cells)
    if high is not None and high.cells is not None:
        rows = min(rows, high.cells)
    return rows


def _rules(static: Static) -> RulesMap:
    """The widget's styles as the rules a Visual reads (Textual's own widgets pass `self.styles` so)."""
    return cast(RulesMap, static.styles)
