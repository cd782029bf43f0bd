"""MCP answers sized for agents: what an agent acts on, under a character budget, the rest on request.

A default `search` answer holds per result its rank, node_id, document_path, title, source_type, date
and date_from (when the note has one) and an excerpt, plus the quality level and `no_good_match`; it stays under
`MAX_ANSWER_CHARS` by leaving out the last results and saying so (`cut`, `next_offset`). The full
SearchResults JSON of a page comes with `detail=True`. `recent` lists an owner's latest turns.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from explorer.vault.model import display_title

if TYPE_CHECKING:
    from explorer.index.backend import IndexBackend, Snapshot
    from explorer.search.schema import SearchResults

#: Most characters a default answer (its JSON text) may take.
MAX_ANSWER_CHARS = 8000
#: Characters of an excerpt by default (a result's snippet is at most 200).
DEFAULT_EXCERPT = 200
#: Most characters an excerpt may ask for.
MAX_EXCERPT = 2000
#: Turn notes by their folder: `.../turns/turn_000106/...`.
_TURN = re.compile(r"(?:^|/)turns/turn_(\d+)/")


def answer_chars(answer: dict[str, Any]) -> int:
    """Characters of `answer` as a client receives it (the JSON text of the tool result)."""
    return len(json.dumps(answer, indent=2, ensure_ascii=False, default=str))


def note_date(note: Any) -> str | None:
    """A note's date as ISO text, when it has one: frontmatter `date`, else `created`, else a turn's
    metadata `timestamp` (the day only for a date, as written for a timestamp)."""
    if note is None:
        return None
    front = note.frontmatter if isinstance(getattr(note, "frontmatter", None), dict) else {}
    meta = note.metadata if isinstance(getattr(note, "metadata", None), dict) else {}
    for value in (front.get("date"), front.get("created"), meta.get("timestamp")):
        if isinstance(value, (datetime, date)):
            return value.isoformat()
        if isinstance(value, str) and value.strip() and len(value) <= 40:
            return value.strip()
    return None


def excerpt(result: Any, chars: int) -> str:
    """About `chars` characters of a result: its snippet when that is long enough, else its best
    passage from a little before the first match; whitespace runs fold to one space."""
    if chars <= 0:
        return ""
    snippet = " ".join(str(result.snippet or "").split())
    shards = getattr(result, "context_shards", ()) or ()
    if len(snippet) >= chars or not shards:
        return _cut(snippet, chars)
    shard = shards[0]
    offset = 0
    if shard.highlights:
        offset = max(0, shard.highlights[0].start - shard.start - chars // 4)
    text = shard.text[offset:]
    passage = " ".join(text.split())
    return _cut(("… " if offset else "") + passage, chars)


def _cut(text: str, chars: int) -> str:
    if len(text) <= chars:
        return text
    head = text[: max(0, chars - 1)]
    space = head.rfind(" ")
    if space > chars // 2:
        head = head[:space]
    return head.rstrip() + "…"


def brief_result(rank: int, result: Any, note: Any, chars: int) -> dict[str, Any]:
    """One result as an agent acts on it."""
    title = result.title
    if (
        result.source_type == "turn_summary"
        and note is not None
        and isinstance(note.frontmatter.get("topic"), str)
    ):
        title = note.frontmatter["topic"]  # a turn's file is `context.md`: its topic says more
    out: dict[str, Any] = {
        "rank": rank,
        "node_id": result.node_id,
        "document_path": result.document_path,
        "title": title,
        "source_type": result.source_type,
    }
    when, source = getattr(result, "date", None), getattr(result, "date_from", None)
    if not when:
        when, source = note_date(note), None
    if when:
        out["date"] = str(when)
        if source:
            out["date_from"] = source  # which field gave it: date, created, timestamp, ..., modified
    if result.source != "search":
        out["included"] = result.reason or result.source
    out["excerpt"] = excerpt(result, chars)
    return out


def fit(answer: dict[str, Any], key: str, budget: int, resume: Callable[[int], str]) -> dict[str, Any]:
    """`answer` with items left out of the end of `answer[key]` until its JSON text fits `budget`;
    when any were left out, `cut` says how many and how to get them (`resume(kept)`)."""
    items = answer[key]
    total = len(items)
    lo, hi = 0, total
    if answer_chars(answer) <= budget:
        return answer
    # The largest prefix that fits, with the `cut` note counted in.
    while lo < hi:
        mid = (lo + hi + 1) // 2
        trial = {**answer, key: items[:mid], "cut": _cut_note(total - mid, budget, resume(mid))}
        if answer_chars(trial) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return {**answer, key: items[:lo], "cut": _cut_note(total - lo, budget, resume(lo))}


def _cut_note(left: int, budget: int, how: str) -> str:
    return f"{left} more left out to keep this answer under {budget} characters: {how}"


def brief_search(
    res: SearchResults,
    index: IndexBackend,
    *,
    offset: int,
    k: int,
    chars: int,
    no_good_match: bool,
    freshness: dict[str, Any],
    budget: int = MAX_ANSWER_CHARS,
    max_results: int = 50,
) -> dict[str, Any]:
    """The default `search` answer: results `offset`..`offset + k` of `res`, briefly, under `budget`."""
    page = res.results[offset : offset + k]
    q = res.quality
    quality: dict[str, Any] = {"level": q.level if q is not None else "low"}
    if q is not None and (q.level != "high" or no_good_match) and q.suggestion:
        quality["suggestion"] = q.suggestion
    answer: dict[str, Any] = {"query": res.query, "quality": quality, "no_good_match": no_good_match}
    if res.advisory:
        answer["advisory"] = res.advisory
    if res.warnings:
        answer["warnings"] = list(res.warnings)[:5]
    answer["offset"] = offset
    answer["results"] = [
        brief_result(offset + i, r, index.note(r.document_path), chars) for i, r in enumerate(page, 1)
    ]
    # More exist when this page is full and the fusion found more notes than it shows (up to the 50 a search gives).
    found = len(res.trace.entries) if res.trace is not None and res.trace.entries else len(res.results)
    more = len(res.results) >= offset + k and found > offset + k and offset + k < max_results
    answer["next_offset"] = offset + k if more else None
    answer["index"] = {
        key: freshness[key] for key in ("version", "seconds_since_update", "watcher") if key in freshness
    }

    def resume(kept: int) -> str:
        return f"call again with offset={offset + kept}, or a smaller excerpt_chars (now {chars})"

    out = fit(answer, "results", budget, resume)
    if "cut" in out:
        out["next_offset"] = offset + len(out["results"])
    return out


def recent_turns(index: IndexBackend, user: str | None, n: int, chars: int) -> list[dict[str, Any]]:
    """See `_recent_turns` (read from one snapshot of `index`)."""
    with index.snapshot() as snap:
        return _recent_turns(snap, user, n, chars)


def _recent_turns(index: Snapshot, user: str | None, n: int, chars: int) -> list[dict[str, Any]]:
    """The latest `n` conversation turns of `user` (any owner when None), newest first: by date,
    then turn number."""
    rows: list[tuple[str, int, str]] = []
    prefix = f"Users/{user}/" if user else ""
    for path, note in index.notes.items():
        if note.source_type != "turn_summary" or not path.startswith(prefix):
            continue
        m = _TURN.search(path)
        rows.append((note_date(note) or "", int(m.group(1)) if m else -1, path))
    rows.sort(reverse=True)
    out = []
    for when, number, path in rows[:n]:
        found = index.note(path)
        if found is None:
            continue
        note = found
        ids = index.shard_ids(path)
        body = " ".join(note.text[note.body_start :].split())
        item: dict[str, Any] = {
            "node_id": ids[0] if ids else path,
            "path": path,
            "title": display_title(note),
        }
        if number >= 0:
            item["turn"] = number
        if when:
            item["date"] = when
        owner = path.split("/")[1] if path.startswith("Users/") and path.count("/") > 1 else None
        if owner:
            item["user"] = owner
        item["excerpt"] = _cut(body, chars)
        out.append(item)
    return out
