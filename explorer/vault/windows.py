"""Cursor windows, highlight spans and snippets, shared by search results, the CLI and the TUI."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from explorer.text.tokenize import fold_word, is_stopword, token_spans_of, tokenize_spans
from explorer.vault.model import Highlight

#: The largest window a single request may ask for, each side of the cursor.
MAX_CONTEXT_CHARS = 20_000


@dataclass(frozen=True, slots=True)
class ContextWindow:
    """A window of a note's raw text around a cursor."""

    path: str
    """The note's vault-relative path."""
    node_id: str
    """node_id of the shard that contains the cursor ('' if none)."""
    cursor: int
    """The cursor, clamped into the note."""
    start: int
    """Offset of the window's first character."""
    end: int
    """Offset past the window."""
    text: str
    """`note_text[start:end]`."""
    highlights: tuple[Highlight, ...]
    """Matches of the given terms inside the window (note offsets)."""
    notes: tuple[str, ...] = ()
    """What was adjusted: a clamped cursor, a capped request."""
    note_chars: int = 0
    """Length of the whole note's text."""
    embeds: tuple[Any, ...] = ()
    """The `explorer.index.transclusion.Embed`s whose link lies in the window, expanded."""

    def to_dict(self) -> dict[str, Any]:
        """The window as JSON-ready data."""
        return {
            "path": self.path,
            "node_id": self.node_id,
            "cursor": self.cursor,
            "start": self.start,
            "end": self.end,
            "note_chars": self.note_chars,
            "text": self.text,
            "highlights": [{"start": h.start, "end": h.end, "term": h.term} for h in self.highlights],
            "notes": list(self.notes),
            "embeds": [e.to_dict() for e in self.embeds],
        }


def query_words(text: str) -> list[str]:
    """Folded content words of a query, for highlighting (stop-words dropped unless nothing else)."""
    spans = tokenize_spans(text)
    words = [w for w, s, e in spans if not is_stopword(text[s:e])]
    return list(dict.fromkeys(words or [w for w, _, _ in spans]))


def highlight_spans(
    text: str,
    words: Iterable[str] = (),
    phrases: Iterable[str] = (),
    offset: int = 0,
) -> tuple[Highlight, ...]:
    """Spans of `text` that match folded `words` (as the index tokenizes) or literal `phrases`.

    Offsets are shifted by `offset`, so passing a shard's start yields note offsets.
    """
    folded = {fold_word(w) if not _is_folded(w) else w for w in words if w}
    found: list[Highlight] = []
    for tok, s, e in token_spans_of(text, folded):
        found.append(Highlight(s + offset, e + offset, tok))
    for phrase in phrases:
        phrase = phrase.strip()
        if not phrase:
            continue
        for m in re.finditer(re.escape(phrase), text, re.IGNORECASE):
            found.append(Highlight(m.start() + offset, m.end() + offset, phrase))
    return _merge(found)


def _is_folded(word: str) -> bool:
    return word == fold_word(word)


def _merge(spans: list[Highlight]) -> tuple[Highlight, ...]:
    spans.sort(key=lambda h: (h.start, -h.end))
    out: list[Highlight] = []
    for h in spans:
        if out and h.start < out[-1].end:
            last = out[-1]
            if h.end > last.end:
                out[-1] = Highlight(last.start, h.end, last.term)
            continue
        out.append(h)
    return tuple(out)


def get_context_at_cursor(
    text: str,
    cursor: int,
    chars_before: int = 1000,
    chars_after: int = 1000,
    words: Sequence[str] = (),
    phrases: Sequence[str] = (),
    path: str = "",
    node_id: str = "",
    snap: bool = True,
) -> ContextWindow:
    """The window `text[cursor - chars_before : cursor + chars_after]`, clamped to the note.

    With `snap`, the edges move outward to whole words (and to a line start when one is within
    60 characters), so no word is cut. Requests larger than MAX_CONTEXT_CHARS are capped.
    """
    notes: list[str] = []
    n = len(text)
    if cursor < 0 or cursor > n:
        notes.append(f"cursor {cursor} clamped to 0..{n}")
        cursor = min(max(cursor, 0), n)
    before, after = max(0, chars_before), max(0, chars_after)
    if before > MAX_CONTEXT_CHARS or after > MAX_CONTEXT_CHARS:
        notes.append(f"window capped at {MAX_CONTEXT_CHARS} characters each side")
        before, after = min(before, MAX_CONTEXT_CHARS), min(after, MAX_CONTEXT_CHARS)
    start = max(0, cursor - before)
    end = min(n, cursor + after)
    if snap:
        start, end = _snap(text, start, end)
    window = text[start:end]
    return ContextWindow(
        path=path,
        node_id=node_id,
        cursor=cursor,
        start=start,
        end=end,
        text=window,
        highlights=highlight_spans(window, words, phrases, offset=start),
        notes=tuple(notes),
        note_chars=n,
    )


def _snap(text: str, start: int, end: int) -> tuple[int, int]:
    n = len(text)
    if start > 0:
        line = text.rfind("\n", max(0, start - 60), start)
        if line != -1:
            start = line + 1
        else:
            while start > 0 and not text[start - 1].isspace():
                start -= 1
    if end < n:
        line = text.find("\n", end, min(n, end + 60))
        if line != -1:
            end = line
        else:
            while end < n and not text[end].isspace():
                end += 1
    return start, end


def snippet(text: str, highlights: Sequence[Highlight], offset: int = 0, width: int = 200) -> str:
    """Up to `width` characters of `text` around its first highlight, whitespace collapsed."""
    first = highlights[0].start - offset if highlights else 0
    begin = max(0, first - width // 4)
    if begin > 0:
        space = text.find(" ", begin, first) if first > begin else -1
        begin = space + 1 if space != -1 else begin
    piece = " ".join(text[begin : begin + width * 2].split())
    if len(piece) > width:
        piece = piece[:width].rsplit(" ", 1)[0] + "…"
    return ("…" if begin > 0 else "") + piece
