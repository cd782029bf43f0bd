"""Which notes changed between the index versions searches read, found once per version.

The tables the search keeps per note (note owners, the name table, the knowledge shards) used
to be rebuilt from every note at each new index version, so the first search after a one-note
save paid for the whole vault. `NoteChanges` compares each new version's notes with the last
version it saw once (by object identity: an index replaces a note's record when the note
changes) and keeps the changed paths of the last versions, so each table updates only the
notes that changed. A snapshot that logs the notes each version changed (the local index's
`notes_changed`) spares that comparison: only the logged paths are compared (at 50k notes the
pass over every note cost 5-20 ms of each save -> searchable).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from explorer.index.backend import Snapshot

#: Versions whose changed paths are kept; a table further behind is rebuilt whole.
KEEP_VERSIONS = 64


class NoteChanges:
    """Changed note paths between index versions (thread-safe; shared by the tables of one pipeline)."""

    def __init__(self, keep: int = KEEP_VERSIONS) -> None:
        self._lock = threading.Lock()
        self._notes: dict[str, Any] = {}
        self._version: int | None = None
        self._log: deque[tuple[int, frozenset[str]]] = deque(maxlen=keep)
        """(version, paths changed since the version before it), oldest first."""
        self._log_start = 0
        """The log holds every change made after this version."""

    def since(self, snap: Snapshot, version: int | None) -> frozenset[str] | None:
        """Paths whose note was added, replaced or removed after `version` up to the snapshot's version.

        None when that is not known (no `version`, a version older than those kept, or a snapshot
        older than the last one seen): the caller rebuilds its table from the snapshot's notes.
        """
        with self._lock:
            self._advance(snap)
            if version is None or self._version is None or snap.version != self._version:
                return None
            if version == snap.version:
                return frozenset()
            if version > snap.version or version < self._log_start:
                return None
            out: set[str] = set()
            for v, paths in self._log:
                if v > version:
                    out |= paths
            return frozenset(out)

    def _advance(self, snap: Snapshot) -> None:
        """Compare the snapshot's notes with the last version seen, when it is a newer version."""
        if self._version is not None and snap.version <= self._version:
            return
        notes = snap.notes
        if self._version is None:
            self._notes = dict(notes)
            self._version = snap.version
            self._log.clear()
            self._log_start = snap.version
            return
        seen = self._notes
        changed: list[str] = []
        logged = getattr(snap, "notes_changed", None)
        paths = logged(self._version) if logged is not None else None
        if paths is not None:
            for path in sorted(paths):
                note = notes.get(path)
                if note is None:
                    if seen.pop(path, None) is not None:
                        changed.append(path)
                elif seen.get(path) is not note:
                    seen[path] = note
                    changed.append(path)
            self._logged(snap.version, changed)
            return
        for path, note in notes.items():
            if seen.get(path) is not note:
                changed.append(path)
                seen[path] = note
        if len(seen) != len(notes):  # some were removed (the new ones are in both counts)
            gone = [p for p in seen if p not in notes]
            for p in gone:
                del seen[p]
            changed.extend(gone)
        self._logged(snap.version, changed)

    def _logged(self, version: int, changed: list[str]) -> None:
        if len(self._log) == self._log.maxlen:
            self._log_start = self._log[0][0]
        self._log.append((version, frozenset(changed)))
        self._version = version
