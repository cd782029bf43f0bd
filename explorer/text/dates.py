"""Dates in queries and notes: a date expression as a period of days, and the date a note is about.

A query names a day (`2023-05-07`, `7 May 2023`, `May 7, 2023`), a month (`2023-05`, `May 2023`),
a year (`2023`) or a relative period (`today`, `yesterday`, `this week`, `last week`, `this month`,
`last month`, `this year`, `last year`, `3 days ago`, `2 weeks ago`, `last 10 days`), read
offline against a given today. Weeks begin on Monday. A note's date is its frontmatter `date`,
else `created`, else the `timestamp` of its side data (a conversation turn's metadata.json), else its
frontmatter `updated` / `modified`, else a `YYYY-MM-DD` date in its file name (a daily note), else
its file's modification time.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["MONTHS", "DateError", "Period", "TimeFilters", "note_date", "parse_period", "value_date"]

#: English month names and their short forms -> month number (the one table for every date reader).
MONTHS: dict[str, int] = {
    "january": 1,
    "february": 2,
    "march": 3,
    "april": 4,
    "may": 5,
    "june": 6,
    "july": 7,
    "august": 8,
    "september": 9,
    "october": 10,
    "november": 11,
    "december": 12,
    "jan": 1,
    "feb": 2,
    "mar": 3,
    "apr": 4,
    "jun": 6,
    "jul": 7,
    "aug": 8,
    "sep": 9,
    "sept": 9,
    "oct": 10,
    "nov": 11,
    "dec": 12,
}
_UNITS = {
    "day": "day",
    "days": "day",
    "week": "week",
    "weeks": "week",
    "month": "month",
    "months": "month",
    "year": "year",
    "years": "year",
}
_EXAMPLES = (
    "2023-05-07, 7 May 2023, May 7 2023, 2023-05, May 2023, 2023, today, yesterday, last week, this year"
)

_ISO_DAY = re.compile(r"(\d{4})[-/](\d{1,2})[-/](\d{1,2})")
_ISO_MONTH = re.compile(r"(\d{4})[-/](\d{1,2})")
_YEAR = re.compile(r"\d{4}")
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_MONTH = r"([a-z]+)\.?"
_DAY_MONTH_YEAR = re.compile(rf"{_DAY} (?:of )?{_MONTH},? (\d{{4}})")
_MONTH_DAY_YEAR = re.compile(rf"{_MONTH} {_DAY},? (\d{{4}})")
_MONTH_YEAR = re.compile(rf"{_MONTH},? (\d{{4}})")
_AGO = re.compile(r"(\d{1,4}) (days?|weeks?|months?|years?) ago")
_LAST_N = re.compile(r"(?:last|past) (\d{1,4}) (days?|weeks?|months?|years?)")
# A date at the start of a file name (daily notes: `2023-05-07.md`, `2023-05-07 Sunday.md`).
_NAME_DAY = re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})(?!\d)")
_MIN_YEAR, _MAX_YEAR = 1, 9999


class DateError(ValueError):
    """A date expression that does not name a day, a month, a year or a known relative period."""


@dataclass(frozen=True, slots=True)
class Period:
    """A span of whole days named by a date expression."""

    start: _dt.date
    """Its first day."""
    end: _dt.date
    """The day after its last day."""
    text: str
    """The expression as written."""

    def contains(self, day: _dt.date) -> bool:
        """True when `day` falls in the period."""
        return self.start <= day < self.end

    def to_dict(self) -> dict[str, str]:
        """JSON form: the expression and its first and last day."""
        return {
            "text": self.text,
            "first": self.start.isoformat(),
            "last": (self.end - _dt.timedelta(days=1)).isoformat(),
        }


@dataclass(frozen=True, slots=True)
class TimeFilters:
    """Date filters and a recency preference given beside a query rather than in its text (an agent's
    tool arguments): they hold whatever the query's length, and a quote in the query cannot swallow them."""

    after: tuple[Period, ...] = ()
    """The note's date must fall after each of these periods (as `after:`)."""
    before: tuple[Period, ...] = ()
    """The note's date must fall before each of these periods (as `before:`)."""
    on: tuple[Period, ...] = ()
    """The note's date must fall within each of these periods (as `on:`)."""
    recent: float | None = None
    """Half-life in days of a preference for newer notes (0: off; None: not given), as `recent:`."""

    def operators(self) -> str:
        """The same filters written as query operators (how a search echoes its query)."""
        parts = [
            f'{name}:"{p.text}"'
            for name, periods in (("after", self.after), ("before", self.before), ("on", self.on))
            for p in periods
        ]
        if self.recent is not None:
            parts.append(f"recent:{self.recent:.3f}d")
        return " ".join(parts)


def parse_period(text: str, today: _dt.date) -> Period:
    """The period `text` names, relative words read against `today`.

    Raises:
        DateError: `text` is not a date expression, or names a day that does not exist; the
            message says which and shows the forms that are understood.
    """
    words = " ".join(text.replace(",", ", ").split()).strip().lower().replace(" ,", ",")
    if not words:
        raise DateError(f"no date given (try {_EXAMPLES})")
    try:
        start, end = _period(words, today)
    except (ValueError, OverflowError) as exc:
        if isinstance(exc, DateError):
            raise
        raise DateError(f"{text.strip()!r} is not a real date ({exc})") from None
    return Period(start, end, " ".join(text.split()))


