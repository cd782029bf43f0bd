"""Pure text helpers of the app: note Markdown for display, search-mode prefixes, paragraphs, atomic saves."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from explorer.text.files import write_atomic
from explorer.vault.model import Note

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
    ref = unquote(href[len(WIKILINK_SCHEME):])
    target, _, heading = ref.partition("#")
    return target, heading


def _label(text: str) -> str:
    return _MD_ESCAPE.sub(r"\\\1", text)


def note_markdown(note: Note) -> str:
    """The note's text for the Markdown widget, line for line with the raw text.

    Frontmatter becomes a fenced YAML block and `[[target#heading|alias]]` becomes a Markdown link
    with the `wikilink:` scheme, so a rendered block's source lines are the raw note's lines.
    """
    text = note.text
    out: list[str] = []
    pos = 0
    if note.body_start > 0:
        front = text[: note.body_start]
        lines = front.split("\n")
        if lines and lines[0].strip() == "---":
            lines[0] = "```yaml"
            for i in range(len(lines) - 1, 0, -1):
                if lines[i].strip() in ("---", "..."):
                    lines[i] = "```"
                    break
        out.append("\n".join(lines))
        pos = note.body_start
    for link in sorted(note.links, key=lambda lk: lk.start):
        if link.start < pos or link.end > len(text):
            continue
        out.append(text[pos:link.start])
        if link.alias:
            label = link.alias
        elif link.target:
            label = link.target + (f" › {link.heading}" if link.heading else "")
        else:
            label = link.heading or link.block or "link"
        label = ("↪ " if link.embed else "") + label
        out.append(f"[{_label(label)}]({wikilink_href(link.target, link.heading, link.block)})")
        pos = link.end
    out.append(text[pos:])
    return "".join(out)


def line_of(text: str, cursor: int) -> int:
    """0-based line number of a character offset."""
    return text.count("\n", 0, max(0, min(cursor, len(text))))


def paragraph_at(text: str, index: int, min_words: int = 8, max_chars: int = 600) -> str:
    """The paragraph (blank-line separated) around `index`, grown backwards while it is short."""
    index = max(0, min(index, len(text)))
    start = text.rfind("\n\n", 0, index)
    start = 0 if start == -1 else start + 2
    end = text.find("\n\n", index)
    end = len(text) if end == -1 else end
    while len(text[start:end].split()) < min_words and start > 0:
        prev = text.rfind("\n\n", 0, max(0, start - 2))
        start = 0 if prev == -1 else prev + 2
    para = text[start:end]
    if len(para) > max_chars:
        rel = index - start
        lo = max(0, min(rel - max_chars // 2, len(para) - max_chars))
        para = para[lo:lo + max_chars]
    return " ".join(para.split())


_FILTERISH = re.compile(r"[\"\[\]|]|(?<!\w)-(?=\w)|(?<=\w):(?=\S)")


def as_plain_query(text: str) -> str:
    """Text made safe to search as words: no quotes, filters, exclusions or wikilink brackets."""
    return " ".join(_FILTERISH.sub(" ", text).split())


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


def note_titles(index: Any) -> dict[str, str] | None:
    """Every note's title by path, through the index's read API (call it off the UI thread)."""
    if index is None:
        return None
    return index.note_titles()
