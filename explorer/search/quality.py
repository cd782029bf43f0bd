"""Result quality (high/medium/low with factors and a suggestion) and diminishing-returns advisories."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import Any

from explorer.search.schema import Quality, SearchResult
from explorer.vault.windows import query_words

#: Level score (the quality score plus LEAD_WEIGHT times the first result's lead) at or above which
#: results are `high` (notes vaults; BENCHMARKS.md#levels-and-abstention).
HIGH = 0.85
#: Level score at or above which results are `medium` (below: `low`, unless the query nearly spells the
#: first result's name: NEAR_NAME). Chosen with NEAR_NAME on six real vaults by other authors, with
#: vectors (benchmarks.vaults_loo, BENCHMARKS.md#real-vaults-left-out-by-vault): a low first result is
#: right 14 times in 47 there, and as often with each vault scored at the values chosen on the other
#: five (without NEAR_NAME the bar was 0.42: right 29 %, 35 % on the vaults left out).
MEDIUM = 0.50
#: Notes vaults: a first result whose name the query spells this nearly (explorer.search.core.retrievers.
#: names.name_likeness: `GDScript For Lpoo` for `GDScript For Loop`, about 0.94) is at least `medium`. A
#: misspelt name that typo correction did not catch finds the note by its other words, with too little
#: relevance to read: on six real vaults the first result of such a low query was right 5 times in 5,
#: and 404 times in 405 at any level. Chosen leaving one vault out (benchmarks.vaults_loo).
NEAR_NAME = 0.85
#: Notes vaults: weight of the first result's lead (its relevance less the best of the next TOP_N - 1)
#: in the level score. A first result that a later one outdoes in relevance is less likely right; one
#: well clear of the rest more likely (chosen on benchmarks.levels, BENCHMARKS.md#levels-and-abstention).
LEAD_WEIGHT = 0.2
#: The same two levels in a vault of conversation turns, whose score runs lower (a question naming
#: someone is capped by the evidence about them): chosen leaving one LoCoMo conversation out.
TURN_HIGH = 0.60
TURN_MEDIUM = 0.08
#: Score at or above which pass 1 is enough (two-pass analysis, knowledge-first early return): the
#: ranking's own bar, measured with the ranking (BENCHMARKS.md#levels-and-abstention), apart from what the levels say.
SUFFICIENT = 0.75
#: An entry with at least this relevance counts as relevant.
RELEVANT = 0.5
#: Cosine at which the semantic part of relevance starts (MiniLM: unrelated texts sit below it).
COS_FLOOR = 0.25
#: Cosine at which the semantic part of relevance is full.
COS_FULL = 0.70
#: Relevance of an entry that holds every query word, when no cosine is available (BM25 only).
LEXICAL_ONLY_CAP = 0.85
#: Query words whose mean IDF is below this are not informative enough to judge by (e.g. "the").
INFORMATIVE_IDF = 1.0
#: How many of the top entries the level is judged from.
TOP_N = 3
#: How many results of people other than the named ones `other_coverage` reads (explorer.search.memory.signals).
OTHERS_N = 5
#: `named_lead = named_coverage - OTHER_WEIGHT * other_coverage`: what the named person's own results hold
#: of the question, less what someone else's hold (chosen on LoCoMo leaving one conversation out).
OTHER_WEIGHT = 0.8
#: `named_lead` below this flags "no good match" (LoCoMo, leaving one conversation out).
LEAD_FLAG = 0.08
#: With someone named, `matched` below this flags "no good match": the results are weak in themselves
#: (with nobody named the bar is MEDIUM). Chosen on LoCoMo leaving one conversation out.
WEAK = 0.1
#: Diminishing returns: result overlap with the previous search above which it warns.
OVERLAP = 0.8
#: Diminishing returns: this many searches within MANY_WINDOW_S seconds is "many".
MANY_SEARCHES = 8
#: Diminishing returns: the window of MANY_SEARCHES, in seconds.
MANY_WINDOW_S = 120.0


# -- per-entry relevance (computed by the pipeline for every result) ---------------------------


def token_idf(n_docs: int, df: int) -> float:
    """A non-negative IDF: ln(1 + (N - df + 0.5) / (df + 0.5)); a word in no shard gets the most."""
    return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5)) if n_docs > 0 else 0.0


def coverage(
    query_tokens: Sequence[str], doc_tokens: Iterable[str] | set[str], idf: Callable[[str], float]
) -> float:
    """IDF-weighted share of the query's (folded) words found in the entry's tokens, 0-1.

    Rare words weigh more than common ones; a word absent from the vault weighs most, so a
    query half made of unknown words covers at most half. When the query's words are on
    average barely informative (mean IDF below INFORMATIVE_IDF, e.g. only "the"), the share
    is scaled down by that mean: matching them says little.
    """
    words = list(dict.fromkeys(t for t in query_tokens if t))
    if not words:
        return 0.0
    have = doc_tokens if isinstance(doc_tokens, (set, frozenset)) else set(doc_tokens)
    weights = {w: max(idf(w), 0.0) for w in words}
    total = sum(weights.values())
    if total <= 0.0:
        return 0.0
    share = sum(weights[w] for w in words if w in have) / total
    mean = total / len(words)
    return share * min(1.0, mean / INFORMATIVE_IDF)


def relevance(cos: float | None, cover: float) -> float:
    """0-1 estimate of how well an entry matches its query.

    With a cosine (the best of the entry's shards against the query vector):
    `max(c, (c + coverage) / 2)` where `c = clip((cos - COS_FLOOR) / (COS_FULL - COS_FLOOR))`,
    so meaning alone can make an entry relevant, words alone at most half. Without one
    (BM25 only, or no vector yet): `LEXICAL_ONLY_CAP * coverage`.
    """
    if cos is None:
        return round(LEXICAL_ONLY_CAP * cover, 4)
    c = min(max((cos - COS_FLOOR) / (COS_FULL - COS_FLOOR), 0.0), 1.0)
    return round(max(c, 0.5 * c + 0.5 * cover), 4)


# -- the quality of a result list -------------------------------------------------------------


def assess(
    results: Sequence[SearchResult],
    dense: bool,
    named_match: float = 1.0,
    named_coverage: float = 1.0,
    other_coverage: float = 0.0,
    named: bool = False,
    conversation: bool = False,
    first_named: bool = False,
    first_likeness: float = 0.0,
) -> Quality:
    """Judge a ranked result list (searched entries only) from each entry's `relevance`.

    Formula (all parts 0-1):

        top       = the highest relevance among the first TOP_N entries
        agreement = for that entry: 1 when both BM25 and embeddings rank it in their top 3,
                    0.5 when one does, else 0; BM25 only (nothing to agree with): 1 when BM25
                    ranks it in its top 3 or it leads the list, else 0; in both cases times
                    min(1, top / 0.5), since ranks agree on weak matches too
        support   = mean relevance of the first TOP_N entries
        matched   = 0.6 * top + 0.25 * agreement + 0.15 * support
        evidence  = (named_match + named_coverage) / 2            (1 when nobody is named)
        score     = min(matched, evidence ** 2)
        lead      = relevance of the first entry less the best relevance of the next TOP_N - 1
                    (negative when a later entry is more relevant; its relevance with one entry)
        level score = score + LEAD_WEIGHT * lead in a notes vault, the score in a vault of turns

    Levels: the level score against high >= HIGH > medium >= MEDIUM > low, or TURN_HIGH /
    TURN_MEDIUM in a vault of conversation turns (`conversation`), each chosen so that a wrong first result says high, and
    a right one low, at most 10 % of the time (README "Quality levels"). One strong entry that both retrievers agree
    on is enough for high (a question one note answers); a long list of weak matches stays low,
    whatever its length. BM25 only, high needs a top entry holding nearly all (about 87 % of
    the IDF weight of) the query's words. Confidence is 1 for an empty list (surely nothing), else grows with the
    level score's distance to the nearest level boundary (0.5 on it, 1 at 0.15 away), times 0.8
    when only BM25 ran. Factors also describe the score distribution (spread, gap) that the
    two-pass analyser reads.

    When the query names a person of an agent-memory vault (explorer.search.memory.signals), the list
    is theirs and two more parts judge whether the memory holds the answer about *them*:
    `named_match`, the share of the best lexical evidence that is that person's, and
    `named_coverage`, the share of the query's other words that the person's best result states
    (explorer.search.memory.stated: its questions and sentences said to someone else left out).
    Their mean, `named_evidence`, caps the score at its square: a good match that is someone
    else's, or the person's notes holding only the common words of the question, cannot be high.
    The factor `no_good_match` answers "does the memory hold this?". With someone named
    (`named`): when `named_lead` = `named_coverage` - OTHER_WEIGHT * `other_coverage` is below
    LEAD_FLAG (the named person's best results hold less of what is asked than someone else's:
    the memory most likely holds it about the other person), or `matched` < WEAK (the results
    are weak in themselves). With nobody named: when the level is low. A level lowered by the
    cap alone does not set it.

    A query that is the first result's name (`first_named`: its title, file name or an alias,
    word for word) is `high`, its score at least the `high` threshold: the note asked for by name was
    found first. A short note or a one-word name gives relevance little to read; that is no doubt about it.
    In a notes vault, a query that nearly spells the first result's name (`first_likeness`, 0-1,
    at least NEAR_NAME) is at least `medium` (its score left as it is): a name typed with a typo
    that the typo correction did not catch.
    """
    searched = [r for r in results if r.source == "search"]
    evidence = (named_match + named_coverage) / 2.0
    named_lead = named_coverage - OTHER_WEIGHT * other_coverage
    parts = {
        "named": named,
        "named_match": round(named_match, 4),
        "named_coverage": round(named_coverage, 4),
        "named_evidence": round(evidence, 4),
        "other_coverage": round(other_coverage, 4),
        "named_lead": round(named_lead, 4),
    }
    if not searched:
        factors = _factors(0.0, 0.0, 0.0, 0.0, 0.0, 0, 0, 0.0, dense, 0.0)
        factors.update(parts, matched=0.0, no_good_match=True)
        return Quality(
            level="low",
            score=0.0,
            confidence=1.0,
            factors=factors,
            suggestion="No results found. Try other words, or remove filters.",
        )
    rel = [r.relevance for r in searched]
    head = rel[:TOP_N]
    top = max(head)
    lead = searched[head.index(top)]
    agreement = _agreement(lead, dense, lead is searched[0]) * min(1.0, top / RELEVANT)
    support = sum(head) / len(head)
    matched = min(1.0, 0.6 * top + 0.25 * agreement + 0.15 * support)
    score = min(matched, evidence**2)
    window = rel[:10]
    spread = statistics.pstdev(window) if len(window) > 1 else 0.0
    ordered = sorted(window, reverse=True)
    gap = ordered[0] - ordered[1] if len(ordered) > 1 else ordered[0]
    relevant = sum(1 for x in window if x >= RELEVANT)
    high, medium = (TURN_HIGH, TURN_MEDIUM) if conversation else (HIGH, MEDIUM)
    first_lead = rel[0] - max(head[1:]) if len(head) > 1 else rel[0]
    # The level reads the score and, in a notes vault, how far the first result leads the next ones.
    # The score itself (what the two-pass analysis and the early return read) is left as it is.
    judged = score if conversation else score + LEAD_WEIGHT * first_lead
    near = not conversation and first_likeness >= NEAR_NAME
    level = "high" if judged >= high or first_named else "medium" if judged >= medium or near else "low"
    if first_named:
        score = max(score, high)
    margin = min(abs(judged - high), abs(judged - medium))
    confidence = min(1.0, 0.5 + margin / 0.3) * (1.0 if dense else 0.8)
    factors = _factors(
        top,
        sum(window) / len(window),
        support,
        spread,
        gap,
        len(searched),
        relevant,
        agreement,
        dense,
        searched[0].score,
    )
    # The flag. With someone named: the memory holds this about someone else, or the results are
    # weak in themselves (a lower bar: on a named question relevance alone separates little).
    # With nobody named: the results are weak (level low).
    elsewhere = named and named_lead < LEAD_FLAG and not first_named
    weak = matched < WEAK and not first_named if named else level == "low"
    factors.update(
        parts,
        matched=round(matched, 4),
        first_lead=round(first_lead, 4),
        level_score=round(judged, 4),
        first_named=first_named,
        first_likeness=round(first_likeness, 4),
        no_good_match=weak or elsewhere,
    )
    suggestion = _suggestion(level, top, relevant, dense)
    if first_named and judged < high:
        suggestion = "The note of that name is the first result."
    elif near and judged < medium:
        suggestion = "The first result's name is nearly what was typed: check its spelling."
    elif elsewhere:
        suggestion = (
            "The best matches are about someone other than the person named, or hold little of what was "
            "asked about them: the memory may not hold this about them."
        )
    return Quality(level, round(score, 4), round(confidence, 3), factors, suggestion)


def _agreement(lead: SearchResult, dense: bool, first: bool) -> float:
    in_bm25 = lead.bm25_rank is not None and lead.bm25_rank <= 3
    in_dense = lead.embedding_rank is not None and lead.embedding_rank <= 3
    if not dense:
        return 1.0 if in_bm25 or first else 0.0
    return 1.0 if in_bm25 and in_dense else 0.5 if in_bm25 or in_dense else 0.0


def _factors(
    top: float,
    avg: float,
    support: float,
    spread: float,
    gap: float,
    count: int,
    relevant: int,
    agreement: float,
    dense: bool,
    top_score: float,
) -> dict[str, Any]:
    return {
        "top_relevance": round(top, 4),
        "avg_relevance": round(avg, 4),
        "support": round(support, 4),
        "score_spread": round(spread, 4),
        "score_gap": round(gap, 4),
        "result_count": count,
        "relevant_count": relevant,
        "agreement": round(agreement, 4),
        "top_score": round(top_score, 6),
        "top_score_above_threshold": top >= HIGH,
        "dense": dense,
    }


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


# -- diminishing returns ----------------------------------------------------------------------


@lru_cache(maxsize=256)
def query_key(query: str) -> tuple[str, ...]:
    """A query's content words, folded and sorted (stop-words dropped unless nothing else); kept for
    the latest queries, which every search compares itself with."""
    return tuple(sorted(set(query_words(query))))


def diminishing_returns(
    history: list[dict[str, Any]], query: str, ids: list[str], top: float, now: float | None = None
) -> str | None:
    """An advisory when searching more is unlikely to help, else None.

    `history` holds earlier searches, oldest first, as dicts with `query`, `ids` (result paths),
    `top` (top relevance) and `time`. Patterns, first match wins:
      1. the same query again (same content words, any order or case) among the last 20;
      2. more than 80 % of the results were in the previous search's results;
      3. top relevance falling three searches in a row;
      4. MANY_SEARCHES or more searches within MANY_WINDOW_S seconds.
    """
    key = query_key(query)
    if key and any(query_key(h["query"]) == key for h in history[-20:]):
        return f'You already searched for "{query}". Try different words, or use what you have.'
    if history and ids:
        last = set(history[-1]["ids"])
        overlap = sum(1 for i in ids if i in last) / len(ids)
        if overlap > OVERLAP:
            return f"Results overlap {round(overlap * 100)}% with the previous search: you may have what there is."
    if len(history) >= 2:
        a, b = history[-2]["top"], history[-1]["top"]
        if a > b > top:
            return "Top relevance is falling search after search: consider stopping or rephrasing."
    if history:
        t = history[-1]["time"] if now is None else now
        recent = [h for h in history if h["time"] >= t - MANY_WINDOW_S]
        if len(recent) + 1 >= MANY_SEARCHES:
            return "Many searches in a short time: consider reading the best results in context."
    return None
