"""Parse one note with markdown-it-py: frontmatter, title, headings, tags, wikilinks, embeds, block ids."""

from __future__ import annotations

import bisect
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from explorer.vault.model import Block, Heading, Link, Note, Tag, title_of

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

# The Markdown and YAML parsers are imported when a note is first parsed: opening a stored index
# whose notes are unchanged, or a search, parses none.

#: Frontmatter larger than this (characters) is not parsed; the note is read without it.
MAX_FRONTMATTER_CHARS = 64_000
#: Aliases (`*name`) a frontmatter may use: each can stand for a whole subtree ("billion laughs").
MAX_YAML_ALIASES = 32
#: Nesting depth of frontmatter collections.
MAX_YAML_DEPTH = 32
#: Values in the frontmatter once aliases are expanded (what the index stores and shows).
MAX_YAML_VALUES = 20_000
_NEWLINE = re.compile(r"\r\n|\r|\n")
_WIKILINK = re.compile(r"(!?)\[\[([^\[\]\r\n]+?)\]\]")
# [text](target) or [text](<target with spaces> "title"); `!` makes it an embed.
_MDLINK = re.compile(
    r"(!?)\[([^\[\]\r\n]*)\]\(\s*(<[^<>\r\n]*>|[^\s()<>]+(?:\([^\s()]*\)[^\s()<>]*)*)(?:\s+(?:\"[^\"\r\n]*\"|'[^'\r\n]*'))?\s*\)"
)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
# A tag starts at the line start or after white space or an opening bracket, and is not only digits.
# Each pattern the parser scans a whole note with starts with its literal character, and what may
# come before it is a lookbehind: the regex engine then jumps from one such character to the next
# instead of trying the pattern at every offset (30x faster on notes; the same matches).
# A `#` at the text's start or after white space or an opening bracket (a line start is after
# white space).
_TAG = re.compile(r"#(?<![^\s(\[{,;]#)([\w/-]*[^\W\d_][\w/-]*)")
# A `^id` at the end of a line, at its start or after a space or tab.
_BLOCK_ID = re.compile(r"\^(?<![^ \t\n]\^)([A-Za-z0-9-]+)[ \t]*$", re.MULTILINE)
# `_WIKILINK` without its `!`, which `_links` reads from the character before.
_WIKILINK_INNER = re.compile(r"\[\[([^\[\]\r\n]+?)\]\]")
_INLINE_CODE = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)


@lru_cache(maxsize=1)
def _markdown() -> MarkdownIt:
    # Only block tokens are read (headings, code, frontmatter): inline parsing is skipped.
    from markdown_it import MarkdownIt
    from mdit_py_plugins.front_matter import front_matter_plugin

    return MarkdownIt("commonmark").enable("table").use(front_matter_plugin).disable("inline")


def line_starts(text: str) -> list[int]:
    """Offsets at which each line of `text` begins (any of \\n, \\r\\n, \\r ends a line)."""
    starts = [0]
    starts.extend(m.end() for m in _NEWLINE.finditer(text))
    return starts


def parse_note(
    path: str, text: str, source_type: str = "note", metadata: dict[str, Any] | None = None
) -> Note:
    """Parse `text`, the raw content of the note at vault-relative `path`.

    Every offset in the result indexes `text` itself, so `text[h.start:h.end]` is a heading's line.
    Malformed frontmatter is reported in `warnings` and the note is parsed without it.
    """
    starts = line_starts(text)
    n_lines = len(starts)

    def line_span(first: int, last: int) -> tuple[int, int]:
        """Offsets of lines [first, last) without the final line break."""
        begin = starts[min(first, n_lines - 1)] if first < n_lines else len(text)
        if last < n_lines:
            end = starts[last]
            while end > begin and text[end - 1] in "\r\n":
                end -= 1
        else:
            end = len(text)
        return begin, end

    warnings: list[str] = []
    frontmatter: dict[str, Any] = {}
    body_start = 0
    headings: list[Heading] = []
    code: list[tuple[int, int]] = []

    tokens = _markdown().parse(text)
    for i, tok in enumerate(tokens):
        if tok.type == "front_matter" and tok.map:
            body_start = line_span(0, tok.map[1])[1]
            code.append((0, body_start))
            frontmatter, problem = _load_frontmatter(tok.content)
            if problem:
                warnings.append(problem)
        elif tok.type == "heading_open" and tok.map:
            begin, end = line_span(tok.map[0], tok.map[1])
            inline = tokens[i + 1]
            headings.append(Heading(int(tok.tag[1]), inline.content.strip(), begin, end))
        elif tok.type in ("fence", "code_block") and tok.map:
            code.append(line_span(tok.map[0], tok.map[1]))

    code.extend(_inline_code_spans(text, body_start, code))
    code.sort()
    in_code = _span_checker(code)

    wikilinks = _links(text, body_start, in_code)
    links = tuple(
        sorted(wikilinks + _markdown_links(text, body_start, in_code, wikilinks), key=lambda link: link.start)
    )
    in_link = _span_checker([(link.start, link.end) for link in links])
    tags = tuple(_frontmatter_tags(frontmatter)) + tuple(
        Tag(m.group(1), m.start(), m.end())
        for m in _TAG.finditer(text, body_start)
        if not in_code(m.start()) and not in_link(m.start())
    )
    blocks = tuple(_blocks(text, body_start, starts, in_code))
    title = _title(path, frontmatter)
    return Note(
        path=path,
        text=text,
        title=title,
        frontmatter=frontmatter,
        body_start=body_start,
        headings=tuple(headings),
        links=links,
        tags=tags,
        blocks=blocks,
        source_type=source_type,
        metadata=dict(metadata or {}),
        warnings=tuple(warnings),
    )


