"""The SearchResults schema: typed records and their JSON form (what `explorer search --json` prints)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from explorer.vault.model import Highlight  # noqa: F401 - part of the results schema


@dataclass(frozen=True, slots=True)
class Contribution:
    """One line of a result's explanation: a ranking in which its best shard appeared."""

    term: str
    """The search term of this ranking."""
    retriever: str
    """`bm25` or `dense`."""
    rank: int
    """1-based rank of the shard in this ranking."""
    raw_score: float
    """BM25 score or cosine similarity."""
    retriever_weight: float
    """Weight of the retriever."""
    term_weight: float
    """Weight of the term (the query itself weighs more than generated terms)."""
    source_weight: float
    """Weight of the shard's source type (knowledge 1.5)."""
    contribution: float
    """retriever_weight * term_weight * source_weight / (k + rank)."""


@dataclass(frozen=True, slots=True)
class Ranking:
    """One ranked list: a retriever's answer to one search term."""

    term: str
    """The search term."""
    retriever: str
    """`bm25`, `dense` or `feedback` (dense search with the query vector moved toward `sources`)."""
    retriever_weight: float
    """Weight of the retriever."""
    term_weight: float
    """Weight of the term."""
    items: tuple[tuple[str, float], ...]
    """(node_id, raw score), best first; rank = position + 1."""
    sources: tuple[str, ...] = ()
    """For a feedback ranking: the shards whose vectors moved the query vector."""


@dataclass(frozen=True, slots=True)
class ContextShard:
    """A passage of a result with its provenance."""

    node_id: str
    """Stable id of the shard."""
    path: str
    """The note's vault-relative path."""
    cursor: int
    """Offset of the first match (the shard start when nothing matched literally)."""
    start: int
    """Offset of the passage start in the note's raw text."""
    end: int
    """Offset past the passage."""
    text: str
    """`note.text[start:end]`."""
    highlights: tuple[Highlight, ...]
    """Matches in the passage."""
    score: float
    """Fused score of the shard."""
    pass_: int = 1
    """The pass that found it."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (`pass` instead of `pass_`)."""
        d = asdict(self)
        d["pass"] = d.pop("pass_")
        return d


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why a result ranked where it did."""

    rrf_k: int
    """The RRF constant."""
    best_node_id: str
    """The shard whose fused score is the entry's."""
    contributions: tuple[Contribution, ...]
    """Every ranking the best shard appeared in; contributions sum to `fused_score`."""
    fused_score: float
    """Sum of the contributions."""
    source_weight: float
    """Weight of the source type."""
    pass_: int
    """The pass that found the result."""
    shards_matched: int
    """Shards of the note that were retrieved."""
    rerank: dict[str, Any] | None = None
    """Rerank score, movement (rank before -> after) and backend, when reranking ran."""
    final_score: float | None = None
    """Score after reranking (the blended score), when reranking ran."""
    second_node_id: str = ""
    """The note's second-best shard ('' when only one was retrieved)."""
    second_score: float = 0.0
    """Its fused score."""
    second_weight: float = 0.0
    """Its damping: the note's score is `fused_score + second_weight * second_score`."""
    note_score: float | None = None
    """The note's score (None when no second shard counted: then it is `fused_score`)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        d = asdict(self)
        d["pass"] = d.pop("pass_")
        return d


@dataclass(frozen=True, slots=True)
class SearchResult:
    """One entry (a note) of the results."""

    document_path: str
    """Vault-relative path."""
    title: str
    """The note's title."""
    source_type: str
    """fact, belief, preference, turn_summary, research_cache, visit_record or note."""
    node_id: str
    """node_id of the best shard."""
    rrf_score: float
    """Fused score (0 for always-include entries that no ranking found)."""
    score: float
    """The score the list is sorted by: rrf_score (for an entry pass 2 added, scaled to pass 1's top
    score), or the blended rerank score."""
    bm25_rank: int | None
    """Best rank any of its shards reached in a BM25 ranking (None: not retrieved by BM25)."""
    embedding_rank: int | None
    """Best rank any of its shards reached in an embedding ranking (None: not retrieved)."""
    snippet: str
    """Up to 200 characters around the first match of the best shard."""
    source: str
    """`search` or `always_include`."""
    pass_: int = 1
    """1 or 2: the pass that found it."""
    reason: str = ""
    """For always-include entries: which rule added it."""
    relevance: float = 0.0
    """0-1 estimate of how well the entry matches (used by the quality score)."""
    context_shards: tuple[ContextShard, ...] = ()
    """The best shards of the entry with highlights."""
    explanation: Explanation | None = None
    """Why it ranked."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "document_path": self.document_path,
            "title": self.title,
            "source_type": self.source_type,
            "node_id": self.node_id,
            "rrf_score": self.rrf_score,
            "score": self.score,
            "bm25_rank": self.bm25_rank,
            "embedding_rank": self.embedding_rank,
            "snippet": self.snippet,
            "source": self.source,
            "pass": self.pass_,
            "reason": self.reason,
            "relevance": self.relevance,
            "context_shards": [c.to_dict() for c in self.context_shards],
            "explanation": self.explanation.to_dict() if self.explanation else None,
        }


@dataclass(frozen=True, slots=True)
class Quality:
    """How good the results look (search-quality phase)."""

    level: str
    """high, medium or low."""
    score: float
    """0-1."""
    confidence: float
    """0-1: how sure the assessment is."""
    factors: dict[str, Any]
    """The signals the score was computed from."""
    suggestion: str
    """What to do next."""


@dataclass(frozen=True, slots=True)
class PassInfo:
    """One retrieval pass."""

    number: int
    """1 or 2."""
    query: str
    """The query of the pass."""
    terms: tuple[str, ...]
    """Search terms used."""
    entries: int
    """ke: entries kept."""
    shards: int
    """kc: context shards kept per entry."""
    found: int
    """Entries found."""
    new: int
    """Entries not found by an earlier pass."""
    ms: float
    """Wall time."""


@dataclass(slots=True)
class SearchTrace:
    """What the stages of a search saw, recorded as they ran (the why-not view reads it; not in the JSON)."""

    rankings: list[Ranking] = field(default_factory=list)
    """Pass 1's rankings, in the order they were fused."""
    rankings_pass2: list[Ranking] = field(default_factory=list)
    """Pass 2's rankings (empty without a second pass)."""
    entries: list[tuple[str, float]] = field(default_factory=list)
    """Pass 1's fused notes, best first: (path, fused score of its best shard)."""
    version: int = -1
    """The index version searched."""


