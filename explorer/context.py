"""Cursor windows, highlight spans and snippets, shared by search results, the CLI and the TUI."""

from __future__ import annotations

import re
from functools import lru_cache
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from explorer.index.tokenize import fold_word, is_stopword, tokenize_spans
from explorer.vault.model import Highlight

if TYPE_CHECKING:
    from explorer.index.vault_index import VaultIndex

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
        }


class ContextError(ValueError):
    """A context request that cannot be served; the message says why."""


class NoteNotFound(ContextError):
    """The note named is not in the index, or its file is gone (deleted or renamed since the search)."""


class CursorOutOfRange(ContextError):
    """A cursor before the note's start or past its end."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where a node_id or path points in the index."""

    path: str
    """The note's vault-relative path."""
    cursor: int
    """The node's start: the shard's, block's or heading's first character, 0 for a whole note."""
    kind: str
    """shard, block, heading or note."""


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
    if folded:
        for tok, s, e in _spans(text):
            if tok in folded:
                found.append(Highlight(s + offset, e + offset, tok))
    for phrase in phrases:
        phrase = phrase.strip()
        if not phrase:
            continue
        for m in re.finditer(re.escape(phrase), text, re.IGNORECASE):
            found.append(Highlight(m.start() + offset, m.end() + offset, phrase))
    return _merge(found)


@lru_cache(maxsize=4096)
def _spans(text: str) -> tuple[tuple[str, int, int], ...]:
    """Token spans of a passage, cached: live search highlights the same shards keystroke after keystroke."""
    return tuple(tokenize_spans(text))


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


def resolve_target(index: VaultIndex, target: str) -> Target:
    """Find a node_id (`path#Heading#Sub`, the older `path#Heading > Sub`, `path#^block`) or a note path in the index.

    A path may omit `.md` or be any link target Obsidian would resolve (a file stem, a path
    suffix); a `#Heading` names a heading by its path or by its own text. Raises NoteNotFound
    when the note is not indexed or its file no longer exists, ContextError when the
    fragment names nothing in it.
    """
    t = target.strip()
    if not t:
        raise ContextError("empty target: give a node_id or a note path")
    with index.lock:
        shard = index.shards.get(t)
        if shard is not None:
            _check_on_disk(index, shard.path)
            return Target(shard.path, shard.start, "shard")
        name, sep, frag = t.partition("#")
        path = _note_path(index, name)
        _check_on_disk(index, path)
        if not sep or not frag.strip():
            return Target(path, 0, "note")
        frag = frag.strip()
        if frag.startswith("^"):
            note = index.notes[path]
            block_id = frag[1:].strip()
            for block in note.blocks:
                if block.id == block_id or block.id.lower() == block_id.lower():
                    return Target(path, block.start, "block")
            raise ContextError(f"no block ^{block_id} in {path}")
        # `Heading#Sub` (Obsidian's form) and `Heading > Sub` (the older node_id form) alike.
        comps = [c.strip() for c in re.split(r"#| > ", frag) if c.strip()]
        if not comps:
            return Target(path, 0, "note")
        joined = "#".join(comps)
        shard = index.shards.get(f"{path}#{joined}")
        if shard is None:
            # A path that leaves out outer headings (a first H1, say) names the section too.
            ids = index.shards_by_path.get(path, [])
            shard = next((index.shards[i] for i in ids if i.lower().endswith("#" + joined.lower())), None)
        note = index.notes[path]
        from explorer.vault.shard import heading_paths

        if shard is not None:
            # A shard can open with bare headings above its own: the cursor goes to its heading.
            own = next((h.start for h, hp in heading_paths(note) if hp == shard.heading_path
                        and shard.start <= h.start < shard.end), shard.start)
            return Target(path, own, "shard")

        want = [" ".join(c.split()).lower() for c in comps]
        pairs = heading_paths(note)
        for heading, hpath in pairs:
            low = [h.lower() for h in hpath]
            if low == want or (len(low) > len(want) and low[-len(want):] == want):
                return Target(path, heading.start, "heading")
        for heading in note.headings:
            if heading.text.strip().lower() == want[-1]:
                return Target(path, heading.start, "heading")
        raise ContextError(f"no section {frag!r} in {path}")


def _note_path(index: VaultIndex, name: str) -> str:
    name = name.strip().replace("\\", "/").lstrip("/")
    if name in index.notes:
        return name
    if f"{name}.md" in index.notes:
        return f"{name}.md"
    resolved = index.links().resolve(name) if name else None
    if resolved is not None and resolved in index.notes:
        return resolved
    for candidate in (name, f"{name}.md"):
        reason = index.skipped.get(candidate)
        if reason:
            raise NoteNotFound(f"{candidate} is not indexed: {reason}")
    raise NoteNotFound(f"no note {name!r} in the index (deleted or renamed since the search?)")


def _check_on_disk(index: VaultIndex, path: str) -> None:
    if not (index.root / path).is_file():
        raise NoteNotFound(f"{path} was deleted or renamed since it was indexed")


def context_for(
    index: VaultIndex,
    target: str,
    cursor: int | None = None,
    chars_before: int = 1000,
    chars_after: int = 1000,
    words: Sequence[str] = (),
    phrases: Sequence[str] = (),
    clamp: bool = False,
) -> ContextWindow:
    """The window around `cursor` in the note a node_id or path names (see `resolve_target`).

    `cursor` is an offset in the note's raw text, as search hits give it; None means the node's
    start (the shard, block or heading; 0 for a whole note). The window is clamped to the note,
    snapped to whole words and lines, and capped at MAX_CONTEXT_CHARS each side (said in
    `notes`). A cursor outside 0..len(text) raises CursorOutOfRange unless `clamp` (then it is
    moved inside and the move is noted); negative sizes raise ContextError; a note that is gone
    raises NoteNotFound.
    """
    for name, value in (("chars_before", chars_before), ("chars_after", chars_after)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ContextError(f"{name} must be a whole number of 0 or more, got {value!r}")
    if cursor is not None and (isinstance(cursor, bool) or not isinstance(cursor, int)):
        raise ContextError(f"cursor must be a whole number, got {cursor!r}")
    with index.lock:
        found = resolve_target(index, target)
        note = index.notes[found.path]
        n = len(note.text)
        if cursor is None:
            cursor = found.cursor
        elif not clamp and cursor < 0:
            raise CursorOutOfRange(f"cursor {cursor} is negative: cursors are character offsets from 0 to {n} in {found.path}")
        elif not clamp and cursor > n:
            raise CursorOutOfRange(
                f"cursor {cursor} is beyond the end of {found.path} ({n} characters); the note may have changed since the search"
            )
        shard = index.shard_at(found.path, min(max(cursor, 0), n))
        return get_context_at_cursor(
            note.text, cursor, chars_before, chars_after, words, phrases,
            path=found.path, node_id=shard.node_id if shard else "",
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
    piece = " ".join(text[begin:begin + width * 2].split())
    if len(piece) > width:
        piece = piece[:width].rsplit(" ", 1)[0] + "…"
    return ("…" if begin > 0 else "") + piece