class _TooComplex(ValueError):
    """The frontmatter exceeds a size, depth or alias limit."""


def _load_frontmatter(content: str) -> tuple[dict[str, Any], str]:
    """Parse frontmatter YAML with bounds: (mapping, "") or ({}, the reason it was ignored).

    The safe loader never builds objects from tags; on top of that the document's size, nesting
    depth and number of aliases are checked on the event stream before anything is built, and the
    expanded value is copied with a budget, so an alias bomb or a self-referencing alias costs
    a few milliseconds and a warning, never memory. Any parse problem is a warning, never an error.
    """
    if not content.strip():
        return {}, ""
    yaml, loader = _yaml()
    try:
        if len(content) > MAX_FRONTMATTER_CHARS:
            raise _TooComplex(f"{len(content):,} characters (limit {MAX_FRONTMATTER_CHARS:,})")
        _check_yaml_events(content)
        data = yaml.load(content, Loader=loader)
        if data is None:
            return {}, ""
        if not isinstance(data, dict):
            return {}, f"frontmatter is a {type(data).__name__}, not a mapping; ignored"
        budget = [MAX_YAML_VALUES]
        return {str(k): _plain(v, budget, 0) for k, v in data.items()}, ""
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 2})" if mark is not None else ""
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return {}, f"malformed frontmatter{where}: {reason}; read as no frontmatter"
    except _TooComplex as exc:
        return {}, f"frontmatter too large or complex: {exc}; read as no frontmatter"
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # E.g. `date: 2024-13-45` (libyaml builds a datetime and fails) or a 5,000-digit number.
        return {}, f"malformed frontmatter: {_first_line(exc)}; read as no frontmatter"


