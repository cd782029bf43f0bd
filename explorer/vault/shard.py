"""Cut a parsed note into shards: heading-bounded, size-capped for the embedding model, slightly overlapping."""

from __future__ import annotations

import bisect
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from itertools import accumulate

from explorer.vault.model import Heading, Note, Shard
from explorer.vault.parse import display_text

# Word pieces are estimated, not counted: a word costs 1 plus 1 per 8 characters, CJK and
# punctuation 1 each. MiniLM's real count is close for English and never far above.
_PIECE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]|\w+|[^\w\s]")
_SENTENCE_END = frozenset(".!?。！？")


_EIGHT = re.compile(r"\w{8}")
#: A piece with the whitespace before it (only whitespace lies between two pieces).
_GAP_PIECE = re.compile(r"\s*(?:" + _PIECE.pattern + ")")


def estimate_tokens(text: str) -> int:
    """Estimated word pieces of `text` for all-MiniLM-L6-v2's tokenizer.

    Equal to the sum of `_cost` over the pieces, counted in C: one per piece, plus one per full
    run of 8 word characters inside a piece (CJK runs count slightly high, which is safe).
    """
    return len(_PIECE.findall(text)) + len(_EIGHT.findall(text))


def _cost(piece: str) -> int:
    return 1 + len(piece) // 8 if piece[0].isalnum() and len(piece) > 1 else 1


@dataclass(frozen=True, slots=True)
class _Section:
    heading_path: tuple[str, ...]
    start: int
    end: int


#: Size cap of a shard in estimated word pieces (the embedding model's window is 256).
SHARD_TOKENS = 200
#: Estimated word pieces shared by consecutive pieces of a long section.
SHARD_OVERLAP = 30
#: Shards one note may contribute; the rest of a longer note is left out with a recorded reason.
MAX_NOTE_SHARDS = 2000


def make_shards(note: Note, max_tokens: int = SHARD_TOKENS, overlap: int = SHARD_OVERLAP) -> list[Shard]:
    """Cut `note` into shards; `note.text[s.start:s.end] == s.text` for each.

    Sections run from one heading to the next; a heading with no text of its own (directly
    followed by another heading) joins the section after it. A section larger than `max_tokens`
    is split at paragraph, line or sentence breaks into pieces that share about `overlap` tokens.
    node_ids are Obsidian link targets: the file and heading path (`a/b.md#Care#Diet`, a note's
    only H1 left out as it stands for the whole note, each heading in link form, see
    `link_heading`); only when two shards would share one, a suffix tells them apart: ` (n)` for
    a repeated heading path and `@k` for the k-th piece of a long section. An edit in one section never
    changes the node_ids of another.
    """
    if is_part_file(note.path):
        return _part_shards(note, max_tokens, overlap)
    shards: list[Shard] = []
    seen: dict[str, int] = {}
    title = title_heading(note)
    for section in _sections(note):
        # A note's only H1 heads the whole note: node_ids leave it out, as links to the note do.
        link_path = (
            section.heading_path[1:]
            if title is not None and section.heading_path[:1] == (title.text,)
            else section.heading_path
        )
        base = node_base(note.path, link_path)
        seen[base] = seen.get(base, 0) + 1
        if seen[base] > 1:
            base = f"{base} ({seen[base]})"
        for k, (start, end) in enumerate(_pieces(note.text, section.start, section.end, max_tokens, overlap)):
            node_id = base if k == 0 else f"{base}@{k + 1}"
            text = note.text[start:end]
            search_text = _search_text(
                note,
                section.heading_path,
                text,
                first=not shards,
                title=title.text if title is not None else None,
            )
            shards.append(
                Shard(
                    node_id=node_id,
                    path=note.path,
                    ordinal=len(shards),
                    start=start,
                    end=end,
                    heading_path=section.heading_path,
                    text=text,
                    search_text=search_text,
                    hash=hashlib.blake2b(search_text.encode("utf-8"), digest_size=16).hexdigest(),
                    source_type=note.source_type,
                )
            )
    return shards


