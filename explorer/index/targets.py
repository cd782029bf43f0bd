"""Resolve a node_id or path through the index and serve the context window around a cursor in it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from explorer.index.pinned import PinnedNames
from explorer.vault.windows import ContextWindow, get_context_at_cursor

if TYPE_CHECKING:
    from explorer.index.backend import IndexBackend
    from explorer.vault.model import Shard


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


def resolve_target(index: IndexBackend, target: str) -> Target:
    """Find a node_id (`path#Heading#Sub`, the older `path#Heading > Sub`, `path#^block`) or a note path in the index.

    A path may omit `.md` or be any link target Obsidian would resolve (a file stem, a path
    suffix); a `#Heading` names a heading by its path or by its own text. Raises NoteNotFound
    when the note is not indexed or its file no longer exists, ContextError when the
    fragment names nothing in it.
    """
    with index.snapshot() as snap:
        return resolve_pinned(PinnedNames(index, snap), target)


def resolve_pinned(names: PinnedNames, target: str) -> Target:
    """`resolve_target` in one snapshot of the index (see `explorer.index.pinned`)."""
    t = target.strip()
    if not t:
        raise ContextError("empty target: give a node_id or a note path")
    shard = names.shards.get(t)
    if shard is not None:
        _check_on_disk(names, shard.path)
        return _shard_target(names, shard)
    name, sep, frag = t.partition("#")
    path = _note_path(names, name)
    _check_on_disk(names, path)
    if not sep or not frag.strip():
        return Target(path, 0, "note")
    frag = frag.strip()
    note = names.notes[path]
    if frag.startswith("^"):
        block_id = frag[1:].strip()
        for block in note.blocks:
            if block.id == block_id or block.id.lower() == block_id.lower():
                return Target(path, block.start, "block")
        raise ContextError(f"no block ^{block_id} in {path}")
    from explorer.vault.shard import heading_paths

    # `Heading#Sub` (Obsidian's form) and `Heading > Sub` (the older node_id form) alike.
    comps = [c.strip() for c in re.split(r"#| > ", frag) if c.strip()]
    if not comps:
        return Target(path, 0, "note")
    joined = "#".join(comps)
    shard = names.shards.get(f"{path}#{joined}")
    ids = names.shard_ids(path)
    if shard is None:
        # A path that leaves out outer headings (a first H1, say) names the section too.
        shard = next((names.shards[i] for i in ids if i.lower().endswith("#" + joined.lower())), None)
    if shard is None:
        # Headings compared as Obsidian compares link targets: node_ids written before headings
        # were put in link form (`C# tips` is now `C tips`), with their ` (n)` / `@k` suffixes.
        shard = _loose_shard(names, ids, frag)
    if shard is not None:
        return _shard_target(names, shard)
    want = _loose(frag)
    for heading, hpath in heading_paths(note):
        if _loose_suffix_match(hpath, want):
            return Target(path, heading.start, "heading")
    last = _loose(comps[-1])
    for heading in note.headings:
        if _loose(heading.text) in (want, last):
            return Target(path, heading.start, "heading")
    raise ContextError(f"no section {frag!r} in {path}")


_SUFFIX = re.compile(r"^(.*?)( \(\d+\))?(@\d+)?$", re.DOTALL)


def _loose(text: str) -> str:
    """`text` as headings are compared in links: link form, case-folded, `#` and ` > ` as spaces."""
    from explorer.vault.shard import link_heading

    return link_heading(text.replace(" > ", " ")).casefold()


def _loose_suffix_match(heading_path: tuple[str, ...], want: str) -> bool:
    """Whether `want` (loose) names `heading_path` whole or its last headings."""
    return any(_loose(" ".join(heading_path[j:])) == want for j in range(len(heading_path)))


def _loose_shard(names: PinnedNames, ids: Sequence[str], frag: str) -> Shard | None:
    """The shard of a note whose heading path matches `frag` loosely, keeping its suffix:
    ` (n)` picks the n-th section of that path, `@k` its k-th piece (the first when absent)."""
    m = _SUFFIX.match(frag)
    want = _loose(m.group(1)) if m else _loose(frag)
    repeat = int(m.group(2)[2:-1]) if m and m.group(2) else 1
    piece = int(m.group(3)[1:]) if m and m.group(3) else 1
    sections: list[list[Shard]] = []
    last_path = None
    for node_id in ids:
        shard = names.shards[node_id]
        if not shard.heading_path or not _loose_suffix_match(shard.heading_path, want):
            last_path = None
            continue
        # Pieces of one section follow each other with the same heading path.
        if last_path == shard.heading_path and re.search(r"@\d+$", node_id):
            sections[-1].append(shard)
        else:
            sections.append([shard])
        last_path = shard.heading_path
    if len(sections) < repeat or len(sections[repeat - 1]) < piece:
        return None
    return sections[repeat - 1][piece - 1]


def _shard_target(names: PinnedNames, shard: Shard) -> Target:
    """A shard's target; a shard can open with bare headings above its own, the cursor goes to its own."""
    from explorer.vault.shard import heading_paths

    note = names.notes.get(shard.path)
    pairs = heading_paths(note) if note is not None and shard.heading_path else []
    own = next(
        (h.start for h, hp in pairs if hp == shard.heading_path and shard.start <= h.start < shard.end),
        shard.start,
    )
    return Target(shard.path, own, "shard")


