"""Pure text helpers of the app: note Markdown for display, search-mode prefixes, paragraphs, atomic saves."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from explorer.search.writing.suggest import paragraph_bounds, plain_query
from explorer.vault.model import Link, Note

if TYPE_CHECKING:
    from explorer.index.backend import IndexBackend

#: Scheme of the Markdown links that stand for wikilinks in the note view.
WIKILINK_SCHEME = "wikilink:"

#: Search modes besides the hybrid pipeline: the classic cursor tools.
CLASSIC_MODES = ("phrase", "and", "fuzzy", "tfidf")
#: The order the mode toggle cycles through ("" is the hybrid pipeline).
MODE_CYCLE = ("", *CLASSIC_MODES)

_MD_ESCAPE = re.compile(r"([\[\]\\*_`<>])")


def split_mode(query: str, default: str = "") -> tuple[str, str]:
    """(mode, rest) of a query: a leading `/phrase `, `/and `, `/fuzzy ` or `/tfidf ` picks a classic tool.

    Without a prefix the mode is `default` ('' for the hybrid pipeline). `/hybrid ` forces the pipeline.
    """
    stripped = query.lstrip()
    if stripped.startswith("/"):
        head, _, rest = stripped[1:].partition(" ")
        head = head.lower()
        if head in CLASSIC_MODES:
            return head, rest.strip()
        if head in ("hybrid", "search"):
            return "", rest.strip()
    return default, query.strip()


def wikilink_href(target: str, heading: str = "", block: str = "") -> str:
    """The Markdown link target that stands for a wikilink (percent-encoded after the scheme)."""
    ref = target
    if heading:
        ref += "#" + heading
    if block:
        ref += "#^" + block
    return WIKILINK_SCHEME + quote(ref, safe="")


def parse_wikilink_href(href: str) -> tuple[str, str] | None:
    """(target, heading) of a wikilink href (already or not yet unquoted); None for other links."""
    if not href.startswith(WIKILINK_SCHEME):
        return None
    ref = unquote(href[len(WIKILINK_SCHEME) :])
    target, _, heading = ref.partition("#")
    return target, heading


def _label(text: str) -> str:
    return _MD_ESCAPE.sub(r"\\\1", text)


def note_markdown(
    note: Note, embeds: Sequence[Any] = (), note_of: Callable[[str], Note | None] | None = None
) -> str:
    """The note's text for the Markdown widget (see `note_source`)."""
    return note_source(note, embeds, note_of).text


@dataclass(frozen=True, slots=True)
class NoteSource:
    """A note as Markdown for the viewer, and where its raw lines went."""

    text: str
    """The Markdown source."""
    inserted: tuple[tuple[int, int], ...] = ()
    """(raw line, lines inserted after it) for each embed box, in order."""
    first_line: int = 0
    """The raw line the source starts at (a part of a note that starts further down)."""

    def line(self, raw_line: int) -> int:
        """The source line of a raw note line (embed boxes above it push it down; negative: above
        the part)."""
        return raw_line - self.first_line + sum(n for after, n in self.inserted if after < raw_line)

    @staticmethod
    def joined(parts: Sequence[NoteSource]) -> NoteSource:
        """Consecutive parts of a note as one source (empty: an empty source)."""
        if not parts:
            return NoteSource("")
        return NoteSource(
            "".join(p.text for p in parts),
            tuple(x for p in parts for x in p.inserted),
            parts[0].first_line,
        )


def note_source(
    note: Note,
    embeds: Sequence[Any] = (),
    note_of: Callable[[str], Note | None] | None = None,
    start: int = 0,
    end: int | None = None,
) -> NoteSource:
    """The note's text for the Markdown widget, line for line with the raw text but for embed boxes.

    Parsed frontmatter becomes blank lines (the view shows it as a properties table, see
    `property_rows`); frontmatter that did not parse stays visible as a fenced YAML block.
    `[[target#heading|alias]]` becomes a Markdown link with the `wikilink:` scheme, so a
    rendered block's source lines are the raw note's lines. Each expanded embed
    (`explorer.index.transclusion.Embed`, looked up in its note through `note_of`) is inserted
    below its line as a quoted box headed by its source node_id; `NoteSource.line` maps raw
    lines past it.

    `start`/`end` (line starts) give a part of the note: the parts of a note, in order, add up to
    the whole note's source (`embeds` are then those whose link lies in the part).
    """
    text = note.text
    end = len(text) if end is None else end
    out: list[str] = []
    pos = start
    if note.body_start > 0 and start == 0:
        front = text[: note.body_start]
        lines = front.split("\n")
        if note.frontmatter:
            lines = [""] * len(lines)
        elif lines and lines[0].strip() == "---":
            lines[0] = "```yaml"
            for i in range(len(lines) - 1, 0, -1):
                if lines[i].strip() in ("---", "..."):
                    lines[i] = "```"
                    break
        out.append("\n".join(lines))
        pos = note.body_start
    inserted: list[tuple[int, int]] = []
    body = _span_markdown(note, pos, max(pos, end), embeds, note_of, inserted)
    return NoteSource("".join(out) + body, tuple(inserted), text.count("\n", 0, start))


