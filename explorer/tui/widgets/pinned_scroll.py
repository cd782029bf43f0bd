"""A vertical scroll that keeps one child where it is on screen while content above it grows."""

from __future__ import annotations

from textual.containers import VerticalScroll
from textual.geometry import Size
from textual.layout import DockArrangeResult
from textual.widget import Widget


class PinnedScroll(VerticalScroll):
    """A `VerticalScroll` whose pinned child keeps its screen row when widgets above it grow or shrink.

    Scroll anchoring, as browsers do it: the view adds the change of the pinned child's position to
    its scroll offset in the same layout pass that moved the child, so no frame shows the child
    pushed down (a scroll made after the layout would draw one). Scrolling the view meanwhile moves
    it as usual: the pin keeps the child where the person scrolled it. `home` lets go of the pin (the
    person asked for the top, and the top is what stays on screen).
    """

    def __init__(self, *children: Widget, **kwargs) -> None:
        super().__init__(*children, **kwargs)
        self._pinned: Widget | None = None
        self._pinned_y: int | None = None
        """The pinned child's row in the content at the last layout (None: not laid out since pinned)."""

    @property
    def pinned(self) -> Widget | None:
        """The child kept in place (None: the view scrolls as any other)."""
        return self._pinned

    def pin(self, child: Widget) -> None:
        """Keep `child` (a child of this view) at its screen row from the next layout on."""
        self._pinned, self._pinned_y = child, None

    def unpin(self) -> None:
        """Scroll as any other view again."""
        self._pinned = self._pinned_y = None

    def action_scroll_home(self) -> None:
        """To the top, and stay there while content above the pinned child comes in."""
        self.unpin()
        super().action_scroll_home()

    def arrange(self, size: Size, optimal: bool = False) -> DockArrangeResult:
        """Lay out the children; with a pinned child that moved, scroll by as much as it moved."""
        result = super().arrange(size, optimal)
        child = self._pinned
        if child is None or optimal:
            return result
        y = next((p.region.y for p in result.placements if p.widget is child), None)
        if y is None:
            return result
        last, self._pinned_y = self._pinned_y, y
        if last is None or y == last:
            return result
        most = max(0, result.total_region.bottom - size.height)
        target = min(max(0.0, self.scroll_y + (y - last)), float(most))
        if target != self.scroll_y:
            # As Textual's own bottom anchor does: set without validation (the virtual size the
            # validator reads is still the old one until this layout ends), then the scrollbar.
            self.set_reactive(VerticalScroll.scroll_y, target)
            self.set_reactive(VerticalScroll.scroll_target_y, target)
            self.vertical_scrollbar.position = target
        return result
