"""Classic cursor tools (phrase, AND, fuzzy, TF-IDF) shown in the results list as SearchResults."""

from __future__ import annotations

import re
import time
from typing import Any, Callable

from explorer.index.windows import snippet
from explorer.search.schema import ContextShard, Quality, SearchMode, SearchResult, SearchResults, SearchStats

_KEYWORD = re.compile(r'"([^"]+)"|(\S+)')


class ClassicUnavailable(RuntimeError):
    """The classic tools cannot run: the module is missing, or the query has no usable keywords."""


def classic_keywords(mode: str, text: str) -> list[str]:
    """The keywords of a classic query: the whole text for `phrase`, else words and "quoted groups"."""
    if mode == "phrase":
        return [text.replace('"', " ").strip()]
    return [m.group(1) or m.group(2) for m in _KEYWORD.finditer(text)]


def classic_results(index: Any, mode: str, text: str, k: int = 15,
                    cancelled: Callable[[], bool] | None = None, allowed: set[str] | None = None) -> SearchResults:
    """Run classic tool `mode` over the index and present its hits like pipeline results.

    Several hits in one note become that entry's context shards (best first). With `allowed`
    (the notes a query's filters allow), hits in other notes are left out.

    Raises:
        ClassicUnavailable: when `explorer.index.classic` is missing or rejects the query.
    """
    try:
        from explorer.index.classic import ClassicQueryError, run_mode
    except ImportError as exc:
        raise ClassicUnavailable(f"the classic tools are not available in this build ({exc})") from None
    t0 = time.perf_counter()
    keywords = classic_keywords(mode, text)
    try:
        found = run_mode(index, mode, keywords, max_results=max(k * 3, 30) if allowed is None else max(k * 20, 300))
    except ClassicQueryError as exc:
        raise ClassicUnavailable(str(exc)) from None
    entries: dict[str, list[Any]] = {}
    for hit in found.hits:
        if cancelled is not None and cancelled():
            break
        if allowed is not None and hit.path not in allowed:
            continue
        entries.setdefault(hit.path, []).append(hit)
    out: list[SearchResult] = []
    for path, hits in list(entries.items())[:k]:
        note = index.note(path)
        if note is None:
            continue
        shards = []
        for hit in hits[:5]:
            shard = index.shard_at(path, hit.cursor)
            start, end = (shard.start, shard.end) if shard is not None else (hit.snippet_start, hit.snippet_end)
            shards.append(ContextShard(
                node_id=hit.node_id or (shard.node_id if shard is not None else path), path=path, cursor=hit.cursor,
                start=start, end=end, text=note.text[start:end], highlights=hit.highlights, score=hit.score, pass_=1,
            ))
        best = hits[0]
        out.append(SearchResult(
            document_path=path, title=best.title or note.title, source_type=note.source_type,
            node_id=shards[0].node_id, rrf_score=best.score, score=best.score, bm25_rank=None, embedding_rank=None,
            snippet=snippet(best.snippet, best.highlights, best.snippet_start),
            source="classic", pass_=1, reason=f"{found.stage}: {', '.join(best.keywords)}",
            relevance=0.0, context_shards=tuple(shards), explanation=None,
        ))
    ms = (time.perf_counter() - t0) * 1000
    quality = None
    if not out:
        quality = Quality("low", 0.0, 1.0, {"result_count": 0},
                          f"No {mode} match (stages tried: {', '.join(found.stages_tried)}). Try fewer or other words.")
    return SearchResults(
        query=text, search_terms_used=list(found.keywords), results=out,
        stats=SearchStats(final_results=len(out), hits=found.total, stage=found.stage,
                          stages_tried=list(found.stages_tried), index_version=found.index_version),
        quality=quality, timings_ms={mode: ms, "total": ms}, warnings=list(found.warnings),
        mode=SearchMode(classic=mode, stage=found.stage),
    )