def _span_markdown(
    note: Note,
    start: int,
    end: int,
    embeds: Sequence[Any],
    note_of: Callable[[str], Note | None] | None,
    inserted: list[tuple[int, int]] | None = None,
) -> str:
    """`note.text[start:end]` with links as Markdown links and embed boxes below their lines."""
    text = note.text
    boxes: dict[int, list[Any]] = {}
    for e in embeds:
        if e.status == "file":  # an image or PDF stays a link line
            continue
        nl = text.find("\n", e.link.end, end)
        boxes.setdefault(end if nl < 0 else nl + 1, []).append(e)
    # At one offset a box (the end of the line before) goes before a link (the start of the next).
    cuts = sorted(
        [(lk.start, 1, lk) for lk in note.links if start <= lk.start and lk.end <= end]
        + [(at, 0, group) for at, group in boxes.items()],
        key=lambda c: (c[0], c[1]),
    )
    out: list[str] = []
    pos = start
    for at, _kind, item in cuts:
        if at < pos:
            continue
        out.append(text[pos:at])
        pos = at
        if isinstance(item, Link):
            out.append(_link_markdown(item))
            pos = item.end
            continue
        block = "".join(_embed_markdown(e, note_of) for e in item)
        if not text[start:at].endswith("\n"):
            block = "\n" + block
        if inserted is not None:
            inserted.append(
                (
                    text.count("\n", 0, at) - 1 if text[start:at].endswith("\n") else text.count("\n", 0, at),
                    block.count("\n"),
                )
            )
        out.append(block)
    out.append(text[pos:end])
    return "".join(out)


def _link_markdown(link: Any) -> str:
    if link.alias:
        label = link.alias
    elif link.target:
        label = link.target + (f" › {link.heading}" if link.heading else "")
    else:
        label = link.heading or link.block or "link"
    label = ("↪ " if link.embed else "") + label
    return f"[{_label(label)}]({wikilink_href(link.target, link.heading, link.block)})"


def _embed_markdown(embed: Any, note_of: Callable[[str], Note | None] | None) -> str:
    """One embed as a quoted box (a blank line before and after), or a marked line when not expanded."""
    if embed.status != "embedded":
        return f"\n> *↪ ✗ {_label(embed.label)}*\n\n"
    source = note_of(embed.path) if note_of is not None else None
    if source is not None:
        inner = _span_markdown(source, embed.start, embed.end, embed.embeds, note_of)
    else:
        inner = embed.text
    if embed.cut:
        inner += "\n\n…"
    quoted = "\n".join(("> " + line) if line.strip() else ">" for line in inner.split("\n"))
    return f"\n> **↪ {_label(embed.label)}**\n>\n{quoted}\n\n"


PROPERTY_ROWS = 60
PROPERTY_CHARS = 300


def property_rows(frontmatter: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, value) rows of a note's frontmatter for its properties table: lists joined with
    commas, nested mappings as `key: value; …`, dates as ISO, each value at most PROPERTY_CHARS
    characters, at most PROPERTY_ROWS rows (then a `…` row saying how many more). Raw text: the
    viewer makes it terminal-safe."""
    rows: list[tuple[str, str]] = []
    items = list(frontmatter.items())
    for key, value in items[:PROPERTY_ROWS]:
        rows.append((str(key), _compact(value, PROPERTY_CHARS)))
    if len(items) > PROPERTY_ROWS:
        rows.append(("…", f"{len(items) - PROPERTY_ROWS} more properties"))
    return rows


def _compact(value: Any, budget: int, depth: int = 0) -> str:
    """A one-line rendering of a YAML value within about `budget` characters."""
    if isinstance(value, bool):
        out = "true" if value else "false"
    elif value is None:
        out = "—"
    elif isinstance(value, (list, tuple)):
        parts: list[str] = []
        used = 0
        for item in value:
            if used > budget:
                parts.append("…")
                break
            part = _compact(item, budget - used, depth + 1)
            parts.append(part)
            used += len(part) + 2
        out = ", ".join(parts)
        if depth:
            out = f"[{out}]"
    elif isinstance(value, dict):
        parts = []
        used = 0
        for k, v in value.items():
            if used > budget:
                parts.append("…")
                break
            part = f"{k}: {_compact(v, budget - used, depth + 1)}"
            parts.append(part)
            used += len(part) + 2
        out = "; ".join(parts)
        if depth:
            out = "{" + out + "}"
    elif hasattr(value, "isoformat"):
        out = value.isoformat()
    else:
        out = " ".join(str(value).split())
    return out if len(out) <= budget else out[: max(1, budget - 1)] + "…"


def line_of(text: str, cursor: int) -> int:
    """0-based line number of a character offset."""
    return text.count("\n", 0, max(0, min(cursor, len(text))))


def paragraph_at(text: str, index: int, min_words: int = 8, max_chars: int = 600) -> str:
    """The paragraph (blank-line separated) around `index`, grown backwards while it is short."""
    start, end = paragraph_bounds(text, index, min_words, max_chars)
    return " ".join(text[start:end].split())


#: Text made safe to search as words (the writer's query): explorer.search.writing.suggest.plain_query.
as_plain_query = plain_query


def body_start(text: str) -> int:
    """Index of the first character after a leading YAML frontmatter block (0 when there is none)."""
    if not text.startswith("---"):
        return 0
    first = text.find("\n")
    if first < 0 or text[:first].strip() != "---":
        return 0
    pos = first + 1
    while pos < len(text):
        end = text.find("\n", pos)
        line = text[pos:] if end < 0 else text[pos:end]
        if line.strip() in ("---", "..."):
            return len(text) if end < 0 else end + 1
        if end < 0:
            break
        pos = end + 1
    return 0


def read_note_file(path: Path) -> str:
    """A note's text as on disk (line endings kept)."""
    with open(path, encoding="utf-8", newline="") as fh:
        return fh.read()


def note_titles(index: IndexBackend | None) -> dict[str, str] | None:
    """Every note's title by path, through the index's read API (call it off the UI thread)."""
    if index is None:
        return None
    return index.note_titles()
