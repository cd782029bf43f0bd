"""Parse a search box query: free text plus Obsidian-style filters (tag:, path:, file:, section:, "phrase", -word,
[property:value]) and time (after:, before:, on:, recent:)."""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field
from typing import Any

from explorer.text.dates import DateError, Period, parse_period

# A token is a quoted phrase (possibly prefixed by an operator or -), or a run of non-space characters.
_TOKEN = re.compile(r'(-?)(?:(\w+):)?"([^"]*)"|(\S+)')
OPERATORS = ("tag", "path", "file", "section", "vault")
_REFERENCE = re.compile(r"\[\[([^\]|#]+)(?:[#|][^\]]*)?\]\]")
# Obsidian's property search: `[name]`, `[name:value]`, `-[name:value]`, standing as a word of its own.
_PROPERTY = re.compile(r'(?<!\S)(-?)\[([^\[\]:"]+)(?::([^\[\]]*))?\](?!\w)')
_OR = re.compile(r"\s+OR\s+")
_DATE_OP = re.compile(r"(?<!\S)(after|before|on):", re.IGNORECASE)
#: Words a date operator's value may span (`7th of May, 2023` is four).
_DATE_WORDS = 4
#: Half-life in days of `recent:` given without a length (`recent:on`).
RECENT_DEFAULT_DAYS = 30.0
_RECENT = re.compile(r"(\d{1,5}(?:\.\d+)?)\s*([dwmy]?)")
_RECENT_UNIT_DAYS = {"": 1.0, "d": 1.0, "w": 7.0, "m": 30.0, "y": 365.0}
#: Most filters one query may hold (`tag:`, `path:`, `-word`, `"phrase"`, `[property]`, `after:`, …):
#: a person's query has a few, and each one is a pass over the index (why-not runs a search per filter).
MAX_QUERY_FILTERS = 64


@dataclass(frozen=True, slots=True)
class PropertyFilter:
    """One `[property]` or `[property:value]` of the query (Obsidian's property search)."""

    name: str
    """The property's name as written (matched case-insensitively)."""
    values: tuple[tuple[str, bool], ...] = ()
    """Alternatives (`A OR B`) as (text, exact): exact for a quoted value (equal to a whole value),
    else the value contains the text; all case-insensitive. Empty: the note has the property."""
    negated: bool = False
    """`-[...]`: notes that match are left out."""

    @property
    def text(self) -> str:
        """The filter as it would be typed."""
        alts = " OR ".join(f'"{v}"' if exact else v for v, exact in self.values)
        return f"{'-' if self.negated else ''}[{self.name}{':' + alts if alts else ''}]"

    def matches(self, frontmatter: dict[str, Any]) -> bool:
        """True when the note's frontmatter has the property (with one of the values, if given);
        a list property matches when any of its items does. `negated` is not applied here."""
        key = self.name.strip().casefold()
        found = [v for k, v in frontmatter.items() if isinstance(k, str) and k.strip().casefold() == key]
        if not found:
            return False
        return self.matches_values(tuple(x for v in found for x in property_values(v)))

    def matches_values(self, items: tuple[str, ...]) -> bool:
        """True when one of the values asked for matches one of a note's `property_values` (or none was asked)."""
        if not self.values:
            return True
        for want, exact in self.values:
            want = want.casefold()
            if any((item == want) if exact else (want in item) for item in items):
                return True
        return False


def property_values(value: Any) -> tuple[str, ...]:
    """A frontmatter value as the folded strings a property filter compares (list items one by one)."""
    return tuple(_scalars(value, 0))


def _scalars(value: Any, depth: int) -> list[str]:
    """A property value as folded strings: list items one by one, dates in ISO form, booleans as true/false."""
    if value is None:
        return []
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, (_dt.date, _dt.datetime)):
        return [value.isoformat().casefold()]
    if isinstance(value, (str, int, float)):
        return [str(value).casefold()]
    if isinstance(value, (list, tuple, set)) and depth < 4:
        return [x for item in value for x in _scalars(item, depth + 1)]
    return []


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
    vaults: tuple[str, ...] = ()
    """`vault:name` / `vault:*`: the vaults of a shared collection the search covers (empty: the caller's own)."""
    properties: tuple[PropertyFilter, ...] = ()
    """`[property]` / `[property:value]` filters on the note's frontmatter."""
    after: tuple[Period, ...] = ()
    """The note's date must fall after each of these periods."""
    before: tuple[Period, ...] = ()
    """The note's date must fall before each of these periods."""
    on: tuple[Period, ...] = ()
    """The note's date must fall within each of these periods."""
    recent: float | None = None
    """`recent:`: half-life in days of a preference for newer notes (0: off; None: the setting's)."""
    warnings: tuple[str, ...] = field(default=())
    """Notes about the parse (e.g. an unbalanced quote)."""

    @property
    def has_filters(self) -> bool:
        """True when anything other than free text was given."""
        return bool(
            self.phrases
            or self.excluded
            or self.tags
            or self.paths
            or self.files
            or self.sections
            or self.references
            or self.has_note_filters
        )

    @property
    def filter_count(self) -> int:
        """How many filters were given (each phrase, exclusion, tag, path, file, section, vault,
        reference, property and date operator counts once)."""
        return sum(
            map(
                len,
                (
                    self.phrases,
                    self.excluded,
                    self.tags,
                    self.paths,
                    self.files,
                    self.sections,
                    self.references,
                    self.vaults,
                    self.properties,
                    self.after,
                    self.before,
                    self.on,
                ),
            )
        )

    @property
    def has_note_filters(self) -> bool:
        """True when a property or date filter was given."""
        return bool(self.properties or self.after or self.before or self.on)

    def filters_dict(self) -> dict[str, Any]:
        """The filters, for JSON (property, date and recency keys only when given)."""
        extra: dict[str, Any] = {}
        if self.properties:
            extra["properties"] = [p.text for p in self.properties]
        for name, periods in (("after", self.after), ("before", self.before), ("on", self.on)):
            if periods:
                extra[name] = [p.to_dict() for p in periods]
        if self.recent is not None:
            extra["recent_days"] = self.recent
        if self.vaults:
            extra["vaults"] = list(self.vaults)
        return {
            "phrases": list(self.phrases),
            "excluded": list(self.excluded),
            "tags": list(self.tags),
            "paths": list(self.paths),
            "files": list(self.files),
            "sections": list(self.sections),
            "references": list(self.references),
            **extra,
        }


