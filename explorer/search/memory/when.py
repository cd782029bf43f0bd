"""Dates a query mentions in words ("on 8 May, 2023", "in June", "the weekend before April 10, 2023"), as day ranges.

A question to an agent's memory often says when something happened: a day, a month, a year, a
season, or a span relative to a date it names. `mentions` reads those spans offline (no LLM, no
locale: English month names, digits); the memory ranking (explorer.search.memory.signals) then prefers the
conversation turns recorded on or shortly after such a span. Relative words with no date to count
from ("last week", "yesterday") are left alone: a vault's turns carry the date they were said, and
"last week" of a question asked today names no span of theirs.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from explorer.text.dates import MONTHS

__all__ = ["Span", "closeness", "mentions", "note_day"]

_FULL = "|".join(name.lower() for name in calendar.month_name if name)
_MONTH = r"(?P<month>" + _FULL + r"|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)\.?"
#: A bare month is only read by its full name ("in Jan" may be a person).
_BARE_MONTH = r"(?P<month>" + _FULL + r")"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_SEASONS = {"spring": (3, 5), "summer": (6, 8), "autumn": (9, 11), "fall": (9, 11), "winter": (12, 2)}
#: Words before a bare month name that make it a month ("in May"), not a verb or a name ("May I").
_MONTH_CUES = frozenset(
    {
        "in",
        "of",
        "during",
        "since",
        "until",
        "till",
        "before",
        "after",
        "by",
        "early",
        "late",
        "mid",
        "end",
        "beginning",
        "start",
        "through",
        "throughout",
        "last",
        "this",
        "next",
    }
)

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("iso", re.compile(r"\b(?P<year>(?:19|20)\d\d)-(?P<month>[01]\d)-(?P<day>[0-3]\d)\b")),
    ("dmy", re.compile(r"\b" + _DAY + r"(?:\s+of)?\s+" + _MONTH + r",?\s+" + _YEAR + r"\b", re.I)),
    ("mdy", re.compile(r"\b" + _MONTH + r"\s+" + _DAY + r"(?:,\s*|\s+)" + _YEAR + r"\b", re.I)),
    ("my", re.compile(r"\b" + _MONTH + r",?\s+(?:of\s+)?" + _YEAR + r"\b", re.I)),
    (
        "season",
        re.compile(r"\b(?P<season>spring|summer|autumn|fall|winter)(?:\s+of)?\s+" + _YEAR + r"\b", re.I),
    ),
    ("dm", re.compile(r"\b" + _DAY + r"(?:\s+of)?\s+" + _MONTH + r"\b", re.I)),
    ("md", re.compile(r"\b" + _MONTH + r"\s+" + _DAY + r"\b(?!\s*(?:,\s*)?(?:19|20)\d\d)", re.I)),
    ("m", re.compile(r"\b(?P<cue>\w+)\s+(?:of\s+)?" + _BARE_MONTH + r"\b", re.I)),
    (
        "y",
        re.compile(r"\b(?:in|of|during|since|until|by|early|late|mid|before|after)\s+" + _YEAR + r"\b", re.I),
    ),
)
#: "the weekend before <date>", "the week after <date>", "a few days before": a span next to a date named after it.
_RELATIVE = re.compile(
    r"\b(?P<what>weekend|week|month|days?)\s+(?P<dir>before|after|prior to|following)\s*$", re.I
)


@dataclass(frozen=True, slots=True)
class Span:
    """A span of days a query names."""

    start: date
    """First day (inclusive)."""
    end: date
    """Last day (inclusive)."""
    text: str
    """The words it was read from."""
    any_year: bool = False
    """The year was not said ("in June"): the span's month and day apply to every year."""


def _month(name: str) -> int:
    return MONTHS.get(name.lower().rstrip("."), 0)


def _month_span(year: int, month: int) -> tuple[date, date]:
    return date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1])


