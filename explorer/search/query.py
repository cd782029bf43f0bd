"""Parse a search box query: free text plus Obsidian-style filters (tag:, path:, file:, section:, "phrase", -word)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# A token is a quoted phrase (possibly prefixed by an operator or -), or a run of non-space characters.
_TOKEN = re.compile(r'(-?)(?:(\w+):)?"([^"]*)"|(\S+)')
OPERATORS = ("tag", "path", "file", "section")
_REFERENCE = re.compile(r"\[\[([^\]|#]+)(?:[#|][^\]]*)?\]\]")


@dataclass(frozen=True, slots=True)
class ParsedQuery:
    """A query split into what is searched and what filters."""

    raw: str
    """The query as typed."""
    text: str
    """Free text that is searched (phrases included, operators and exclusions removed)."""
    phrases: tuple[str, ...] = ()
    """Exact phrases that a matching shard must contain."""
    excluded: tuple[str, ...] = ()
    """Words or phrases that a matching shard must not contain."""
    tags: tuple[str, ...] = ()
    """Tags the note must carry (lower-case, without #; a parent tag covers its children)."""
    paths: tuple[str, ...] = ()
    """Substrings the note's path must contain."""
    files: tuple[str, ...] = ()
    """Substrings the note's file name must contain."""
    sections: tuple[str, ...] = ()
    """Substrings the shard's heading path must contain."""
    references: tuple[str, ...] = ()
    """Notes named as `[[link]]` in the query: always included, not searched as text."""
    warnings: tuple[str, ...] = field(default=())
    """Notes about the parse (e.g. an unbalanced quote)."""

    @property
    def has_filters(self) -> bool:
        """True when anything other than free text was given."""
        return bool(self.phrases or self.excluded or self.tags or self.paths or self.files or self.sections or self.references)

    def filters_dict(self) -> dict[str, list[str]]:
        """The filters, for JSON."""
        return {
            "phrases": list(self.phrases),
            "excluded": list(self.excluded),
            "tags": list(self.tags),
            "paths": list(self.paths),
            "files": list(self.files),
            "sections": list(self.sections),
            "references": list(self.references),
        }


def parse_query(raw: str) -> ParsedQuery:
    """Split `raw` into free text and filters; unknown operators (`foo:bar`) stay free text."""
    warnings: list[str] = []
    references = tuple(m.group(1).strip() for m in _REFERENCE.finditer(raw) if m.group(1).strip())
    text = _REFERENCE.sub(" ", raw)
    if text.count('"') % 2:
        warnings.append("unbalanced quote ignored")
        last = text.rfind('"')
        text = text[:last] + text[last + 1:]
    words: list[str] = []
    phrases: list[str] = []
    excluded: list[str] = []
    found: dict[str, list[str]] = {op: [] for op in OPERATORS}
    for m in _TOKEN.finditer(text):
        neg, op, quoted, bare = m.group(1), m.group(2), m.group(3), m.group(4)
        if quoted is not None:
            value = quoted.strip()
            if op and op.lower() in OPERATORS:
                if value:
                    found[op.lower()].append(value)
                continue
            if not value:
                continue
            if neg:
                excluded.append(value)
            else:
                if op:
                    words.append(op)
                phrases.append(value)
                words.append(value)
            continue
        token = bare or ""
        if token.startswith("-") and len(token) > 1:
            excluded.append(token[1:])
            continue
        name, sep, value = token.partition(":")
        if sep and name.lower() in OPERATORS and value:
            found[name.lower()].append(value)
            continue
        if token.startswith("#") and len(token) > 1 and re.fullmatch(r"#[\w/-]+", token):
            found["tag"].append(token[1:])
            continue
        words.append(token)
    return ParsedQuery(
        raw=raw,
        text=" ".join(words).strip(),
        phrases=tuple(phrases),
        excluded=tuple(excluded),
        tags=tuple(t.lstrip("#").lower() for t in found["tag"]),
        paths=tuple(found["path"]),
        files=tuple(found["file"]),
        sections=tuple(found["section"]),
        references=references,
        warnings=tuple(warnings),
    )
