"""The always-include stage: preferences, the most recent turn (N-1) and notes the query names, appended to the results."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from explorer.index.backend import Snapshot
from explorer.search.core.query import ParsedQuery
from explorer.search.core.terms import SearchTerms
from explorer.search.fusion import Entry
from explorer.search.schema import SearchResult

_TURN = re.compile(r"turn_(\d+)")


def always_include(
    results: list[SearchResult],
    parsed: ParsedQuery,
    terms: SearchTerms,
    index: Snapshot,
    result_for: Callable[[Entry], SearchResult],
) -> None:
    """Append to `results` the notes the rules name that are not in it yet, each with its reason.

    Rules: the user's preferences (`terms.include_preferences`), the most recent turn
    (`terms.include_n_minus_1`), notes the query links as `[[name]]`, and turns it names as `turn_NNN`.
    """
    have = {r.document_path for r in results}
    add: list[tuple[str, str]] = []
    notes = index.notes
    if terms.include_preferences:
        prefs = sorted(p for p, n in notes.items() if n.source_type == "preference")
        add.extend((p, "preferences") for p in prefs)
    if terms.include_n_minus_1:
        latest = latest_turn(notes)
        if latest:
            add.append((latest, "most recent turn (N-1)"))
    for ref in parsed.references:
        target = index.links().resolve(ref)
        if target:
            add.append((target, f"referenced as [[{ref}]]"))
    for m in _TURN.finditer(parsed.raw):
        num = int(m.group(1))
        for p, n in notes.items():
            tm = _TURN.search(p)
            if n.source_type == "turn_summary" and tm and int(tm.group(1)) == num:
                add.append((p, f"referenced turn {num}"))
    for path, why in add:
        if path in have or path not in notes:
            continue
        have.add(path)
        results.append(result_for(Entry(path, [], pass_=1, source="always_include", reason=why)))


def latest_turn(notes: Mapping[str, Any]) -> str | None:
    """Path of the most recent turn summary (highest turn number)."""
    best: tuple[int, str] | None = None
    for path, note in notes.items():
        if note.source_type != "turn_summary":
            continue
        m = _TURN.search(path)
        num = int(m.group(1)) if m else -1
        if best is None or (num, path) > best:
            best = (num, path)
    return best[1] if best else None