def parse_query(raw: str, today: _dt.date | None = None) -> ParsedQuery:
    """Split `raw` into free text and filters; unknown operators (`foo:bar`) stay free text.

    Relative dates (`after:last week`) are read against `today` (default: the local date). A date
    that does not parse is not applied: a warning says why, and its words stay in the free text.
    """
    warnings: list[str] = []
    today = today or _dt.date.today()
    references = tuple(m.group(1).strip() for m in _REFERENCE.finditer(raw) if m.group(1).strip())
    text = _REFERENCE.sub(" ", raw)
    properties: list[PropertyFilter] = []
    text = _PROPERTY.sub(lambda m: _property(m, properties), text)
    if text.count('"') % 2:
        warnings.append("unbalanced quote ignored")
        last = text.rfind('"')
        text = text[:last] + text[last + 1 :]
    periods: dict[str, list[Period]] = {"after": [], "before": [], "on": []}
    text = _take_dates(text, today, periods, warnings)
    recent: float | None = None
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
        if sep and name.lower() == "recent":
            days = _recent_days(value)
            if days is None:
                warnings.append(
                    f"recent:{value} not applied: give a half-life such as recent:30d, recent:2w, "
                    "recent:6m, recent:1y, recent:on or recent:off"
                )
                words.append(value)
            else:
                recent = days
            continue
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
        vaults=tuple(dict.fromkeys(found["vault"])),
        properties=tuple(properties),
        after=tuple(periods["after"]),
        before=tuple(periods["before"]),
        on=tuple(periods["on"]),
        recent=recent,
        warnings=tuple(warnings),
    )


def _property(m: re.Match[str], out: list[PropertyFilter]) -> str:
    """Record one `[name:value]` match; it leaves the free text."""
    neg, name, value = m.group(1), m.group(2).strip(), m.group(3)
    if not name:  # `[ ]` or `[:x]`: not a property
        return m.group(0)
    values: list[tuple[str, bool]] = []
    value = (value or "").strip()
    if value.startswith("(") and value.endswith(")"):
        value = value[1:-1].strip()
    for alt in _OR.split(value) if value else []:
        alt = alt.strip()
        if len(alt) >= 2 and alt.startswith('"') and alt.endswith('"'):
            values.append((alt[1:-1], True))
        elif alt:
            values.append((alt.replace('"', ""), False))
    out.append(PropertyFilter(name, tuple(values), bool(neg)))
    return " "


def _take_dates(text: str, today: _dt.date, periods: dict[str, list[Period]], warnings: list[str]) -> str:
    """Take `after:`, `before:` and `on:` with their dates out of `text` (a value is quoted, or the
    longest run of up to four words that reads as a date); returns the rest of the text."""
    out: list[str] = []
    pos = 0
    while m := _DATE_OP.search(text, pos):
        out.append(text[pos : m.start()])
        op, rest_at = m.group(1).lower(), m.end()
        rest = text[rest_at:]
        used, bad = 0, ""
        if rest.startswith('"'):
            close = rest.find('"', 1)
            used = close + 1 if close > 0 else len(rest)
            value = rest[1:close] if close > 0 else rest[1:]
            try:
                periods[op].append(parse_period(value, today))
            except DateError as exc:
                bad = value
                warnings.append(f'{op}:"{value}" not applied: {exc}')
        else:
            # The value starts right after the colon (`on: hike` gives no date).
            spans = [w.end() for w in re.finditer(r"\S+", rest)][:_DATE_WORDS] if rest[:1].strip() else []
            error: DateError | None = None
            for end in reversed(spans):
                try:
                    periods[op].append(parse_period(rest[:end], today))
                except DateError as exc:
                    error = error if end != spans[0] else exc
                    continue
                used = end
                break
            else:
                if spans:
                    used, bad = spans[0], rest[: spans[0]]
                    warnings.append(f"{op}:{bad} not applied: {error}")
                else:
                    warnings.append(f"{op}: not applied: it needs a date, e.g. {op}:2023-05-07")
        out.append(f" {bad} " if bad else " ")
        pos = rest_at + used
    out.append(text[pos:])
    return "".join(out)


def _recent_days(value: str) -> float | None:
    """The half-life `recent:VALUE` asks for, in days (0: off), or None when it does not read."""
    v = value.strip().lower()
    if v in ("on", "yes", "true", ""):
        return RECENT_DEFAULT_DAYS
    if v in ("off", "no", "false", "0"):
        return 0.0
    m = _RECENT.fullmatch(v)
    if not m:
        return None
    days = float(m.group(1)) * _RECENT_UNIT_DAYS[m.group(2)]
    return days if days > 0 else 0.0