@lru_cache(maxsize=1)
def _yaml() -> tuple[Any, Any]:
    """PyYAML and its safe loader: libyaml's when PyYAML was built with it (the same documents, about 10x faster)."""
    import yaml

    return yaml, getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _check_yaml_events(content: str) -> None:
    yaml, loader = _yaml()
    aliases = depth = 0
    for event in yaml.parse(content, Loader=loader):
        if isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_YAML_ALIASES:
                raise _TooComplex(f"more than {MAX_YAML_ALIASES} aliases")
        elif isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise _TooComplex(f"nested deeper than {MAX_YAML_DEPTH} levels")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _plain(value: Any, budget: list[int], depth: int) -> Any:
    """A JSON-ready copy: YAML dates and other objects become strings; aliases are expanded
    within `budget` values and `MAX_YAML_DEPTH` levels (a self-referencing alias ends there)."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooComplex(f"more than {MAX_YAML_VALUES:,} values once aliases are expanded")
    if depth > MAX_YAML_DEPTH:
        raise _TooComplex(f"nested deeper than {MAX_YAML_DEPTH} levels")
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, list):
        return [_plain(v, budget, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v, budget, depth + 1) for k, v in value.items()}
    return str(value)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def _frontmatter_tags(frontmatter: dict[str, Any]) -> list[Tag]:
    raw = frontmatter.get("tags", frontmatter.get("tag"))
    if raw is None:
        return []
    items = raw if isinstance(raw, list) else re.split(r"[,\s]+", str(raw))
    return [Tag(str(item).strip().lstrip("#"), -1, -1) for item in items if str(item).strip().lstrip("#")]


def _inline_code_spans(text: str, body_start: int, blocks: list[tuple[int, int]]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    checker = _span_checker(sorted(blocks))
    if "`" not in text:
        return spans
    for m in _INLINE_CODE.finditer(text, body_start):
        if checker(m.start()):
            continue
        # Inline code never spans a blank line.
        if "\n\n" in m.group(0) or "\r\n\r\n" in m.group(0):
            continue
        spans.append((m.start(), m.end()))
    return spans


def _span_checker(spans: list[tuple[int, int]]):
    begins = [s for s, _ in spans]

    def inside(offset: int) -> bool:
        i = bisect.bisect_right(begins, offset) - 1
        return i >= 0 and spans[i][0] <= offset < spans[i][1]

    return inside


def _links(text: str, body_start: int, in_code) -> list[Link]:
    out = []
    for m in _WIKILINK_INNER.finditer(text, body_start):
        start = m.start()
        embed = start > body_start and text[start - 1] == "!"
        if embed:
            start -= 1
        if in_code(start):
            continue
        inner = m.group(1)
        target_part, _, alias = inner.partition("|")
        target, _, anchor = target_part.partition("#")
        heading = block = ""
        if anchor.startswith("^"):
            block = anchor[1:].strip()
        else:
            heading = anchor.strip()
        out.append(Link(target.strip(), heading, block, alias.strip(), embed, start, m.end()))
    return out


def markdown_link_target(raw: str) -> tuple[str, str, str] | None:
    """(path, heading, block) of a Markdown link's destination, URL-decoded; None for a URL.

    `../Some%20note.md#Care` gives ('../Some note.md', 'Care', ''); `#Care` gives ('', 'Care', '').
    """
    dest = raw.strip()
    if dest.startswith("<") and dest.endswith(">"):
        dest = dest[1:-1].strip()
    if not dest or _SCHEME.match(dest) or dest.startswith("//"):
        return None
    path, _, anchor = dest.partition("#")
    path = unquote(path)
    anchor = unquote(anchor).strip()
    if anchor.startswith("^"):
        return path, "", anchor[1:].strip()
    return path, anchor, ""


def _markdown_links(text: str, body_start: int, in_code, taken: list[Link]) -> list[Link]:
    out: list[Link] = []
    if "](" not in text:
        return out
    in_wikilink = _span_checker([(link.start, link.end) for link in taken])
    for m in _MDLINK.finditer(text, body_start):
        if in_code(m.start()) or in_wikilink(m.start()):
            continue
        dest = markdown_link_target(m.group(3))
        if dest is None:
            continue
        path, heading, block = dest
        out.append(
            Link(
                path, heading, block, m.group(2).strip(), bool(m.group(1)), m.start(), m.end(), markdown=True
            )
        )
    return out


def display_text(text: str) -> str:
    """`text` with each link replaced by what a reader sees of it: a Markdown link's text (web
    links too), a wikilink's alias (else its target and heading). This is what gets indexed, so link URLs and
    targets hidden behind link text do not count as words of the note."""
    if "[" not in text:
        return text

    def md(m: re.Match[str]) -> str:
        return m.group(2)

    def wiki(m: re.Match[str]) -> str:
        target, _, alias = m.group(2).partition("|")
        if alias.strip():
            return alias
        return " ".join(p for p in target.replace("#^", " ").split("#") if p)

    if "](" in text:
        text = _MDLINK.sub(md, text)
    return _WIKILINK.sub(wiki, text) if "[[" in text else text


def _blocks(text: str, body_start: int, starts: list[int], in_code) -> list[Block]:
    out: list[Block] = []
    if "^" not in text:
        return out
    for m in _BLOCK_ID.finditer(text, body_start):
        if in_code(m.start(1)):
            continue
        line_no = bisect.bisect_right(starts, m.start(1)) - 1
        line_begin = starts[line_no]
        marker = m.start(0) if text[m.start(0)] == "^" else m.start(0) + 1
        own_line = not text[line_begin:marker].strip()
        # A lone `^id` line names the block above it.
        last_line = line_no - 1 if own_line else line_no
        while own_line and last_line > 0 and not _line(text, starts, last_line).strip():
            last_line -= 1
        first_line = last_line
        while first_line > 0 and starts[first_line - 1] >= body_start:
            prev = _line(text, starts, first_line - 1)
            if not prev.strip() or prev.lstrip().startswith("#"):
                break
            first_line -= 1
        begin = starts[max(first_line, 0)]
        end = marker if not own_line else starts[last_line] + len(_line(text, starts, last_line))
        while end > begin and text[end - 1] in " \t":
            end -= 1
        out.append(Block(m.group(1), begin, end))
    return out


def _line(text: str, starts: list[int], i: int) -> str:
    end = starts[i + 1] if i + 1 < len(starts) else len(text)
    return text[starts[i] : end].rstrip("\r\n")


def _title(path: str, frontmatter: dict[str, Any]) -> str:
    """Obsidian's title, the file name without folder and `.md`, unless the frontmatter sets a
    `title`. A first H1 is a heading like any other."""
    return title_of(path, frontmatter)
