"""Embeds (`![[Note]]`, `![[Note#Heading]]`, `![[Note#^block]]`): the embedded text, resolved once for the CLI, the app and MCP.

Obsidian shows an embed as the text it names. Here an embed resolves through the same note-name
resolution as links and `explorer context` (`resolve_note`, `resolve_target`), and expands to a
bounded record: nested embeds only down to MAX_EMBED_DEPTH, never into an embed that is being
expanded (a cycle), at most MAX_EMBED_CHARS of text each and MAX_EMBEDS per request. What is not
expanded says why (`status`), so a viewer shows it as a marked link instead. Text is returned raw:
viewers pass it through the sanitiser like any other vault text.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from explorer.index.pinned import PinnedNames
from explorer.index.targets import ContextError, resolve_note, resolve_pinned
from explorer.vault.model import Link, Note
from explorer.vault.windows import ContextWindow

if TYPE_CHECKING:
    from explorer.index.backend import IndexBackend

#: Embeds inside embedded text are expanded down to this depth (1: only the note's own embeds).
MAX_EMBED_DEPTH = 3
#: Characters of embedded text kept per embed; the rest is counted in `Embed.cut`.
MAX_EMBED_CHARS = 4_000
#: Embeds expanded per request (a note, or a context window), nested ones included.
MAX_EMBEDS = 64

#: What `Embed.status` can be.
STATUSES = ("embedded", "missing", "file", "cycle", "depth", "limit")


@dataclass(frozen=True, slots=True)
class Embed:
    """One `![[...]]` and what it shows."""

    link: Link
    """The embed as written in the embedding note (offsets in that note's text)."""
    source: str
    """Path of the note that holds the embed."""
    status: str
    """`embedded` (text below), `missing` (names no note, heading or block), `file` (an image,
    PDF or other non-note file: shown as a link), `cycle` (it would embed itself), `depth`
    (nested deeper than MAX_EMBED_DEPTH) or `limit` (more than MAX_EMBEDS in one request)."""
    reference: str
    """The target as written: `Note`, `Note#Heading`, `Note#^block`."""
    node_id: str = ""
    """node_id of the embedded text (`path`, `path#Heading`, `path#^block`); '' when not resolved."""
    path: str = ""
    """The embedded note's path ('' when not resolved)."""
    start: int = 0
    """Offset of the embedded text in that note."""
    end: int = 0
    """Offset past the embedded text (before the cut)."""
    text: str = ""
    """The embedded text (at most MAX_EMBED_CHARS characters), raw."""
    cut: int = 0
    """Characters left out by the size cap."""
    reason: str = ""
    """Why it was not embedded (for statuses other than `embedded`)."""
    embeds: tuple[Embed, ...] = ()
    """Embeds inside `text`, expanded the same way (offsets in the embedded note)."""

    @property
    def label(self) -> str:
        """A one-line description for a marker: `embedded from <node_id>` or `unresolved embed …`."""
        if self.status == "embedded":
            more = f", {self.cut} more characters not shown" if self.cut else ""
            return f"embedded from {self.node_id}{more}"
        if self.status == "file":
            return f"embedded file {self.reference}"
        if self.status == "missing":
            return f"unresolved embed {self.reference}: {self.reason}"
        return f"embed {self.reference} not expanded: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, nested embeds included."""
        return {
            "reference": self.reference,
            "status": self.status,
            "node_id": self.node_id,
            "path": self.path,
            "link_start": self.link.start,
            "link_end": self.link.end,
            "start": self.start,
            "end": self.end,
            "text": self.text,
            "cut": self.cut,
            "reason": self.reason,
            "embeds": [e.to_dict() for e in self.embeds],
        }


def reference_of(link: Link) -> str:
    """The embed's target as written: `Note`, `Note#Heading`, `Note#^block` (`#…` for the same note)."""
    ref = link.target
    if link.heading:
        ref += "#" + link.heading
    if link.block:
        ref += "#^" + link.block
    return ref


def is_file_embed(link: Link) -> bool:
    """True for an embed of a non-note file (image, PDF, audio…): it stays a link."""
    name = link.target.rsplit("/", 1)[-1]
    return "." in name and not name.lower().endswith(".md")


def embeds_in(
    index: IndexBackend | PinnedNames,
    path: str,
    start: int = 0,
    end: int | None = None,
    *,
    depth: int = MAX_EMBED_DEPTH,
    max_chars: int = MAX_EMBED_CHARS,
    max_embeds: int = MAX_EMBEDS,
) -> tuple[Embed, ...]:
    """The embeds whose link lies in `[start, end)` of the note at `path`, expanded (see the module doc).

    Returns () when the note is not indexed. Reads one snapshot of the index: the one `index`
    pins (a `PinnedNames`, which a viewer keeps for every part of one note), else a new one.
    """
    if not isinstance(index, PinnedNames):
        with index.snapshot() as snap:
            return embeds_in(
                PinnedNames(index, snap),
                path,
                start,
                end,
                depth=depth,
                max_chars=max_chars,
                max_embeds=max_embeds,
            )
    note = index.note(path)
    if note is None:
        return ()
    end = len(note.text) if end is None else end
    budget = [max(0, max_embeds)]
    return _expand(index, note, start, end, depth, max_chars, budget, ((path, -1),))


def with_embeds(index: IndexBackend | PinnedNames, window: ContextWindow) -> ContextWindow:
    """`window` with the embeds whose link lies in it expanded (`ContextWindow.embeds`): what
    `explorer context`, the MCP `get_context` tool and the app's context pane show."""
    return replace(window, embeds=embeds_in(index, window.path, window.start, window.end))


def after_lines(text: str, offset: int, embeds: tuple[Embed, ...]) -> list[tuple[int, list[Embed]]]:
    """Where viewers put each embed's box: (position in `text`, embeds) just past the line that holds
    the embed's link (after its newline), in order. `offset` is where `text` starts in the note.
    Embeds of files (images, PDFs) are left out: they stay the link line they are."""
    points: dict[int, list[Embed]] = {}
    for e in embeds:
        if e.status == "file":
            continue
        rel = max(0, min(len(text), e.link.end - offset))
        nl = text.find("\n", rel)
        points.setdefault(len(text) if nl < 0 else nl + 1, []).append(e)
    return sorted(points.items())


def _expand(
    index: PinnedNames,
    note: Note,
    start: int,
    end: int,
    depth: int,
    max_chars: int,
    budget: list[int],
    chain: tuple[tuple[str, int], ...],
) -> tuple[Embed, ...]:
    out: list[Embed] = []
    for link in note.links:
        if not link.embed or link.start < start or link.end > end:
            continue
        out.append(_one(index, note, link, depth, max_chars, budget, chain))
    return tuple(out)


def _one(
    index: PinnedNames,
    note: Note,
    link: Link,
    depth: int,
    max_chars: int,
    budget: list[int],
    chain: tuple[tuple[str, int], ...],
) -> Embed:
    ref = reference_of(link)
    embed = partial(Embed, link=link, source=note.path, reference=ref)
    if is_file_embed(link):
        return embed(status="file", reason="not a note")
    if budget[0] <= 0:
        return embed(status="limit", reason=f"more than {MAX_EMBEDS} embeds in one view")
    budget[0] -= 1
    found = _resolve(index, note, link)
    if isinstance(found, str):
        return embed(status="missing", reason=found)
    target, a, b, node_id = found
    here = (*chain, (note.path, link.start))
    if any(p == target.path and a <= pos < b for p, pos in here):
        return embed(
            status="cycle",
            node_id=node_id,
            path=target.path,
            start=a,
            end=b,
            reason="it embeds itself (directly or through other embeds)",
        )
    if depth <= 0:
        return embed(
            status="depth",
            node_id=node_id,
            path=target.path,
            start=a,
            end=b,
            reason=f"nested more than {MAX_EMBED_DEPTH} embeds deep",
        )
    kept_end = b
    if b - a > max_chars:
        kept_end = a + max_chars
        space = target.text.rfind(" ", a + max_chars // 2, kept_end)
        line = target.text.rfind("\n", a + max_chars // 2, kept_end)
        kept_end = max(line, space) if max(line, space) > a else kept_end
    text = target.text[a:kept_end]
    nested = _expand(index, target, a, kept_end, depth - 1, max_chars, budget, here)
    return embed(
        status="embedded",
        node_id=node_id,
        path=target.path,
        start=a,
        end=kept_end,
        text=text,
        cut=b - kept_end,
        embeds=nested,
    )


def _resolve(index: PinnedNames, note: Note, link: Link) -> tuple[Note, int, int, str] | str:
    """(note, start, end, node_id) of what an embed names, or why it names nothing."""
    if link.target.strip():
        path = index.links().resolve(link.target, note.path, link.markdown) if link.markdown else None
        path = path or resolve_note(index, link.target)
        if path is None:
            return "no note by that name"
    else:
        path = note.path
    target = index.note(path)
    if target is None:
        return "no note by that name"
    if link.block:
        block = next((bl for bl in target.blocks if bl.id.lower() == link.block.lower()), None)
        if block is None:
            return f"no block ^{link.block} in {path}"
        return target, block.start, block.end, f"{path}#^{block.id}"
    if link.heading:
        try:
            found = resolve_pinned(index, f"{path}#{link.heading}")
        except ContextError as exc:
            return str(exc)
        heading = next((h for h in target.headings if h.start == found.cursor), None)
        if heading is None:
            return f"no section “{link.heading}” in {path}"
        end = next(
            (h.start for h in target.headings if h.start > heading.start and h.level <= heading.level),
            len(target.text),
        )
        return (
            target,
            heading.start,
            _rstrip(target.text, heading.start, end),
            _section_id(index, path, heading.start, heading.text, link.heading),
        )
    start = target.body_start
    while start < len(target.text) and target.text[start].isspace():
        start += 1
    return target, start, _rstrip(target.text, start, len(target.text)), path


def _rstrip(text: str, start: int, end: int) -> int:
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


def _section_id(index: PinnedNames, path: str, cursor: int, heading: str, written: str) -> str:
    """The node_id of the shard of the section's heading, or `path#Heading` as written."""
    shard = index.shard_at(path, cursor)
    if (
        shard is not None
        and shard.start <= cursor < shard.end
        and shard.heading_path
        and shard.heading_path[-1].strip().lower() == heading.strip().lower()
    ):
        return shard.node_id
    return f"{path}#{written}"
