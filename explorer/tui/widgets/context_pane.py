"""The context pane: a cursor-centred window of the selected result's note, every match highlighted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.widgets import Static

from explorer.index.transclusion import Embed, after_lines, with_embeds
from explorer.search.schema import Highlight, SearchResult
from explorer.tui.safe import safe_content
from explorer.tui.widgets.steady import steady_update
from explorer.vault.windows import ContextWindow, get_context_at_cursor, highlight_spans

if TYPE_CHECKING:
    from explorer.index.backend import IndexBackend

#: Window sizes (characters each side of the cursor) that widen/narrow step through.
WINDOW_STEPS = (150, 300, 600, 1200, 2400, 5000, 10000, 20000)


#: Characters each side of the cursor the pane shows before it is widened or narrowed.
CONTEXT_CHARS = 600

#: Under this many rows (an 80x24 terminal gives the pane about 10) the header takes one line
#: (node_id, match and shard; no rule under it), leaving the rows to the text.
SHORT_ROWS = 14


@dataclass(frozen=True, slots=True)
class ContextState:
    """What the pane shows: which note, where, how wide."""

    path: str
    """The note."""
    cursor: int
    """The window's centre (a match, or a shard start)."""
    chars: int
    """Characters each side of the cursor."""
    shard: int
    """Index of the current shard in the result's context shards."""
    match: int
    """Index of the current match among the note's matches (-1: none selected)."""


@dataclass(frozen=True, slots=True)
class PreparedContext:
    """A result's first window as the pane shows it, computed off the UI thread (in the search's worker)."""

    path: str
    """The note."""
    cursor: int
    """The window's centre: the result's first context shard's cursor."""
    chars: int
    """Characters each side of the cursor."""
    words: tuple[str, ...]
    """The query's words it highlights."""
    phrases: tuple[str, ...]
    """The query's phrases it highlights."""
    text: str
    """The note's text it was computed on."""
    matches: tuple[Highlight, ...]
    """Every match in the whole note."""
    window: ContextWindow
    """The window around `cursor`: the node_id of its shard, its highlights, its embeds expanded."""


def context_window(
    index: IndexBackend | None,
    text: str,
    path: str,
    cursor: int,
    chars: int,
    words: Sequence[str],
    phrases: Sequence[str],
) -> ContextWindow:
    """The pane's window of `text` (the note at `path`) around `cursor`, its embeds expanded."""
    shard = index.shard_at(path, cursor) if index is not None else None
    node_id = shard.node_id if shard is not None else path
    win = get_context_at_cursor(
        text, cursor, chars, chars, words=words, phrases=phrases, path=path, node_id=node_id
    )
    return with_embeds(index, win) if index is not None else win


def prepare_context(
    index: IndexBackend | None,
    result: SearchResult | None,
    words: Sequence[str],
    phrases: Sequence[str],
    chars: int,
) -> PreparedContext | None:
    """What the pane will show first for `result` (None when its note is not in the index).

    Called in the search's worker thread for the result the list highlights first, so the UI thread
    neither scans the whole note for matches nor resolves embeds when it draws the pane."""
    note = index.note(result.document_path) if result is not None and index is not None else None
    if result is None or note is None:
        return None
    cursor = result.context_shards[0].cursor if result.context_shards else 0
    words, phrases = tuple(words), tuple(phrases)
    return PreparedContext(
        result.document_path,
        cursor,
        chars,
        words,
        phrases,
        note.text,
        highlight_spans(note.text, words, phrases),
        context_window(index, note.text, result.document_path, cursor, chars, words, phrases),
    )


def embed_box(embed: Embed, words: Sequence[str] = (), phrases: Sequence[str] = ()) -> Content:
    """An expanded embed as a marked box (its source node_id on top, the query's words highlighted,
    nested embeds boxed inside), or one marked line for an embed that is not expanded. Terminal-safe."""
    if embed.status != "embedded":
        mark = "↪ " if embed.status == "file" else "↪ ✗ "
        return safe_content(
            Content.assemble((mark, "bold $text-warning"), (embed.label, "italic $text-muted"))
        )
    text = Content(embed.text)
    for h in highlight_spans(embed.text, words, phrases):
        text = text.stylize("bold $text-accent", h.start, h.end)
    inner = with_embed_boxes(text, embed.text, embed.start, embed.embeds, words, phrases)
    bar = Content.styled("│ ", "$text-secondary")
    lines = [
        safe_content(Content.assemble(("┌ ↪ ", "bold $text-secondary"), (embed.label, "$text-secondary")))
    ]
    lines += [bar + line for line in inner.split("\n")]
    lines.append(Content.styled("└", "$text-secondary"))
    return Content("\n").join(lines)


