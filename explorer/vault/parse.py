"""Parse one note with markdown-it-py: frontmatter, title, headings, tags, wikilinks, embeds, block ids."""

from __future__ import annotations

import bisect
import re
from functools import lru_cache
from typing import Any

import yaml
from markdown_it import MarkdownIt
from mdit_py_plugins.front_matter import front_matter_plugin

from explorer.vault.model import Block, Heading, Link, Note, Tag

# libyaml's loader when PyYAML was built with it: the same documents, about 10x faster.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_NEWLINE = re.compile(r"\r\n|\r|\n")
_WIKILINK = re.compile(r"(!?)\[\[([^\[\]\r\n]+?)\]\]")
# A tag starts at the line start or after white space or an opening bracket, and is not only digits.
_TAG = re.compile(r"(?:^|(?<=[\s(\[{,;]))#([\w/-]*[^\W\d_][\w/-]*)", re.MULTILINE)
_BLOCK_ID = re.compile(r"(?:^|[ \t])\^([A-Za-z0-9-]+)[ \t]*$", re.MULTILINE)
_INLINE_CODE = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)


@lru_cache(maxsize=1)
def _markdown() -> MarkdownIt:
    # Only block tokens are read (headings, code, frontmatter): inline parsing is skipped.
    return MarkdownIt("commonmark").enable("table").use(front_matter_plugin).disable("inline")


def line_starts(text: str) -> list[int]:
    """Offsets at which each line of `text` begins (any of \\n, \\r\\n, \\r ends a line)."""
    starts = [0]
    starts.extend(m.end() for m in _NEWLINE.finditer(text))
    return starts


def parse_note(path: str, text: str, source_type: str = "note", metadata: dict[str, Any] | None = None) -> Note:
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

    links = tuple(_links(text, body_start, in_code))
    tags = tuple(_frontmatter_tags(frontmatter)) + tuple(
        Tag(m.group(1), m.start(), m.end())
        for m in _TAG.finditer(text, body_start)
        if not in_code(m.start()) and not _inside_link(m.start(), links)
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


def _load_frontmatter(content: str) -> tuple[dict[str, Any], str]:
    try:
        data = yaml.load(content, Loader=_YAML_LOADER) if content.strip() else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 2})" if mark is not None else ""
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return {}, f"malformed frontmatter{where}: {reason}; read as no frontmatter"
    if data is None:
        return {}, ""
    if not isinstance(data, dict):
        return {}, f"frontmatter is a {type(data).__name__}, not a mapping; ignored"
    return {str(k): _plain(v) for k, v in data.items()}, ""


def _plain(value: Any) -> Any:
    """YAML dates and other objects become strings so metadata stays JSON-serialisable."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def _frontmatter_tags(frontmatter: dict[str, Any]) -> list[Tag]:
    raw = frontmatter.get("tags", frontmatter.get("tag"))
    if raw is None:
        return []
    items = raw if isinstance(raw, list) else re.split(r"[,\s]+", str(raw))
    return [Tag(str(item).strip().lstrip("#"), -1, -1) for item in items if str(item).strip().lstrip("#")]


def _inline_code_spans(text: str, body_start: int, blocks: list[tuple[int, int]]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    checker = _span_checker(sorted(blocks))
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
    for m in _WIKILINK.finditer(text, body_start):
        if in_code(m.start()):
            continue
        inner = m.group(2)
        target_part, _, alias = inner.partition("|")
        target, _, anchor = target_part.partition("#")
        heading = block = ""
        if anchor.startswith("^"):
            block = anchor[1:].strip()
        else:
            heading = anchor.strip()
        out.append(Link(target.strip(), heading, block, alias.strip(), bool(m.group(1)), m.start(), m.end()))
    return out


def _inside_link(offset: int, links: tuple[Link, ...]) -> bool:
    return any(link.start <= offset < link.end for link in links)


def _blocks(text: str, body_start: int, starts: list[int], in_code) -> list[Block]:
    out = []
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
    return text[starts[i]:end].rstrip("\r\n")


def _title(path: str, frontmatter: dict[str, Any]) -> str:
    """Obsidian's title, the file name without folder and `.md`, unless the frontmatter sets a
    `title`. A first H1 is a heading like any other."""
    title = frontmatter.get("title")
    if isinstance(title, (str, int, float)) and not isinstance(title, bool) and str(title).strip():
        return " ".join(str(title).split())
    name = path.rsplit("/", 1)[-1]
    return name[:-3] if name.lower().endswith(".md") else name
