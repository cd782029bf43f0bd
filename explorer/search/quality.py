"""Result quality (high/medium/low with factors and a suggestion) and diminishing-returns advisories."""

from __future__ import annotations

import statistics
from typing import Any, Sequence

from explorer.search.schema import Quality, SearchResult

HIGH = 0.75
MEDIUM = 0.45
RELEVANT = 0.5


def assess(results: Sequence[SearchResult], dense: bool) -> Quality:
    """Judge a ranked result list from each entry's relevance (0-1: cosine and word coverage).

    score = 0.6 * top relevance + 0.25 * agreement + 0.15 * support, where agreement is 1 when
    BM25 and embeddings both put the top entry in their top 3 (0.5 when only one retriever ran
    and found it), and support is the mean relevance of the top 3. One strong, agreed answer is
    enough for `high`; a list of weak matches stays `low`, whatever its length.
    """
    searched = [r for r in results if r.source == "search"]
    if not searched:
        return Quality(
            level="low", score=0.0, confidence=1.0,
            factors={"top_relevance": 0.0, "avg_relevance": 0.0, "score_spread": 0.0, "result_count": 0,
                     "relevant_count": 0, "agreement": 0.0, "top_score_above_threshold": False, "dense": dense},
            suggestion="No results found. Try other words, or remove filters.",
        )
    rel = [r.relevance for r in searched]
    top = rel[0] if rel else 0.0
    best = searched[0]
    if dense:
        agreement = 1.0 if (best.bm25_rank or 99) <= 3 and (best.embedding_rank or 99) <= 3 else \
            0.5 if (best.bm25_rank or 99) <= 3 or (best.embedding_rank or 99) <= 3 else 0.0
    else:
        agreement = 0.5 if (best.bm25_rank or 99) <= 3 else 0.0
    support = sum(rel[:3]) / min(3, len(rel))
    score = min(1.0, 0.6 * top + 0.25 * agreement + 0.15 * support)
    spread = statistics.pstdev(rel[:10]) if len(rel) > 1 else 0.0
    relevant = sum(1 for x in rel if x >= RELEVANT)
    level = "high" if score >= HIGH else "medium" if score >= MEDIUM else "low"
    confidence = round((min(len(rel) / 10, 1.0) + max(0.0, 1 - spread * 2)) / 2, 3)
    factors: dict[str, Any] = {
        "top_relevance": round(top, 4),
        "avg_relevance": round(sum(rel) / len(rel), 4),
        "score_spread": round(spread, 4),
        "result_count": len(searched),
        "relevant_count": relevant,
        "agreement": agreement,
        "top_score_above_threshold": top >= HIGH,
        "dense": dense,
    }
    return Quality(level, round(score, 4), confidence, factors, _suggestion(level, top, relevant, dense))


def _suggestion(level: str, top: float, relevant: int, dense: bool) -> str:
    if level == "high":
        return "Strong match: the top results likely answer the query."
    if level == "medium":
        if top < HIGH:
            return "Partly relevant results: try more specific words or a phrase in quotes."
        if relevant < 2:
            return "One good match, little around it: open it, or widen the query."
        return "Decent results: check the top few before searching more."
    if not dense:
        return "Weak lexical matches only: try other words (semantic search is not available)."
    return "Little here matches: try different words, or the vault may not hold this."


def diminishing_returns(history: list[dict[str, Any]], query: str, ids: list[str], top: float) -> str | None:
    """An advisory when searching more is unlikely to help, else None.

    Patterns: the same query again; more than 80 % of results shared with the last search;
    top relevance falling over three searches in a row; many searches in a short time.
    """
    norm = " ".join(query.lower().split())
    if any(" ".join(h["query"].lower().split()) == norm for h in history[-20:]):
        return f'You already searched for "{query}". Try different words, or use what you have.'
    if history and ids:
        last = set(history[-1]["ids"])
        overlap = sum(1 for i in ids if i in last) / max(len(ids), 1)
        if overlap > 0.8:
            return f"Results overlap {round(overlap * 100)}% with the previous search: you may have what there is."
    if len(history) >= 2:
        a, b = history[-2]["top"], history[-1]["top"]
        if a > b > top:
            return "Top relevance is falling search after search: consider stopping or rephrasing."
    recent = [h for h in history if h["time"] > (history[-1]["time"] - 120)] if history else []
    if len(recent) >= 8:
        return "Many searches in a short time: consider reading the best results in context."
    return None