def is_part_file(path: str) -> bool:
    """True for a PDF or a canvas: a file cut into its pages or cards (its blocks) rather than its sections."""
    lower = path.lower()
    return lower.endswith((".pdf", ".canvas"))


def _part_shards(note: Note, max_tokens: int, overlap: int) -> list[Shard]:
    """Shards of a PDF (one per page with text) or a canvas (one per text or link card): each of the
    note's blocks, with the node_id `file.pdf#page=N` or `board.canvas#<card id>` (`@k` for the k-th
    piece of a long one). A file with no text at all still has one empty shard, so its name finds it."""
    pdf = note.path.lower().endswith(".pdf")
    shards: list[Shard] = []
    groups = [] if pdf else _group_headings(note)
    group_starts = [h.start for h in groups]
    for block in note.blocks:
        if pdf:
            heading_path: tuple[str, ...] = (block.id.replace("=", " "),)
        else:
            g = bisect.bisect_left(group_starts, block.start) - 1
            heading_path = (groups[g].text,) if g >= 0 else ()
        base = f"{note.path}#{block.id}"
        for k, (start, end) in enumerate(_pieces(note.text, block.start, block.end, max_tokens, overlap)):
            text = note.text[start:end]
            shards.append(
                _part_shard(
                    note, f"{base}@{k + 1}" if k else base, len(shards), start, end, heading_path, text, pdf
                )
            )
    if not shards:
        shards.append(_part_shard(note, note.path, 0, 0, 0, (), "", pdf))
    return shards


def _group_headings(note: Note) -> list[Heading]:
    """A canvas's group labels: its headings that lie in no card (a card's own headings do)."""
    spans = sorted((b.start, b.end) for b in note.blocks)
    starts = [a for a, _ in spans]
    out = []
    for h in note.headings:
        i = bisect.bisect_right(starts, h.start) - 1
        if i < 0 or not (spans[i][0] <= h.start < spans[i][1]):
            out.append(h)
    return out


def _part_shard(
    note: Note,
    node_id: str,
    ordinal: int,
    start: int,
    end: int,
    heading_path: tuple[str, ...],
    text: str,
    pdf: bool,
) -> Shard:
    parts = [" > ".join((note.title, *heading_path)), text if pdf else display_text(text)]
    if ordinal == 0 and note.aliases:
        parts.append("aliases: " + ", ".join(note.aliases))
    if ordinal == 0 and note.tag_names:
        parts.append("tags: " + " ".join(note.tag_names))
    search_text = "\n".join(parts)
    return Shard(
        node_id=node_id,
        path=note.path,
        ordinal=ordinal,
        start=start,
        end=end,
        heading_path=heading_path,
        text=text,
        search_text=search_text,
        hash=hashlib.blake2b(search_text.encode("utf-8"), digest_size=16).hexdigest(),
        source_type=note.source_type,
    )


def shard_at_cursor(shards: Iterable[Shard | None], cursor: int) -> Shard | None:
    """Of one note's `shards` in order (None for one gone meanwhile): the one holding `cursor`,
    else the nearest one starting before it, else the first."""
    best = first = None
    for s in shards:
        if s is None:
            continue
        first = first or s
        if s.start <= cursor < s.end:
            return s
        if s.start <= cursor:
            best = s
    return best or first


def node_base(path: str, heading_path: tuple[str, ...]) -> str:
    """The link-target part of a node_id: `path#Heading#Sub` (the path alone for a note's top).

    Each heading is written as Obsidian writes it in a link (`link_heading`), so the node_id
    works as the target of a `[[...]]` link even when a heading holds `#`, `|`, `^` or brackets.
    """
    return path + "".join("#" + h for h in map(link_heading, heading_path) if h)


