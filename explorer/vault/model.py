"""The vault's data: notes, their parts, and shards, as frozen records with raw-text offsets."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from explorer.text.dates import note_date


@dataclass(frozen=True, slots=True)
class Heading:
    """A Markdown heading."""

    level: int
    """1 to 6."""
    text: str
    """The heading's text, without the leading #'s."""
    start: int
    """Offset of the heading line in the raw text."""
    end: int
    """Offset just past the heading line (before its newline)."""


@dataclass(frozen=True, slots=True)
class Link:
    """A `[[wikilink]]`, `![[embed]]` or Markdown link `[text](Some%20note.md#Heading)`."""

    target: str
    """The note (or file) named, as written (URL-decoded for a Markdown link); empty for a
    same-note link (`[[#Heading]]`, `[text](#Heading)`)."""
    heading: str
    """The `#heading` part, or ''."""
    block: str
    """The `#^block` id, or ''."""
    alias: str
    """The `|alias` (a Markdown link's text), or ''."""
    embed: bool
    """True for `![[...]]`."""
    start: int
    """Offset of the link's first character (`!` or `[`)."""
    end: int
    """Offset just past `]]` (or the Markdown link's `)`)."""
    markdown: bool = False
    """True for a Markdown link: its target is a path relative to the linking note."""


@dataclass(frozen=True, slots=True)
class Tag:
    """A tag, inline (`#tag/sub`) or from frontmatter (start = end = -1)."""

    name: str
    """Without `#`, as written."""
    start: int
    """Offset of `#`, or -1 for a frontmatter tag."""
    end: int
    """Offset past the tag, or -1."""


@dataclass(frozen=True, slots=True)
class Block:
    """A block carrying an id (`... ^id` at the end of its last line)."""

    id: str
    """The id without `^`."""
    start: int
    """Offset of the block's first character."""
    end: int
    """Offset past the block's last character before ` ^id`."""


@dataclass(frozen=True, slots=True)
class Note:
    """A parsed note. Offsets refer to `text`, the file's decoded text, untouched."""

    path: str
    """Vault-relative POSIX path, e.g. `Knowledge/hamsters.md`."""
    text: str
    """The whole raw text."""
    title: str
    """The frontmatter `title` when set, else the file name without `.md` as Obsidian shows it
    (a first H1 is a heading like any other)."""
    frontmatter: dict[str, Any]
    """Parsed YAML frontmatter ({} when absent or malformed)."""
    body_start: int
    """Offset where the body begins (after frontmatter)."""
    headings: tuple[Heading, ...]
    """Headings in order."""
    links: tuple[Link, ...]
    """Wikilinks and embeds outside code."""
    tags: tuple[Tag, ...]
    """Frontmatter tags first, then inline tags outside code."""
    blocks: tuple[Block, ...]
    """Blocks with ids."""
    source_type: str = "note"
    """fact, belief, preference, turn_summary, research_cache, visit_record or note."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Side data, e.g. a turn's metadata.json (topic, keywords)."""
    warnings: tuple[str, ...] = ()
    """Problems met while parsing (e.g. malformed frontmatter); the note is still indexed."""

    @property
    def stem(self) -> str:
        """File name without folder and `.md`."""
        name = self.path.rsplit("/", 1)[-1]
        return name[:-3] if name.lower().endswith(".md") else name

    @property
    def names(self) -> tuple[str, ...]:
        """Every name the note answers to: its title, its file name, then the frontmatter `aliases`."""
        out = [self.title]
        for name in (self.stem, *frontmatter_names(self.frontmatter)):
            if name.casefold() not in (n.casefold() for n in out):
                out.append(name)
        return tuple(out)

    @property
    def aliases(self) -> tuple[str, ...]:
        """The names besides the title (the file name when a frontmatter title differs, `aliases`)."""
        return self.names[1:]

    @property
    def description(self) -> str:
        """The frontmatter `description` (or `summary`), one line; '' when absent."""
        for key in ("description", "summary"):
            value = self.frontmatter.get(key)
            if isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value).strip():
                return " ".join(str(value).split())
        return ""

    @property
    def tag_names(self) -> tuple[str, ...]:
        """Unique tag names, lower-cased, in first-seen order."""
        seen: dict[str, None] = {}
        for tag in self.tags:
            seen.setdefault(tag.name.lower(), None)
        return tuple(seen)


@dataclass(frozen=True, slots=True)
class Shard:
    """A span of one note: the unit that is indexed, retrieved and shown in context."""

    node_id: str
    """Stable id that reads like an Obsidian link target: `path#Heading > Sub`."""
    path: str
    """The note's vault-relative path."""
    ordinal: int
    """Position of the shard in its note (0-based)."""
    start: int
    """Offset of the shard's first character in the note's raw text."""
    end: int
    """Offset past its last character: `note.text[start:end]` is the shard."""
    heading_path: tuple[str, ...]
    """Headings enclosing the shard, outermost first."""
    text: str
    """The shard's raw text."""
    search_text: str
    """What is indexed: title and heading path, the text, and any note metadata."""
    hash: str
    """Content hash of `search_text` (embedding cache key)."""
    source_type: str = "note"
    """Inherited from the note."""


