"""Filters on a note as a whole: its date (after:/before:/on:, and the recency preference) and its
frontmatter properties ([property:value]), read once per index version.

A note's date is read as `explorer.text.dates.note_date` says (frontmatter `date` / `created`, a
turn's timestamp, `updated`, a date in the file name, else the file's modification time). Recency
is a preference, not a filter: with a half-life of `h` days, a note `a` days older than today keeps

    factor = 1 - weight * (1 - 0.5 ** (a / h))

of its score (`weight` = `experimental.recency_weight`; 1 for notes dated today or later, never below
1 - weight), so a much better match stays above a newer weaker one. Off unless the query says
`recent:` or the setting `search.recency_half_life_days` is above 0.
"""

from __future__ import annotations

import datetime as _dt
import threading

from explorer.index.backend import Snapshot
from explorer.search.core.query import ParsedQuery, property_values
from explorer.text.dates import note_date


class _Table:
    """The dates and properties of the notes of one index version, filled as they are asked for."""

    __slots__ = ("dates", "ordinals", "properties", "version")

    def __init__(self, version: int) -> None:
        self.version = version
        self.dates: dict[str, tuple[_dt.date, str] | None] = {}
        self.ordinals: dict[str, int] | None = None
        self.properties: dict[str, dict[str, tuple[str, ...]]] | None = None


class NoteDates:
    """Each note's (date, where it was read) and its folded property values, read from a search's snapshot.

    Every method reads the snapshot it is given and nothing else, so a change batch that lands
    during a search does not reach its filters or its dates. What was read is kept for the newest
    version asked for (searches in several threads share it); a search on an older snapshot
    reads without keeping.
    """

    def __init__(self) -> None:
        self._table = _Table(-1)
        self._lock = threading.Lock()

    def _at(self, snap: Snapshot) -> _Table:
        table = self._table
        if table.version == snap.version:
            return table
        with self._lock:
            if self._table.version == snap.version:
                return self._table
            table = _Table(snap.version)
            if snap.version > self._table.version:
                self._table = table
            return table

    def get(self, snap: Snapshot, path: str) -> tuple[_dt.date, str] | None:
        """The date of the note at `path` and its source, or None (unknown note, or no date at all)."""
        table = self._at(snap)
        if path in table.dates:
            return table.dates[path]
        note = snap.notes.get(path)
        found = None
        modified = snap.modified(path)
        if note is not None:
            front = note.frontmatter if isinstance(note.frontmatter, dict) else {}
            meta = note.metadata if isinstance(note.metadata, dict) else {}
            found = note_date(front, meta, path, modified)
        if modified is not None:
            # Kept for notes with a recorded file only: another vault's note (a team search) may
            # change without this index's version, so it is read each time.
            table.dates[path] = found
        return found

    def iso(self, snap: Snapshot, path: str) -> tuple[str | None, str | None]:
        """(`YYYY-MM-DD`, source) of the note's date, (None, None) when it has none."""
        found = self.get(snap, path)
        return (found[0].isoformat(), found[1]) if found is not None else (None, None)

    def ordinals(self, snap: Snapshot) -> dict[str, int]:
        """Every dated note's date as a day number (`date.toordinal`), path -> day."""
        table = self._at(snap)
        if table.ordinals is None:
            out = {}
            for path in list(snap.notes):
                found = self.get(snap, path)
                if found is not None:
                    out[path] = found[0].toordinal()
            table.ordinals = out
        return table.ordinals

    def properties(self, snap: Snapshot) -> dict[str, dict[str, tuple[str, ...]]]:
        """Folded property name -> {path: the note's folded values of it} (query.property_values)."""
        table = self._at(snap)
        if table.properties is None:
            found: dict[str, dict[str, tuple[str, ...]]] = {}
            for path, note in list(snap.notes.items()):
                front = note.frontmatter
                if not isinstance(front, dict):
                    continue
                for key, value in front.items():
                    if isinstance(key, str):
                        values = found.setdefault(key.strip().casefold(), {})
                        values[path] = values.get(path, ()) + property_values(value)
            table.properties = found
        return table.properties

    def passing(self, snap: Snapshot, parsed: ParsedQuery) -> set[str] | None:
        """Paths of the notes that pass the query's property and date filters (None: it has none)."""
        if not parsed.has_note_filters:
            return None
        out: set[str] | None = None
        bounds = day_bounds(parsed)
        if bounds is not None:
            lo, hi = bounds
            out = {p for p, d in self.ordinals(snap).items() if lo <= d < hi}
        table = self.properties(snap)
        for f in parsed.properties:
            having = table.get(f.name.strip().casefold(), {})
            if f.negated:
                hit = {p for p, values in having.items() if f.matches_values(values)}
                out = (set(snap.notes) if out is None else out) - hit
            else:
                hit = {p for p, values in having.items() if f.matches_values(values)}
                out = hit if out is None else out & hit
        return out if out is not None else set(snap.notes)


def day_bounds(parsed: ParsedQuery) -> tuple[int, int] | None:
    """The day numbers [lo, hi) a note's date must fall in under after:, before: and on: (None: no date filter)."""
    if not (parsed.after or parsed.before or parsed.on):
        return None
    lo, hi = _dt.date.min.toordinal(), _dt.date.max.toordinal() + 1
    for p in parsed.after:
        lo = max(lo, p.end.toordinal())
    for p in parsed.before:
        hi = min(hi, p.start.toordinal())
    for p in parsed.on:
        lo, hi = max(lo, p.start.toordinal()), min(hi, p.end.toordinal())
    return lo, hi


def recency_factor(day: _dt.date | None, today: _dt.date, half_life_days: float, weight: float) -> float:
    """The share of its score a note dated `day` keeps under a recency preference (module docstring)."""
    if half_life_days <= 0 or day is None:
        return 1.0
    age = (today - day).days
    if age <= 0:
        return 1.0
    return 1.0 - weight * (1.0 - 0.5 ** (age / half_life_days))