# Characters that would end or split a link target inside `[[...]]`: Obsidian leaves them out of
# the heading part of a link (its `stripHeadingForLink`), and matches headings the same way.
_LINK_BREAKERS = re.compile(r"[#|^\\\[\]]|%%")


def link_heading(text: str) -> str:
    """A heading's text as the heading part of an Obsidian link: `#`, `|`, `^`, `\\`, brackets and
    `%%` become spaces, runs of white space one space (`C# | tips` -> `C tips`)."""
    return " ".join(_LINK_BREAKERS.sub(" ", text).split())


def cap_shards(note: Note, shards: list[Shard], limit: int | None = None) -> tuple[Note, list[Shard]]:
    """Keep the first `limit` shards of a note (default MAX_NOTE_SHARDS); a cut is recorded in the note's warnings.

    One note (a log of 200,000 short sections, a pasted dump) must not fill the index or the
    embedding queue on its own; the part kept is searchable, the note says what was left out.
    """
    limit = MAX_NOTE_SHARDS if limit is None else limit
    if limit <= 0 or len(shards) <= limit:
        return note, shards
    kept = shards[:limit]
    if not any(w.startswith("truncated") for w in note.warnings):
        reason = (
            f"truncated: only the first {limit:,} of {len(shards):,} shards are indexed, up to character "
            f"{kept[-1].end:,} of {len(note.text):,} (the limit per note)"
        )
        note = replace(note, warnings=(*note.warnings, reason))
    return note, kept


def title_heading(note: Note) -> Heading | None:
    """The note's only H1, when it has exactly one: a heading that stands for the whole note."""
    h1 = [h for h in note.headings if h.level == 1]
    return h1[0] if len(h1) == 1 else None


def heading_paths(note: Note) -> list[tuple[Heading, tuple[str, ...]]]:
    """Each heading with the path of heading texts that leads to it, outermost first."""
    stack: list[Heading] = []
    out = []
    for h in note.headings:
        while stack and stack[-1].level >= h.level:
            stack.pop()
        stack.append(h)
        out.append((h, tuple(x.text for x in stack)))
    return out


def _sections(note: Note) -> list[_Section]:
    text = note.text
    bounds: list[tuple[int, tuple[str, ...]]] = [(note.body_start, ())]
    for h, path in heading_paths(note):
        bounds.append((h.start, path))
    bounds.sort(key=lambda b: b[0])
    out = []
    bare: list[_Section] = []
    pending: int | None = None
    for i, (start, path) in enumerate(bounds):
        end = bounds[i + 1][0] if i + 1 < len(bounds) else len(text)
        start, end = _strip(text, start, end)
        if end <= start:
            continue
        if _only_heading_line(text, start, end):
            # A heading with no text of its own joins the section that follows it.
            bare.append(_Section(path, start, end))
            pending = start if pending is None else pending
            continue
        out.append(_Section(path, start if pending is None else pending, end))
        pending = None
    if pending is not None and out:
        # Bare headings at the very end: kept with the section before them.
        last = out[-1]
        out[-1] = _Section(last.heading_path, last.start, bare[-1].end)
    if not out and bare:
        # Nothing but headings: one shard of them all.
        return [_Section(bare[0].heading_path, bare[0].start, bare[-1].end)]
    if not out:
        # A note with no text still has a name (and maybe aliases): one empty shard finds it.
        end = len(text.rstrip())
        return [_Section((), min(note.body_start, end), end)]
    return out


def _only_heading_line(text: str, start: int, end: int) -> bool:
    return "\n" not in text[start:end].strip() and text[start] == "#"


