"""Time in search: each note's date (kept per index version), the after:/before:/on: test, and recency.

A note's date is read as `explorer.text.dates.note_date` says (frontmatter `date` / `created`, a
turn's timestamp, a date in the file name, else the file's modification time). Recency is a
preference, not a filter: with a half-life of `h` days, a note `a` days older than today keeps

    factor = 1 - RECENCY_MAX_LOSS * (1 - 0.5 ** (a / h))

of its fused score (1 for notes dated today or later, never below 1 - RECENCY_MAX_LOSS), so a
much better match stays above a newer weaker one. Off unless the query says `recent:` or the
setting `search.recency_half_life_days` is above 0.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from explorer.search.query import ParsedQuery
from explorer.text.dates import note_date

#: The most a note's score can lose to its age under a recency preference (a design choice:
#: gentle enough that relevance leads; no benchmark was tuned on it).
RECENCY_MAX_LOSS = 0.5


class NoteDates:
    """Each note's (date, where it was read), computed on first use and kept for one index version."""

    def __init__(self, index: Any) -> None:
        self.index = index
        self._version: Any = None
        self._dates: dict[str, tuple[_dt.date, str] | None] = {}

    def get(self, path: str) -> tuple[_dt.date, str] | None:
        """The date of the note at `path` and its source, or None (unknown note, or no date at all)."""
        if self._version != self.index.version:
            self._version, self._dates = self.index.version, {}
        if path in self._dates:
            return self._dates[path]
        note = self.index.notes.get(path)
        found = None
        if note is not None:
            state = self.index.file_state(path)
            front = note.frontmatter if isinstance(note.frontmatter, dict) else {}
            meta = note.metadata if isinstance(note.metadata, dict) else {}
            found = note_date(front, meta, path, state.mtime_ns if state is not None else None)
        self._dates[path] = found
        return found

    def iso(self, path: str) -> tuple[str | None, str | None]:
        """(`YYYY-MM-DD`, source) of the note's date, (None, None) when it has none."""
        found = self.get(path)
        return (found[0].isoformat(), found[1]) if found is not None else (None, None)


def in_time(day: _dt.date | None, parsed: ParsedQuery) -> bool:
    """True when a note dated `day` passes the query's after:, before: and on: (an undated note passes none)."""
    if not (parsed.after or parsed.before or parsed.on):
        return True
    if day is None:
        return False
    return (all(day >= p.end for p in parsed.after) and all(day < p.start for p in parsed.before)
            and all(p.contains(day) for p in parsed.on))


def recency_factor(day: _dt.date | None, today: _dt.date, half_life_days: float) -> float:
    """The share of its score a note dated `day` keeps under a recency preference (module docstring)."""
    if half_life_days <= 0 or day is None:
        return 1.0
    age = (today - day).days
    if age <= 0:
        return 1.0
    return 1.0 - RECENCY_MAX_LOSS * (1.0 - 0.5 ** (age / half_life_days))