@dataclass
class SearchResults:
    """Everything a search returns; `to_dict()` is the JSON printed by `explorer search --json`."""

    query: str
    search_terms_used: list[str]
    results: list[SearchResult]
    stats: dict[str, Any]
    quality: Quality | None = None
    passes: list[PassInfo] = field(default_factory=list)
    analysis: dict[str, Any] = field(default_factory=dict)
    rerank: dict[str, Any] = field(default_factory=dict)
    timings_ms: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    advisory: str | None = None
    mode: dict[str, Any] = field(default_factory=dict)
    filters: dict[str, Any] = field(default_factory=dict)
    early_return: bool = False
    searched_sources: list[str] = field(default_factory=list)
    include_preferences: bool = False
    include_n_minus_1: bool = False
    corrections: list[dict[str, Any]] = field(default_factory=list)
    """Query words found nowhere in the vault and the vault words searched instead."""
    trace: SearchTrace = field(default_factory=SearchTrace, repr=False)

    @property
    def context_shards(self) -> list[ContextShard]:
        """All results' context shards, in result order."""
        return [c for r in self.results for c in r.context_shards]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (stable keys; see README)."""
        return {
            "query": self.query,
            "search_terms_used": list(self.search_terms_used),
            "results": [r.to_dict() for r in self.results],
            "context_shards": [c.to_dict() for c in self.context_shards],
            "stats": dict(self.stats),
            "quality": asdict(self.quality) if self.quality else None,
            "passes": [asdict(p) for p in self.passes],
            "analysis": dict(self.analysis),
            "rerank": dict(self.rerank),
            "timings_ms": {k: round(v, 3) for k, v in self.timings_ms.items()},
            "warnings": list(self.warnings),
            "advisory": self.advisory,
            "mode": dict(self.mode),
            "filters": dict(self.filters),
            "early_return": self.early_return,
            "searched_sources": list(self.searched_sources),
            "include_preferences": self.include_preferences,
            "include_n_minus_1": self.include_n_minus_1,
            "corrections": [dict(c) for c in self.corrections],
        }