def _day(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def mentions(
    query: str, *, default_year: int = 2000
) -> list[Span]:  # 2000: a leap year, so 29 February reads
    """The spans of days `query` names, in the order they occur (overlapping readings dropped).

    A month or a day without a year is read in `default_year` with `any_year` set (leap day safe).
    A span relative to a date named right after it ("the weekend before 10 April, 2023") becomes
    that span: the week or weekend before (up to 9 days) or after (up to 9), a month (31 days).
    """
    taken: list[tuple[int, int]] = []
    found: list[tuple[int, Span]] = []
    for kind, pattern in _PATTERNS:
        for m in pattern.finditer(query):
            a, b = m.span()
            if kind == "m":
                a = m.start("month")
            if any(a < e and s < b for s, e in taken):
                continue
            span = _read(kind, m, default_year)
            if span is None:
                continue
            span = _relative(query[:a], span)
            taken.append((a, b))
            found.append((a, span))
    return [s for _, s in sorted(found, key=lambda x: x[0])]


def _read(kind: str, m: re.Match[str], default_year: int) -> Span | None:
    g = m.groupdict()
    text = m.group(0).strip()
    year = int(g["year"]) if g.get("year") else None
    month = (int(g["month"]) if kind == "iso" else _month(g["month"])) if g.get("month") else 0
    if kind in ("iso", "dmy", "mdy", "dm", "md"):
        d = _day(year or default_year, month, int(g["day"])) if month else None
        if d is None:
            return None
        return Span(d, d, text, any_year=year is None)
    if kind == "my":
        return Span(*_month_span(year, month), text) if month and year else None
    if kind == "m":
        cue = g["cue"].lower()
        if cue not in _MONTH_CUES or not month:
            return None
        if g["month"][0].islower() and g["month"].lower() in ("may", "march"):
            return None
        return Span(
            *_month_span(default_year, month),
            m.group(0)[m.start("month") - m.start() :].strip(),
            any_year=True,
        )
    if kind == "season":
        first, last = _SEASONS[g["season"].lower()]
        assert year is not None
        if first > last:  # winter: December of the year before through February
            return Span(date(year - 1, first, 1), _month_span(year, last)[1], text)
        return Span(date(year, first, 1), _month_span(year, last)[1], text)
    if kind == "y":
        assert year is not None
        return Span(date(year, 1, 1), date(year, 12, 31), text)
    return None


def _relative(before: str, span: Span) -> Span:
    m = _RELATIVE.search(before.rstrip(" ,")) if span.start == span.end else None
    if m is None:
        return span
    what, direction = m.group("what").lower(), m.group("dir").lower()
    reach = 31 if what == "month" else 9 if what in ("week", "weekend") else 7
    text = f"{m.group(0).strip()} {span.text}"
    if direction in ("before", "prior to"):
        return Span(span.start - timedelta(days=reach), span.start - timedelta(days=1), text, span.any_year)
    return Span(span.end + timedelta(days=1), span.end + timedelta(days=reach), text, span.any_year)


def note_day(value: object) -> date | None:
    """A note's recorded day from a frontmatter value (a date, a datetime, or ISO text), else None."""
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        m = re.match(r"\s*((?:19|20)\d\d)-([01]\d)-([0-3]\d)", value)
        if m:
            return _day(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    return None


def closeness(day: date, spans: list[Span], after_days: float) -> float:
    """How well a note recorded on `day` fits the spans a query names: 1 inside one, else 0-1.

    Something is told on the day it happened or later, so a note recorded after a span still
    fits, less and less over `after_days` days (linear to 0); a note recorded before a span does
    not. With no year said (`any_year`), the span is tried in the note's own year and the year
    before.
    """
    best = 0.0
    for span in spans:
        tries = [(span.start, span.end)]
        if span.any_year:
            tries = []
            for year in (day.year, day.year - 1):
                shift = year - span.start.year
                s = _shift(span.start, shift)
                e = _shift(span.end, shift)
                if s is not None and e is not None:
                    tries.append((s, e))
        for start, end in tries:
            if start <= day <= end:
                return 1.0
            if day > end and after_days > 0:
                best = max(best, 1.0 - (day - end).days / after_days)
    return max(best, 0.0)


def _shift(d: date, years: int) -> date | None:
    try:
        return d.replace(year=d.year + years)
    except ValueError:
        return d.replace(year=d.year + years, day=28)
