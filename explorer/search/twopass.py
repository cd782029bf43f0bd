"""The analysis between the two passes: SUFFICIENT or REFINE, offline by a deterministic analyser."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from explorer.index.tokenize import is_stopword, tokenize, tokenize_spans
from explorer.search.schema import SearchResults

if TYPE_CHECKING:
    from explorer.index.vault_index import VaultIndex
    from explorer.search.pipeline import Analysis

#: Pseudo-relevance feedback: terms drawn from this many top results.
FEEDBACK_DOCS = 3
#: Terms added to the refined query.
FEEDBACK_TERMS = 4


def heuristic_analysis(query: str, results: SearchResults, index: "VaultIndex") -> "Analysis":
    """Decide from the quality of pass 1 and its score distribution; refine by pseudo-relevance feedback.

    SUFFICIENT when quality is high, or when the results are empty (nothing to learn from).
    Otherwise REFINE with the query plus the words that are most frequent in the top results'
    best shards relative to their rarity in the vault (tf * idf), leaving out the query's words.
    """
    from explorer.search.pipeline import Analysis

    searched = [r for r in results.results if r.source == "search"]
    quality = None
    from explorer.search.quality import assess

    quality = assess(searched, results.mode.get("dense", True) if results.mode else True)
    if not searched:
        return Analysis("SUFFICIENT", reason="no results to refine from")
    if quality.level == "high":
        return Analysis("SUFFICIENT", reason=f"quality high ({quality.score:.2f})")
    q_tokens = set(tokenize(query))
    idf = index.bm25.idf()
    counts: Counter[str] = Counter()
    surface: dict[str, str] = {}
    for r in searched[:FEEDBACK_DOCS]:
        for shard in r.context_shards[:1]:
            for tok, s, e in tokenize_spans(shard.text):
                word = shard.text[s:e]
                if tok in q_tokens or is_stopword(word) or len(tok) < 3 or tok.isdigit():
                    continue
                counts[tok] += 1
                surface.setdefault(tok, word.lower())
    scored = sorted(((c * idf.get(t, 0.0), t) for t, c in counts.items() if counts[t] >= 2), reverse=True)
    extra = [surface[t] for _, t in scored[:FEEDBACK_TERMS]]
    if not extra:
        return Analysis("SUFFICIENT", reason=f"quality {quality.level}, but no feedback terms in the top results")
    return Analysis(
        "REFINE",
        refined_query=f"{query} {' '.join(extra)}",
        reason=f"quality {quality.level} ({quality.score:.2f}); added terms from the top results",
    )