def with_embed_boxes(
    body: Content,
    text: str,
    offset: int,
    embeds: Sequence[Embed],
    words: Sequence[str] = (),
    phrases: Sequence[str] = (),
) -> Content:
    """`body` (styled `text`, which starts at `offset` in its note) made terminal-safe, each embed's
    box inserted below the line that holds its link."""
    points = after_lines(text, offset, tuple(embeds))
    if not points:
        return safe_content(body)
    pieces: list[Content] = []
    pos = 0
    for point, group in points:
        piece = safe_content(body[pos:point])
        pieces.append(piece if piece.plain.endswith("\n") else piece + "\n")
        for embed in group:
            pieces.append(embed_box(embed, words, phrases) + "\n")
        pos = point
    rest = safe_content(body[pos:])
    if rest.plain:
        pieces.append(rest)
    else:
        pieces[-1] = pieces[-1][: len(pieces[-1]) - 1]
    return Content("").join(pieces)


class ContextPane(Vertical):
    """Shows `get_context_at_cursor` around the best shard of a result; keys move and resize the window.

    The header (node_id, path, position) stays put; the window scrolls below it.
    """

    DEFAULT_CSS = """
    ContextPane { height: 1fr; }
    ContextPane #ctx-head { height: auto; color: $text-muted; border-bottom: hkey $border-blurred; padding: 0 1; }
    ContextPane.-short #ctx-head {
        height: 1; border-bottom: none; background: $boost; text-wrap: nowrap; text-overflow: ellipsis;
    }
    ContextPane #ctx-scroll { height: 1fr; padding: 0 1; }
    ContextPane #ctx-body { height: auto; }
    """

    @dataclass
    class Moved(Message):
        """The window moved or changed size. Handler: `on_context_pane_moved`."""

        pane: ContextPane
        """The pane."""
        node_id: str
        """node_id of the shard under the cursor."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.index: IndexBackend | None = None
        self.result: SearchResult | None = None
        self.text = ""
        self.words: tuple[str, ...] = ()
        self.phrases: tuple[str, ...] = ()
        self.matches: tuple[Highlight, ...] = ()
        self.state: ContextState | None = None
        self.window: ContextWindow | None = None
        self.node_id = ""
        self.default_chars = CONTEXT_CHARS
        self._shown_key: tuple | None = None
        self._prepared: PreparedContext | None = None
        self.computed = 0
        """Results whose first window and matches this pane computed itself, on the UI thread, because
        the search had not prepared them (`PreparedContext`); widening or moving the window is the pane's own work."""

    def compose(self) -> ComposeResult:
        """Header (node_id, path, position) and body (the window)."""
        yield Static("Select a result to see its context.", id="ctx-head")
        with VerticalScroll(id="ctx-scroll"):
            yield Static(id="ctx-body")

    # -- what to show ---------------------------------------------------------------
    @property
    def chars(self) -> int:
        """Characters each side of the cursor the window shows (its size is kept from result to result)."""
        return self.state.chars if self.state else self.default_chars

    def show(
        self,
        index: IndexBackend | None,
        result: SearchResult | None,
        words: Sequence[str],
        phrases: Sequence[str] = (),
        prepared: PreparedContext | None = None,
    ) -> None:
        """Show `result` around its best shard (keeps the window size); `prepared` is used when it is
        this result's window at this size and note text."""
        previous = (self._shown_key, self._shards())
        self.index = index
        self.result = result
        note = index.note(result.document_path) if result is not None and index is not None else None
        if result is None or note is None:
            self._shown_key = None
            self.state = None
            self.window = None
            self.node_id = ""
            steady_update(self.query_one("#ctx-head", Static), Content("Select a result to see its context."))
            steady_update(self.query_one("#ctx-body", Static), Content(""))
            return
        cursor = result.context_shards[0].cursor if result.context_shards else 0
        key = (
            result.document_path,
            cursor,
            tuple(words),
            tuple(phrases),
            index.version if index is not None else None,
        )
        st = self.state
        if (
            st is not None
            and (st.shard, st.cursor) == (0, cursor)
            and previous == (key, self._shards())
            and self.text == note.text
        ):
            return  # the same window (a search re-run or its next stage kept this result): nothing to redraw
        self._shown_key = key
        self.text = note.text
        self.words, self.phrases = tuple(words), tuple(phrases)
        chars = self.chars
        fits = prepared is not None and (
            (prepared.path, prepared.cursor, prepared.chars, prepared.words, prepared.phrases)
            == (result.document_path, cursor, chars, self.words, self.phrases)
            and prepared.text is note.text
        )
        self._prepared = prepared if fits else None
        if prepared is not None and fits:
            self.matches = prepared.matches
        else:
            self.matches = highlight_spans(note.text, words, phrases)
            self.computed += 1
        self.state = ContextState(result.document_path, cursor, chars, 0, self._match_at(cursor))
        self._render_window(scroll_home=True)

    def target(self, selected: SearchResult | None) -> tuple[str, int | None, str] | None:
        """(path, cursor, node_id) of the window's cursor, else of `selected` (no cursor); None when neither."""
        if self.state is not None:
            return self.state.path, self.state.cursor, self.node_id or self.state.path
        if selected is not None:
            return selected.document_path, None, selected.node_id
        return None

    def _match_at(self, cursor: int) -> int:
        for i, h in enumerate(self.matches):
            if h.start <= cursor < max(h.end, h.start + 1):
                return i
        return -1

    def _shards(self) -> list[tuple[str, int]]:
        """(node_id, cursor) of the result's context shards."""
        if self.result is None:
            return []
        return [(c.node_id, c.cursor) for c in self.result.context_shards]

    # -- actions (the screen binds the keys) -------------------------------------------
    def widen(self, step: int = 1) -> None:
        """Grow (step > 0) or shrink (step < 0) the window."""
        st = self.state
        if st is None:
            return
        sizes = WINDOW_STEPS
        i = min(range(len(sizes)), key=lambda j: abs(sizes[j] - st.chars))
        i = max(0, min(len(sizes) - 1, i + step))
        self.state = ContextState(st.path, st.cursor, sizes[i], st.shard, st.match)
        self._render_window()

    def step_match(self, step: int) -> None:
        """Move the cursor to the next (step > 0) or previous match in the whole note."""
        if self.state is None or not self.matches:
            return
        cur = self.state.cursor
        if self.state.match >= 0:
            i = (self.state.match + step) % len(self.matches)
        elif step > 0:
            i = next((j for j, h in enumerate(self.matches) if h.start > cur), 0)
        else:
            i = next(
                (j for j in range(len(self.matches) - 1, -1, -1) if self.matches[j].start < cur),
                len(self.matches) - 1,
            )
        h = self.matches[i]
        self.state = ContextState(self.state.path, h.start, self.state.chars, self._shard_of(h.start), i)
        self._render_window()

    def step_shard(self, step: int) -> None:
        """Move the cursor to the next (step > 0) or previous of the result's shards."""
        shards = self._shards()
        if self.state is None or not shards:
            return
        i = (self.state.shard + step) % len(shards)
        cursor = shards[i][1]
        self.state = ContextState(self.state.path, cursor, self.state.chars, i, self._match_at(cursor))
        self._render_window()

    def _shard_of(self, cursor: int) -> int:
        best = self.state.shard if self.state else 0
        if self.result is None:
            return best
        for i, c in enumerate(self.result.context_shards):
            if c.start <= cursor < c.end:
                return i
        return best

    # -- drawing ----------------------------------------------------------------------
    def _render_window(self, scroll_home: bool = False) -> None:
        st = self.state
        if st is None:
            return
        ready = self._prepared
        if ready is not None and (ready.path, ready.cursor, ready.chars) == (st.path, st.cursor, st.chars):
            win = ready.window
        else:
            win = context_window(
                self.index, self.text, st.path, st.cursor, st.chars, self.words, self.phrases
            )
        self.node_id = win.node_id
        self.window = win
        shards = self._shards()
        pos = [f"shard {st.shard + 1}/{max(len(shards), 1)}"]
        if self.matches:
            pos.append(f"match {st.match + 1 if st.match >= 0 else '–'}/{len(self.matches)}")
        else:
            pos.append("no literal match")
        pos.append(f"±{st.chars} chars")
        pos.append(f"cursor {st.cursor}")
        # The node_id starts with the path: the path is shown apart only when it does not.
        where: list[str | tuple[str, str]] = [(self.node_id, "bold $text-primary")]
        if not self.node_id.startswith(st.path):
            where += ["  ", (st.path, "$text-accent")]
        if self.has_class("-short"):
            # One line: where and which match; the window's size and cursor are left out.
            head = Content.assemble(*where, "  ", (" · ".join(reversed(pos[:2])), "$text-muted"))
        else:
            head = Content.assemble(*where, "\n", (" · ".join(pos), "$text-muted"))
        steady_update(self.query_one("#ctx-head", Static), safe_content(head))
        body = Content(win.text)
        current = self.matches[st.match] if 0 <= st.match < len(self.matches) else None
        for h in win.highlights:
            s, e = h.start - win.start, h.end - win.start
            if current is not None and h.start <= current.start < h.end:
                body = body.stylize("bold reverse $text-accent", s, e)
            else:
                body = body.stylize("bold $text-accent", s, e)
        body = with_embed_boxes(body, win.text, win.start, win.embeds, self.words, self.phrases)
        if win.start > 0:
            body = Content.assemble(("… ", "$text-muted"), body)
        if win.end < len(self.text):
            body = Content.assemble(body, (" …", "$text-muted"))
        steady_update(self.query_one("#ctx-body", Static), body)
        self.post_message(self.Moved(self, self.node_id))
        if scroll_home:
            self.query_one("#ctx-scroll").scroll_home(animate=False)
        self.call_after_refresh(self._scroll_to_cursor)

    def on_resize(self) -> None:
        """A new size re-wraps the text (bring the match back into view); a short pane gets a one-line header."""
        short = 0 < self.size.height < SHORT_ROWS
        if short != self.has_class("-short"):
            self.set_class(short, "-short")
            if self.state is not None:
                self._render_window()
                return
        self.call_after_refresh(self._scroll_to_cursor)

    def keep_match_in_view(self) -> None:
        """Bring the match back into view once the pane is laid out (its tab was just shown)."""
        self.call_after_refresh(self._scroll_to_cursor)

    def focus_offset(self) -> int:
        """The note offset the pane keeps in view: the current match, else the window's first
        highlighted match at or after the cursor (a shard starts with its heading, the match the
        person searched for can be lines below it), else the cursor."""
        st, win = self.state, self.window
        if st is None or win is None:
            return 0
        if st.match >= 0:
            return st.cursor
        after = [h.start for h in win.highlights if h.start >= st.cursor]
        return min(after) if after else st.cursor

    def row_of(self, offset: int, width: int) -> int:
        """The row (0-based, of the body as drawn wrapped at `width` cells) holding note offset
        `offset`: the drawn text up to the end of that word, wrapped as the body wraps it."""
        win = self.window
        if win is None:
            return 0
        rel = max(0, min(offset - win.start, len(win.text)))
        while rel < len(win.text) and not win.text[rel].isspace():
            rel += 1
        # Only the boxes drawn above that row: those of embeds whose line ends before it.
        above = tuple(e for e in win.embeds if 0 <= win.text.find("\n", max(0, e.link.end - win.start)) < rel)
        before = with_embed_boxes(Content(win.text[:rel]), win.text[:rel], win.start, above)
        if win.start > 0:
            before = Content.assemble("… ", before)
        return max(0, len(before.wrap(max(1, width))) - 1)

    def _scroll_to_cursor(self, tries: int = 5) -> None:
        """Scroll so the match (`focus_offset`) is in view, with a line or a third of the view above it.

        Right after an update the new text may not be laid out yet (the scroll range is still the
        old one): then it tries again after the next refresh, a few times at most.
        """
        if self.window is None or self.state is None:
            return
        scroll = self.query_one("#ctx-scroll", VerticalScroll)
        region = scroll.scrollable_content_region
        width = self.query_one("#ctx-body", Static).content_region.width or region.width
        if width <= 0 or region.height <= 0:
            return  # hidden (the other tab is shown): `keep_match_in_view` runs when it shows
        target = self.row_of(self.focus_offset(), width)
        if not (scroll.scroll_y <= target < scroll.scroll_y + region.height):
            y = max(0, target - (1 if region.height < 9 else region.height // 3))
            if y > scroll.max_scroll_y and tries > 0:
                self.call_after_refresh(self._scroll_to_cursor, tries - 1)
                return
            scroll.scroll_to(y=y, animate=False)
