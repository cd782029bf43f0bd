"""Classic cursor tools (phrase, AND, fuzzy, TF-IDF) under the search box's filters, for the app, `explorer find` and MCP `find`."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from explorer.config import Settings
from explorer.index.backend import DEFAULTS, MAX_RESULTS, ClassicQueryError, IndexBackend, Snapshot
from explorer.search.core.query import parse_query
from explorer.search.core.retrieve import Retriever
from explorer.search.schema import ContextShard, Quality, SearchMode, SearchResult, SearchResults, SearchStats
from explorer.vault.model import Shard
from explorer.vault.shard import shard_at_cursor
from explorer.vault.windows import snippet

_KEYWORD = re.compile(r'"([^"]+)"|(\S+)')


class ClassicUnavailable(RuntimeError):
    """The classic tools cannot run this query: it has no usable keywords or a parameter is out of range."""


def split_filters(keywords: Sequence[str]) -> tuple[list[str], str]:
    """Keywords apart from filters: `["cage", "tag:pets", "path:Pets"]` -> (["cage"], "tag:pets path:Pets").

    An item is a filter when the search box would read it as nothing but filters (`tag:`, `path:`,
    `file:`, `section:`, `#tag`, `-word`); everything else is a keyword, as given.
    """
    words: list[str] = []
    filters: list[str] = []
    for item in keywords:
        if not item.strip():
            continue
        parsed = parse_query(item)
        if parsed.has_filters and not parsed.text and not parsed.references:
            filters.append(item.strip())
        else:
            words.append(item)
    return words, " ".join(filters)


def allowed_shards(index: IndexBackend, settings: Settings, filters: str) -> set[str] | None:
    """node_ids of the shards the filters in `filters` allow, as the search pipeline reads them (None: no filter)."""
    if not filters.strip():
        return None
    with index.snapshot() as snap:
        return Retriever(index, settings, {}).allowed(snap, parse_query(filters))


def allowed_paths(index: IndexBackend, settings: Settings, filters: str) -> set[str] | None:
    """The notes the filters in `filters` allow (None: no filter), read from one snapshot."""
    if not filters.strip():
        return None
    with index.snapshot() as snap:
        allowed = Retriever(index, settings, {}).allowed(snap, parse_query(filters))
        if allowed is None:
            return None
        return {snap.shards[n].path for n in allowed if n in snap.shards}


def shard_at(snap: Snapshot, path: str, cursor: int) -> Shard | None:
    """The shard of note `path` that holds `cursor` (else the nearest one before it, else its first)."""
    return shard_at_cursor((snap.shards.get(n) for n in snap.shard_ids(path)), cursor)


def find(
    index: IndexBackend,
    settings: Settings,
    mode: str,
    keywords: Sequence[str],
    max_results: int | None = None,
    context_chars: int | None = None,
    window: int | None = None,
) -> Any:
    """One classic tool's hits (a ClassicResult) for keywords that may hold filters (`tag:pets`).

    The tool runs on the keywords alone; with filters, it looks deeper and keeps the hits in the
    notes they allow, so `explorer find` and MCP `find` honour the filters the app does.

    Raises:
        ClassicQueryError: bad input (no keyword, an unknown mode, ...).
    """
    words, filters = split_filters(keywords)
    if not filters.strip():
        return index.classic_search(mode, list(keywords), max_results, context_chars, window)
    with index.snapshot() as snap:
        allowed = Retriever(index, settings, {}).allowed(snap, parse_query(filters))
        if allowed is None:
            return index.classic_search(mode, words, max_results, context_chars, window)
        if not words:
            raise ClassicQueryError("give at least one keyword besides the filters, e.g. cage tag:pets")
        wanted = max_results or DEFAULTS.get(mode, (15, 0))[0]
        result = index.classic_search(
            mode, words, min(max(wanted * 20, 300), MAX_RESULTS), context_chars, window
        )
        kept = []
        for hit in result.hits:
            shard = shard_at(snap, hit.path, hit.cursor)  # the passage the hit is in: section: filters count
            if shard is not None and shard.node_id in allowed:
                kept.append(hit)
    note = f"filters {filters} kept {len(kept)} of {len(result.hits)} hits"
    return replace(result, hits=tuple(kept[:wanted]), total=len(kept), warnings=(*result.warnings, note))


def classic_keywords(mode: str, text: str) -> list[str]:
    """The keywords of a classic query: the whole text for `phrase`, else words and "quoted groups"."""
    if mode == "phrase":
        return [text.replace('"', " ").strip()]
    return [m.group(1) or m.group(2) for m in _KEYWORD.finditer(text)]


def classic_results(
    index: IndexBackend,
    mode: str,
    text: str,
    k: int = 15,
    cancelled: Callable[[], bool] | None = None,
    allowed: set[str] | None = None,
) -> SearchResults:
    """Run classic tool `mode` over the index and present its hits like pipeline results.

    Several hits in one note become that entry's context shards (best first). With `allowed`
    (node_ids of the passages a query's filters allow: `allowed_shards`), hits in other passages
    are left out, as `find` leaves them out.

    Raises:
        ClassicUnavailable: when the tool rejects the query (no usable keyword, ...).
    """
    t0 = time.perf_counter()
    keywords = classic_keywords(mode, text)
    try:
        found = index.classic_search(
            mode, keywords, max_results=max(k * 3, 30) if allowed is None else max(k * 20, 300)
        )
    except ClassicQueryError as exc:
        raise ClassicUnavailable(str(exc)) from None
    with index.snapshot() as snap:
        out = _hits_as_results(snap, found, k, cancelled, allowed)
    ms = (time.perf_counter() - t0) * 1000
    quality = None
    if not out:
        quality = Quality(
            "low",
            0.0,
            1.0,
            {"result_count": 0},
            f"No {mode} match (stages tried: {', '.join(found.stages_tried)}). Try fewer or other words.",
        )
    return SearchResults(
        query=text,
        search_terms_used=list(found.keywords),
        results=out,
        stats=SearchStats(
            final_results=len(out),
            hits=found.total,
            stage=found.stage,
            stages_tried=list(found.stages_tried),
            index_version=found.index_version,
        ),
        quality=quality,
        timings_ms={mode: ms, "total": ms},
        warnings=list(found.warnings),
        mode=SearchMode(classic=mode, stage=found.stage),
    )


def _hits_as_results(
    snap: Snapshot,
    found: Any,
    k: int,
    cancelled: Callable[[], bool] | None,
    allowed: set[str] | None,
) -> list[SearchResult]:
    """A classic tool's hits as result entries, one per note (its hits as context shards), read from `snap`."""
    entries: dict[str, list[Any]] = {}
    for hit in found.hits:
        if cancelled is not None and cancelled():
            break
        if allowed is not None:
            shard = shard_at(snap, hit.path, hit.cursor)
            if shard is None or shard.node_id not in allowed:
                continue
        entries.setdefault(hit.path, []).append(hit)
    out: list[SearchResult] = []
    page = list(entries.items())[:k]
    snap.prefetch(path for path, _hits in page)
    for path, hits in page:
        note = snap.notes.get(path)
        if note is None:
            continue
        shards = []
        for hit in hits[:5]:
            shard = shard_at(snap, path, hit.cursor)
            start, end = (
                (shard.start, shard.end) if shard is not None else (hit.snippet_start, hit.snippet_end)
            )
            shards.append(
                ContextShard(
                    node_id=hit.node_id or (shard.node_id if shard is not None else path),
                    path=path,
                    cursor=hit.cursor,
                    start=start,
                    end=end,
                    text=note.text[start:end],
                    highlights=hit.highlights,
                    score=hit.score,
                    pass_=1,
                )
            )
        best = hits[0]
        out.append(
            SearchResult(
                document_path=path,
                title=best.title or note.title,
                source_type=note.source_type,
                node_id=shards[0].node_id,
                rrf_score=best.score,
                score=best.score,
                bm25_rank=None,
                embedding_rank=None,
                snippet=snippet(best.snippet, best.highlights, best.snippet_start),
                source="classic",
                pass_=1,
                reason=f"{found.stage}: {', '.join(best.keywords)}",
                relevance=0.0,
                context_shards=tuple(shards),
                explanation=None,
            )
        )
    return out