@dataclass(frozen=True, slots=True)
class Highlight:
    """A matched span, as offsets in the note's raw text."""

    start: int
    """Offset of the first matched character."""
    end: int
    """Offset past the match."""
    term: str
    """The query word or phrase it matches."""


def frontmatter_names(frontmatter: dict[str, Any]) -> tuple[str, ...]:
    """Other names of a note from its frontmatter: `title` when present, then `aliases` (or `alias`).

    Obsidian reads `aliases` as a list or as one string; an older convention separates several
    names in one string by commas, so a string is split at commas.
    """
    out: list[str] = []
    title = frontmatter.get("title")
    if isinstance(title, (str, int, float)) and not isinstance(title, bool) and str(title).strip():
        out.append(" ".join(str(title).split()))
    for key in ("aliases", "alias"):
        raw = frontmatter.get(key)
        if raw is None:
            continue
        items = (
            raw
            if isinstance(raw, list)
            else str(raw).split(",")
            if isinstance(raw, (str, int, float))
            else []
        )
        for item in items:
            if isinstance(item, (str, int, float)) and not isinstance(item, bool):
                name = " ".join(str(item).split())
                if name and name not in out:
                    out.append(name)
    return tuple(out)


def _fast_setstate(*classes: type) -> None:
    """Give these frozen slotted records a `__setstate__` that sets field values in field order.

    The index store rebuilds stored notes through it (`object.__new__` + `__setstate__`), which
    skips the per-field checks of the generated `__init__`: opening a large index builds millions
    of these records. The values come from plain msgpack data, never from pickle.
    """
    from dataclasses import fields

    for cls in classes:
        names = tuple(f.name for f in fields(cls))

        def setstate(
            self: Any, state: Any, _names: tuple[str, ...] = names, _set: Any = object.__setattr__
        ) -> None:
            for name, value in zip(_names, state):
                _set(self, name, value)

        cls.__setstate__ = setstate  # type: ignore[attr-defined]


_fast_setstate(Heading, Link, Tag, Block, Note, Shard, Highlight)


#: File extensions a title leaves out (Markdown notes, JSON canvases, PDFs).
TITLE_EXTENSIONS = (".md", ".canvas", ".pdf")
#: Words of a conversation turn's text that its shown title keeps.
TURN_TITLE_WORDS = 8
_TURN_PATH = re.compile(r"(?:^|/)turns/turn_\d+/[^/]+$")
_USER_FOLDER = re.compile(r"(?:^|/)Users/([^/]+)/")
_MARKUP = re.compile(r"[#>*_`|\[\]]+")


def title_of(path: str, frontmatter: dict[str, Any]) -> str:
    """A note's title as Obsidian shows it: the frontmatter `title` when set, else the file name
    without folder and extension (`.md`, `.canvas`, `.pdf`). A first heading is not the title."""
    title = frontmatter.get("title")
    if isinstance(title, (str, int, float)) and not isinstance(title, bool) and str(title).strip():
        return " ".join(str(title).split())
    name = path.rsplit("/", 1)[-1]
    for ext in TITLE_EXTENSIONS:
        if name.lower().endswith(ext) and len(name) > len(ext):
            return name[: -len(ext)]
    return name


def display_title(note: Note) -> str:
    """The title a person reads in a list of notes: the note's title, except for a conversation turn
    titled only by its file name (every turn is `turns/turn_NNNNNN/context.md`), which says who
    spoke, when, and what: its `topic`, else its first words
    (`Caroline, 2023-05-08: I went to a LGBTQ support group yesterday…`)."""
    turn = note.source_type == "turn_summary" or bool(_TURN_PATH.search(note.path))
    if not turn or note.title != note.stem:
        return note.title
    speaker = ""
    for source in (note.frontmatter, note.metadata):
        value = source.get("speaker") if isinstance(source, dict) else None
        if isinstance(value, str) and value.strip():
            speaker = " ".join(value.split())
            break
    if not speaker and (m := _USER_FOLDER.search(note.path)):
        speaker = m.group(1)
    day = note_date(note.frontmatter, note.metadata, note.path, None)
    what = ""
    for source in (note.frontmatter, note.metadata):
        value = source.get("topic") if isinstance(source, dict) else None
        if isinstance(value, str) and value.strip():
            what = " ".join(value.split())
            break
    if not what:
        words = _MARKUP.sub(" ", note.text[note.body_start :]).split()
        if (
            speaker
            and words
            and words[0].rstrip(":").casefold() == speaker.casefold()
            and words[0].endswith(":")
        ):
            words = words[1:]  # `Caroline: I went ...`: the speaker is named already
        what = " ".join(words[:TURN_TITLE_WORDS]) + ("…" if len(words) > TURN_TITLE_WORDS else "")
    who = ", ".join(p for p in (speaker, day[0].isoformat() if day else "") if p)
    out = f"{who}: {what}" if who and what else who or what
    return out or note.title