def resolve_note(index: IndexBackend | PinnedNames, name: str) -> str | None:
    """The indexed note `name` names, or None.

    A vault path (with or without `.md`, slashes either way) wins; else `name` resolves as an
    Obsidian link target does (path suffix, file stem or alias, case-insensitively).
    """
    return index.resolve_note(name)


def _note_path(names: PinnedNames, name: str) -> str:
    found = names.resolve_note(name)
    if found is not None:
        return found
    name = name.strip().replace("\\", "/").lstrip("/")
    skipped = names.skipped_files()
    for candidate in (name, f"{name}.md"):
        reason = skipped.get(candidate)
        if reason:
            raise NoteNotFound(f"{candidate} is not indexed: {reason}")
    raise NoteNotFound(f"no note {name!r} in the index (deleted or renamed since the search?)")


def _check_on_disk(names: PinnedNames, path: str) -> None:
    if not (names.root / path).is_file():
        raise NoteNotFound(f"{path} was deleted or renamed since it was indexed")


def context_for(
    index: IndexBackend,
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
    raises NoteNotFound. The window's embeds are expanded by
    `explorer.index.transclusion.with_embeds`.
    """
    for name, value in (("chars_before", chars_before), ("chars_after", chars_after)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ContextError(f"{name} must be a whole number of 0 or more, got {value!r}")
    if cursor is not None and (isinstance(cursor, bool) or not isinstance(cursor, int)):
        raise ContextError(f"cursor must be a whole number, got {cursor!r}")
    with index.snapshot() as snap:
        if index.many_vaults and target.strip().startswith("vault:") and target.strip() not in snap.shards:
            # another vault of a shared collection
            return _foreign_context(
                index, target.strip(), cursor, chars_before, chars_after, words, phrases, clamp
            )
        found = resolve_pinned(PinnedNames(index, snap), target)
        note = snap.notes[found.path]
        n = len(note.text)
        if cursor is None:
            cursor = found.cursor
        elif not clamp and cursor < 0:
            raise CursorOutOfRange(
                f"cursor {cursor} is negative: cursors are character offsets from 0 to {n} in {found.path}"
            )
        elif not clamp and cursor > n:
            raise CursorOutOfRange(
                f"cursor {cursor} is beyond the end of {found.path} ({n} characters); the note may have changed since the search"
            )
        shard = snap.shard_at(found.path, min(max(cursor, 0), n))
        return get_context_at_cursor(
            note.text,
            cursor,
            chars_before,
            chars_after,
            words,
            phrases,
            path=found.path,
            node_id=shard.node_id if shard else "",
        )


def _foreign_context(
    index: IndexBackend,
    target: str,
    cursor: int | None,
    chars_before: int,
    chars_after: int,
    words: Sequence[str],
    phrases: Sequence[str],
    clamp: bool,
) -> ContextWindow:
    """`context_for` on another vault's note, read from the shared collection (`vault:NAME/PATH[#...]`)."""
    found = index.foreign_note(target)
    if found is None:
        raise NoteNotFound(f"no note {target!r} in the shared collection")
    note, shards = found
    n = len(note.text)
    named = next((s for s in shards if s.node_id == target), None)
    if cursor is None:
        cursor = named.start if named is not None else 0
    elif not clamp and not 0 <= cursor <= n:
        raise CursorOutOfRange(f"cursor {cursor} is outside 0..{n} in {note.path}")
    at = min(max(cursor, 0), n)
    shard = next((s for s in shards if s.start <= at < s.end), None)
    return get_context_at_cursor(
        note.text,
        cursor,
        chars_before,
        chars_after,
        words,
        phrases,
        path=note.path,
        node_id=shard.node_id if shard else "",
    )