def _period(words: str, today: _dt.date) -> tuple[_dt.date, _dt.date]:
    day = _dt.timedelta(days=1)
    relative = _relative(words, today)
    if relative is not None:
        return relative
    if m := _ISO_DAY.fullmatch(words):
        d = _dt.date(int(m[1]), int(m[2]), int(m[3]))
        return d, d + day
    if m := _ISO_MONTH.fullmatch(words):
        return _month(int(m[1]), int(m[2]))
    if _YEAR.fullmatch(words):
        return _year(int(words))
    if m := _DAY_MONTH_YEAR.fullmatch(words):
        d = _dt.date(int(m[3]), _month_number(m[2]), int(m[1]))
        return d, d + day
    if m := _MONTH_DAY_YEAR.fullmatch(words):
        d = _dt.date(int(m[3]), _month_number(m[1]), int(m[2]))
        return d, d + day
    if m := _MONTH_YEAR.fullmatch(words):
        return _month(int(m[2]), _month_number(m[1]))
    raise DateError(f"{words!r} is not a date (try {_EXAMPLES})")


def _relative(words: str, today: _dt.date) -> tuple[_dt.date, _dt.date] | None:
    day = _dt.timedelta(days=1)
    if words == "today":
        return today, today + day
    if words == "yesterday":
        return today - day, today
    if words == "tomorrow":
        return today + day, today + 2 * day
    for prefix, back in (("this ", 0), ("last ", 1), ("next ", -1)):
        if words.startswith(prefix) and words[len(prefix) :] in ("week", "month", "year"):
            return _unit_period(words[len(prefix) :], today, back)
    if m := _AGO.fullmatch(words):
        n, unit = int(m[1]), _UNITS[m[2]]
        if unit == "day":
            d = today - n * day
            return d, d + day
        return _unit_period(unit, today, n)
    if m := _LAST_N.fullmatch(words):
        n, unit = int(m[1]), _UNITS[m[2]]
        if n < 1:
            raise DateError(f"{words!r} names no time: give 1 or more")
        start = today - (n - 1) * day if unit == "day" else _unit_period(unit, today, n - 1)[0]
        return start, today + day
    return None


def _unit_period(unit: str, today: _dt.date, back: int) -> tuple[_dt.date, _dt.date]:
    """The week, month or year `back` units before the one holding `today` (0: that one)."""
    if unit == "week":
        monday = today - _dt.timedelta(days=today.weekday()) - _dt.timedelta(weeks=back)
        return monday, monday + _dt.timedelta(weeks=1)
    if unit == "month":
        index = today.year * 12 + (today.month - 1) - back
        return _month(index // 12, index % 12 + 1)
    return _year(today.year - back)


def _month(year: int, month: int) -> tuple[_dt.date, _dt.date]:
    if not 1 <= month <= 12:
        raise DateError(f"there is no month {month}")
    start = _dt.date(year, month, 1)
    end = _dt.date(year + 1, 1, 1) if month == 12 else _dt.date(year, month + 1, 1)
    return start, end


def _year(year: int) -> tuple[_dt.date, _dt.date]:
    if not _MIN_YEAR <= year < _MAX_YEAR:
        raise DateError(f"year {year} is out of range")
    return _dt.date(year, 1, 1), _dt.date(year + 1, 1, 1)


def _month_number(name: str) -> int:
    number = MONTHS.get(name)
    if number is None:
        raise DateError(f"{name!r} is not a month name")
    return number


def value_date(value: Any) -> _dt.date | None:
    """The day a frontmatter or metadata value names: a YAML date or datetime, an ISO date or
    date-time string, or a written day (`7 May 2023`); None for anything else."""
    if isinstance(value, _dt.datetime):
        return value.date()
    if isinstance(value, _dt.date):
        return value
    if not isinstance(value, str) or len(value) > 64:
        return None
    text = value.strip()
    if _ISO_DAY.match(text):
        try:
            return _dt.date.fromisoformat(text[:10])
        except ValueError:
            try:
                return _dt.datetime.fromisoformat(text).date()
            except ValueError:
                return None
    try:
        period = parse_period(text, _dt.date(2000, 1, 1))
    except DateError:
        return None
    if (
        period.end - period.start == _dt.timedelta(days=1)
        and text.lower() not in ("today", "yesterday", "tomorrow")
        and not text.lower().endswith("ago")
    ):
        return period.start
    return None


#: Where a note's date is read, in order: (where, key).
DATE_FIELDS = (
    ("frontmatter", "date"),
    ("frontmatter", "created"),
    ("metadata", "timestamp"),
    ("metadata", "date"),
    ("frontmatter", "updated"),
    ("frontmatter", "modified"),
)


def note_date(
    frontmatter: dict[str, Any], metadata: dict[str, Any], path: str, mtime_ns: int | None
) -> tuple[_dt.date, str] | None:
    """The day a note is about and where it was read: the key of `DATE_FIELDS` (`date`, `created`,
    `timestamp`, `updated`, ...), `file name` or `modified` (the file time); None when nothing gives one (no date field and no file time)."""
    for where, key in DATE_FIELDS:
        source = frontmatter if where == "frontmatter" else metadata
        found = value_date(source.get(key)) if isinstance(source, dict) else None
        if found is not None:
            return found, key
    name = path.rsplit("/", 1)[-1]
    if m := _NAME_DAY.search(name):
        try:
            return _dt.date(int(m[1]), int(m[2]), int(m[3])), "file name"
        except ValueError:
            pass
    if mtime_ns is not None and mtime_ns > 0:
        try:
            return _dt.datetime.fromtimestamp(mtime_ns / 1e9).date(), "modified"
        except (OverflowError, OSError, ValueError):
            return None
    return None