def _strip(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _pieces(text: str, start: int, end: int, max_tokens: int, overlap: int) -> list[tuple[int, int]]:
    """Split text[start:end] into spans of at most ~max_tokens estimated word pieces."""
    # One regex scan in C finds each piece with the whitespace before it (only whitespace lies
    # between two pieces): a piece ends where its run ends, and is that run without its gap. A
    # piece costs 1 + len // 8 (non-word pieces are single characters, so this equals `_cost`);
    # `cum` sums the costs, so each span's budget is a bisection rather than a step per piece.
    # A span within `max_tokens` comes back whole, as when `estimate_tokens` of it is (that
    # estimate is never below this sum).
    runs = _GAP_PIECE.findall(text, start, end)
    n = len(runs)
    ends = list(accumulate(map(len, runs), initial=start))[1:]
    sizes = list(map(len, map(str.lstrip, runs)))
    starts = list(map(int.__sub__, ends, sizes))
    cum = list(map(int.__add__, range(n + 1), accumulate(map((8).__rfloordiv__, sizes), initial=0)))
    if cum[n] <= max_tokens or n < 2:
        return [(start, end)]
    max_tokens = max(max_tokens, 8)
    overlap = max(0, min(overlap, max_tokens // 2))
    pieces: list[tuple[int, int]] = []
    i = 0
    while i < n:
        # The most pieces from i whose costs fit the budget (costs are >= 1, so `cum` rises).
        j = max(bisect.bisect_right(cum, cum[i] + max_tokens) - 1, i + 1)
        if j < n:
            j = _best_break(text, starts, ends, i, j)
        piece_start = starts[i] if pieces else start
        piece_end = ends[j - 1] if j < n else end
        pieces.append((piece_start, piece_end))
        if j >= n:
            break
        # Step back about `overlap` tokens, to a sentence start when one is near.
        k = max(bisect.bisect_left(cum, cum[j] - overlap), i + 1)
        for s in range(k, j):
            if s > 0 and text[starts[s - 1]] in _SENTENCE_END:
                k = s
                break
        i = k if k > i else j
    return pieces


def _best_break(text: str, starts: list[int], ends: list[int], i: int, j: int) -> int:
    """Pick an end index in (i, j] that falls on the strongest break in the window's last 40 %."""
    lo = i + max(1, int((j - i) * 0.6))
    best, best_q = j, 0
    n = len(starts)
    for e in range(j, lo - 1, -1):
        gap = text[ends[e - 1] : starts[e]] if e < n else "\n\n"
        q = (
            3
            if gap.count("\n") >= 2
            else 2
            if "\n" in gap
            else 1
            if text[starts[e - 1]] in _SENTENCE_END
            else 0
        )
        if q > best_q:
            best, best_q = e, q
            if q == 3:
                break
    return best


def _search_text(
    note: Note, heading_path: tuple[str, ...], text: str, first: bool, title: str | None = None
) -> str:
    """What BM25 indexes and the model embeds for one shard: a head naming where it is, its text
    with links as read, then the note's aliases, description and tags (first shard) and metadata.

    The head is the note's name and the shard's heading path; a first heading that repeats the
    name is not written twice. A name with no letters (a document id, a timestamp, a date) is an
    identifier, not words: under the note's only H1 (`title`) that heading heads the shard in its
    place, so an id does not pull the embedding of every shard away from what the note says. The
    name ranking still finds such a note by its name.
    """
    if title is not None and heading_path[:1] == (title,) and not any(c.isalpha() for c in note.title):
        head = " > ".join(heading_path)
    else:
        path = heading_path[1:] if heading_path and _same_name(heading_path[0], note.title) else heading_path
        head = " > ".join((note.title, *path))
    parts = [head, display_text(text)]
    if first:
        if note.aliases:
            parts.append("aliases: " + ", ".join(note.aliases))
        if note.description:
            parts.append("description: " + note.description)
        if note.tag_names:
            parts.append("tags: " + " ".join(note.tag_names))
    meta = note.metadata
    if meta:
        topic = meta.get("topic")
        keywords = meta.get("keywords")
        if topic:
            parts.append(f"topic: {topic}")
        if isinstance(keywords, list) and keywords:
            parts.append("keywords: " + ", ".join(str(k) for k in keywords))
    return "\n".join(parts)


def _same_name(a: str, b: str) -> bool:
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()
