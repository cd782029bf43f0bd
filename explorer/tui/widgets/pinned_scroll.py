"""A vertical scroll that keeps one widget where it is on screen while content above it changes."""

from __future__ import annotations

from textual.containers import VerticalScroll
from textual.geometry import Region, Size
from textual.layout import DockArrangeResult
from textual.widget import Widget


class PinnedScroll(VerticalScroll):
    """A `VerticalScroll` whose pinned widget keeps its screen row when what is above it grows, shrinks
    or wraps anew.

    Scroll anchoring, as browsers do it: the view adds the change of the pinned widget's position to
    its scroll offset in the same layout pass that moved it, so no frame shows it pushed down (a
    scroll made after the layout would draw one). Scrolling the view meanwhile moves it as usual: the
    pin keeps the widget where the person scrolled it (a scroll still animating lands at once when
    the widget moves). `home` lets go of the pin (the person asked for the top, and the top is what
    stays on screen).

    Pinned with `top`, the first layout also scrolls the widget's top to the view's top, as far as
    the content allows: the frame that first draws it draws it there (a scroll to a widget asked for
    before its layout comes a frame later).
    """

    def __init__(self, *children: Widget, **kwargs) -> None:
        super().__init__(*children, **kwargs)
        self._pinned: Widget | None = None
        self._pinned_y: int | None = None
        """The pinned widget's row in the content at the last layout (None: not laid out since pinned)."""
        self._to_top = False
        """The first layout after `pin` scrolls the pinned widget to the top."""

    @property
    def pinned(self) -> Widget | None:
        """The widget kept in place (None: the view scrolls as any other)."""
        return self._pinned

    def pin(self, widget: Widget, top: bool = False) -> None:
        """Keep `widget` (inside this view) at its screen row from the next layout on; with `top`, that
        layout scrolls its top to the view's top first."""
        self._pinned, self._pinned_y, self._to_top = widget, None, top

    def unpin(self) -> None:
        """Scroll as any other view again."""
        self._pinned = self._pinned_y = None
        self._to_top = False

    def action_scroll_home(self) -> None:
        """To the top, and stay there while content above the pinned widget comes in."""
        self.unpin()
        super().action_scroll_home()

    def arrange(self, size: Size, optimal: bool = False) -> DockArrangeResult:
        """Lay out the children; with a pinned widget that moved, scroll by as much as it moved."""
        result = super().arrange(size, optimal)
        pinned = self._pinned
        if pinned is None or optimal:
            return result
        y = self._row_of(pinned, result)
        if y is None:
            return result
        last, self._pinned_y = self._pinned_y, y
        if last is None:
            if not self._to_top:
                return result
            self._to_top = False
            wanted = float(y)
        elif y == last:
            return result
        else:
            animator = self.app.animator
            if animator.is_being_animated(self, "scroll_y"):
                # A scroll on its way (a key pressed meanwhile) would go on towards its old end: it
                # lands there now, and moves with the pinned widget from there.
                animator.force_stop_animation(self, "scroll_y")
            wanted = self.scroll_y + (y - last)
        most = max(0, result.total_region.bottom - size.height)
        target = min(max(0.0, wanted), float(most))
        if target != self.scroll_y:
            # As Textual's own bottom anchor does: set without validation (the virtual size the
            # validator reads is still the old one until this layout ends), then the scrollbar.
            self.set_reactive(VerticalScroll.scroll_y, target)
            self.set_reactive(VerticalScroll.scroll_target_y, target)
            self.vertical_scrollbar.position = target
        return result

    def _row_of(self, widget: Widget, result: DockArrangeResult) -> int | None:
        """The content row of `widget`'s top (its margin included), None when it is not laid out in
        this view. Each widget between the view and it is arranged at the size the compositor gives
        it (its region less its padding and border), so the compositor finds the arrangements cached."""
        chain: list[Widget] = []
        node: Widget = widget
        while node.parent is not self:
            chain.append(node)
            parent = node.parent
            if not isinstance(parent, Widget):
                return None  # not inside this view (any more)
            node = parent
        box: Region | None = next((p.region for p in result.placements if p.widget is node), None)
        parent = node
        for inner_widget in reversed(chain):
            if box is None:
                return None
            inner = box.shrink(parent.gutter)
            box = next(
                (
                    p.region.translate(inner.offset)
                    for p in parent.arrange(inner.size).placements
                    if p.widget is inner_widget
                ),
                None,
            )
            parent = inner_widget
        return None if box is None else box.y - widget.styles.margin.top
