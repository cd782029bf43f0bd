"""Two-pass search: the deterministic analysis between the passes, the repeat check, the merge of pass 2 into pass 1."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from explorer.search.core.terms import call_with_budget
from explorer.search.quality import RELEVANT, SUFFICIENT, assess, query_key, token_idf
from explorer.search.schema import SearchResult, SearchResults
from explorer.text.tokenize import is_stopword, tokenize_spans

if TYPE_CHECKING:
    from explorer.index.backend import Snapshot

#: Pass 1 keeps this many entries (ke) for the analysis; pass 2's entries merge into that page.
PASS1_ENTRIES = 10
#: Pass 2: entries (ke) and context shards per entry (kc) of the refined query.
PASS2_ENTRIES = 5
PASS2_SHARDS = 2

#: Pseudo-relevance feedback: terms are drawn from at most this many relevant top results.
FEEDBACK_DOCS = 3
#: Only results among this many first ones can give feedback.
FEEDBACK_WINDOW = 5
#: Terms added to the refined query.
FEEDBACK_TERMS = 3
#: A feedback term must occur at least this often in the feedback passages.
FEEDBACK_MIN_TF = 2
#: Words found in more shards than an IDF of this allows are too common to steer a search.
FEEDBACK_MIN_IDF = 1.0


@dataclass(frozen=True, slots=True)
class Analysis:
    """The outcome of the analysis between the passes."""

    decision: str
    """`SUFFICIENT` or `REFINE`."""
    refined_query: str = ""
    """The query of pass 2 (REFINE only)."""
    reason: str = ""
    """Why, in a sentence."""
    analyser: str = "heuristic"
    """`heuristic` or `llm` (or `llm->heuristic` after a fallback)."""
    tokens_used: int = 0
    """LLM tokens spent."""


def analyse(
    analyser: Callable[..., Analysis] | None,
    mode: str,
    query: str,
    results: SearchResults,
    index: Snapshot,
    budget: object = None,
) -> Analysis:
    """The analysis stage: `analyser` (an LLM) unless `mode` is `heuristic`; the heuristic otherwise or on failure."""
    if analyser is not None and mode != "heuristic":
        try:
            return call_with_budget(analyser, budget, query, results, snapshot=index)
        except Exception as exc:  # noqa: BLE001 - any analyser failure falls back to the heuristic
            fallback = heuristic_analysis(query, results, index)
            name = getattr(analyser, "name", "analyser")
            return replace(
                fallback, analyser=f"{name}->heuristic", reason=f"analyser failed ({exc}); {fallback.reason}"
            )
    return heuristic_analysis(query, results, index)


def heuristic_analysis(query: str, results: SearchResults, index: Snapshot) -> Analysis:
    """Decide from pass 1's quality and score distribution; refine by pseudo-relevance feedback.

    Deterministic: the same index and results give the same analysis.
      - no results: SUFFICIENT (nothing to learn from);
      - quality score >= SUFFICIENT (0.75, the bar the level "high" had): SUFFICIENT;
      - no relevant entry (relevance >= 0.5) among the first five: SUFFICIENT, since feedback
        from unrelated notes would only drift (the vault may not hold the answer);
      - otherwise REFINE with the query plus up to three feedback terms: words of the relevant
        entries' passages, not in the query, seen at least twice, scored by
        (entries containing it) * (1 + ln tf) * idf, ties broken alphabetically;
        SUFFICIENT when no word qualifies.
    The reason names the quality level and score, the relevant count, top relevance and gap.
    """
    searched = [r for r in results.results if r.source == "search"]
    if not searched:
        return Analysis("SUFFICIENT", reason="no results: nothing to refine from")
    dense = results.stats.dense_available
    q = assess(searched, dense)
    f = q.factors
    shape = (
        f"quality {q.level} ({q.score:.2f}): {f['relevant_count']} of {min(len(searched), 10)} top results "
        f"relevant, top relevance {f['top_relevance']:.2f}, gap {f['score_gap']:.2f}"
    )
    if q.score >= SUFFICIENT:
        return Analysis("SUFFICIENT", reason=shape)
    feedback = [r for r in searched[:FEEDBACK_WINDOW] if r.relevance >= RELEVANT][:FEEDBACK_DOCS]
    if not feedback:
        return Analysis("SUFFICIENT", reason=f"{shape}; no relevant result to draw terms from")
    extra = feedback_terms(query, feedback, index)
    if not extra:
        return Analysis("SUFFICIENT", reason=f"{shape}; the relevant results offer no distinctive terms")
    return Analysis(
        "REFINE",
        refined_query=f"{query.strip()} {' '.join(extra)}",
        reason=f"{shape}; added {', '.join(extra)} from {len(feedback)} relevant result(s)",
    )


def feedback_terms(
    query: str, feedback: Sequence[SearchResult], index: Snapshot, n: int = FEEDBACK_TERMS
) -> list[str]:
    """Up to `n` words (surface form, lower case) that characterise the feedback entries' passages."""
    q_tokens = {t for t, _, _ in tokenize_spans(query)}
    n_docs = index.lexical.n_docs()
    tf: Counter[str] = Counter()
    docs: Counter[str] = Counter()
    forms: dict[str, Counter[str]] = {}
    for r in feedback:
        seen: set[str] = set()
        texts = dict.fromkeys(c.text for c in r.context_shards)
        for text in texts:
            for tok, s, e in tokenize_spans(text):
                word = text[s:e]
                if tok in q_tokens or len(tok) < 3 or not word.isalpha() or is_stopword(word):
                    continue
                tf[tok] += 1
                forms.setdefault(tok, Counter())[word.lower()] += 1
                seen.add(tok)
        docs.update(seen)
    scored: list[tuple[float, str]] = []
    for tok, count in tf.items():
        if count < FEEDBACK_MIN_TF:
            continue
        idf = token_idf(n_docs, index.lexical.doc_freq(tok))
        if idf < FEEDBACK_MIN_IDF:
            continue
        scored.append((docs[tok] * (1.0 + math.log(count)) * idf, tok))
    scored.sort(key=lambda x: (-x[0], x[1]))
    out: list[str] = []
    for _score, tok in scored[:n]:
        counts = forms[tok]
        out.append(min(counts, key=lambda w: (-counts[w], w)))
    return out


def repeats_query(refined: str, original: str) -> bool:
    """True when a refined query has the same content words as the original (a pass 2 would repeat pass 1)."""
    return query_key(refined) == query_key(original)


def merge_passes(
    first: list[SearchResult], second: list[SearchResult], scale: float
) -> tuple[list[SearchResult], int]:
    """Merge pass-2 results into pass 1's; returns (merged list, entries pass 2 added).

    Entries stay unique by path: an entry both passes found keeps its pass-1 record and context
    (first) and gains the pass-2 passages it did not have. New entries keep their pass-2
    passages that repeat no passage already present (an entry left with none is dropped), and
    their `score` is the fused score times `scale` (pass 1's top fused score over pass 2's), so
    both passes sort on one scale; `rrf_score` and the explanation stay as fused. The list is
    sorted by score, pass 1 first on ties, otherwise in the order given.
    """
    merged = list(first)
    where = {r.document_path: i for i, r in enumerate(merged)}
    shown = {_norm(c.text) for r in merged for c in r.context_shards}
    added = 0
    for r in second:
        i = where.get(r.document_path)
        fresh = tuple(c for c in r.context_shards if _norm(c.text) not in shown)
        if i is not None:
            if fresh:
                old = merged[i]
                merged[i] = replace(old, context_shards=old.context_shards + fresh)
                shown.update(_norm(c.text) for c in fresh)
            continue
        if not fresh:
            continue
        shown.update(_norm(c.text) for c in fresh)
        where[r.document_path] = len(merged)
        merged.append(replace(r, score=r.rrf_score * scale, context_shards=fresh))
        added += 1
    merged.sort(key=lambda r: (-r.score, r.pass_))
    return merged, added


def _norm(text: str) -> str:
    return " ".join(text.split())
