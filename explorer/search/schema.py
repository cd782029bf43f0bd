"""The SearchResults schema: typed records and their JSON form (what `explorer search --json` prints)."""

from __future__ import annotations

import types
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from explorer.vault.model import Highlight  # part of the results schema

OPTIONAL = {"json": "optional"}
"""Field metadata: the JSON form leaves the field out while it is None."""
INTERNAL = {"json": "internal"}
"""Field metadata: the field never appears in the JSON form."""


def to_dict(record: Any, keys: Iterable[str] | None = None) -> dict[str, Any]:
    """The JSON form of a schema record.

    Each field appears under its name (a trailing underscore dropped: `pass_` is `pass`), in the
    order the fields are declared or in the order of `keys`, which may also name a property. A field
    marked OPTIONAL is left out while it is None, one marked INTERNAL never appears. Values become
    JSON values: a nested record its own `to_dict()` (or this form), a tuple or list a list, a dict
    a dict with its values converted.

    Args:
        record: A dataclass instance.
        keys: The attributes to write, in order; default every field that is not INTERNAL.

    Returns:
        A dict ready for `json.dumps`.
    """
    marks = {f.name: f.metadata.get("json") for f in fields(record)}
    names = [name for name, mark in marks.items() if mark != "internal"] if keys is None else keys
    out: dict[str, Any] = {}
    for name in names:
        value = getattr(record, name)
        if value is None and marks.get(name) == "optional":
            continue
        out[name.rstrip("_")] = _json_value(value)
    return out


def _json_value(value: Any) -> Any:
    """A value of a record as JSON: records as dicts, tuples and lists as lists, dicts converted."""
    if is_dataclass(value) and not isinstance(value, type):
        method = getattr(value, "to_dict", None)
        return method() if method is not None else to_dict(value)
    if isinstance(value, (list, tuple)):
        return [_json_value(item) for item in value]
    if isinstance(value, dict):
        return {key: _json_value(item) for key, item in value.items()}
    return value


R = TypeVar("R")


def from_dict(kind: type[R], data: dict[str, Any]) -> R:
    """A schema record rebuilt from its JSON form: the inverse of `to_dict`.

    Each field is read from its key (`pass` for `pass_`); a missing key keeps the field's default,
    an INTERNAL field is never read. Values follow the field's annotation: a record from a dict, a
    tuple or list from a list, the values of a dict converted; anything else is taken as it is.

    Args:
        kind: The record class.
        data: Its JSON form (as `json.loads` returns it).

    Raises:
        ValueError: `data` does not have the record's shape.
    """
    if not isinstance(data, dict):
        raise ValueError(f"{kind.__name__}: expected an object, got {type(data).__name__}")
    hints = _hints(kind)
    values: dict[str, Any] = {}
    for f in fields(kind):  # type: ignore[arg-type]
        key = f.name.rstrip("_")
        if f.metadata.get("json") == "internal" or key not in data:
            continue
        values[f.name] = _from_json(hints[f.name], data[key])
    try:
        return kind(**values)
    except TypeError as exc:  # a required key missing
        raise ValueError(f"{kind.__name__}: {exc}") from None


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(kind: type) -> dict[str, Any]:
    """The resolved field annotations of a record class (cached)."""
    hints = _HINTS.get(kind)
    if hints is None:
        hints = _HINTS[kind] = get_type_hints(kind)
    return hints


def _from_json(annotation: Any, value: Any) -> Any:
    """A JSON value as the annotated type: records from dicts, tuples and lists from lists."""
    if value is None:
        return None
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Union or origin is types.UnionType:
        options = [a for a in args if a is not type(None)]
        for option in options:
            if isinstance(option, type) and is_dataclass(option) and isinstance(value, dict):
                return from_dict(option, value)
        return _from_json(options[0], value) if len(options) == 1 else value
    if isinstance(annotation, type) and is_dataclass(annotation):
        return from_dict(annotation, value)
    if origin is tuple and isinstance(value, list):
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_from_json(args[0], item) for item in value)
        return tuple(_from_json(a, item) for a, item in zip(args, value))
    if origin is list and isinstance(value, list):
        return [_from_json(args[0], item) for item in value] if args else list(value)
    if origin is dict and isinstance(value, dict) and len(args) == 2:
        return {key: _from_json(args[1], item) for key, item in value.items()}
    return value


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
    """retriever_weight * term_weight * source_weight / (k + rank) (RRF), or times the normalised raw
    score instead of 1 / (k + rank) (score fusion, see explorer.search.fusion.score_fusion)."""


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
        return to_dict(self)


@dataclass(frozen=True, slots=True)
class RerankMove:
    """What reranking did to one result."""

    backend: str
    """The reranker backend (`local`, `cross-encoder`, `llm`)."""
    pass_: int | None
    """The rerank pass that scored it (None: not scored, kept in fused order)."""
    raw_score: float | str | None
    """The backend's score (None when not scored; a string for a non-finite value)."""
    rerank_score: float | str | None
    """The score normalised to 0-1 (None when not scored)."""
    fused_share: float
    """Its fused score as a share of the top fused score."""
    final_score: float
    """The blended score the list is sorted by."""
    rank_before: int
    """1-based rank before reranking."""
    rank_after: int
    """1-based rank after reranking."""
    movement: int
    """rank_before - rank_after (positive: moved up)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (`pass` instead of `pass_`)."""
        return to_dict(self)


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
    rerank: RerankMove | None = None
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
    fusion: str = "rrf"
    """`rrf` (contribution = weights / (rrf_k + rank)) or `score` (weights x the raw score
    normalised to 0-1 within its ranking; see explorer.search.fusion.score_fusion)."""
    recency: float | None = field(default=None, metadata=OPTIONAL)
    """The share of the note's score a recency preference left it (None: no preference asked;
    explorer.search.core.notefilters)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (`recency` only when a recency preference applied; `pass` last)."""
        return to_dict(self, _EXPLANATION_KEYS)


@dataclass(frozen=True, slots=True)
class Badge:
    """A short label of a result (`kind` says what it is about, so a view can style or skip it)."""

    kind: str
    """classic, bm25, emb, pass, always, rerank or type."""
    text: str
    """What is shown, e.g. `bm25 #3`."""


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
    date: str | None = None
    """The note's date (`YYYY-MM-DD`), None when it has none (explorer.text.dates.note_date)."""
    date_from: str | None = None
    """Where the date was read: `date`, `created`, `timestamp`, `file name` or `modified`."""

    def badges(self) -> list[Badge]:
        """Its labels, in order: classic tool, BM25 rank, embedding rank, pass, always-include, rerank move, source type."""
        out: list[Badge] = []
        if self.source == "classic":
            out.append(Badge("classic", self.reason or "classic"))
        if self.bm25_rank is not None:
            out.append(Badge("bm25", f"bm25 #{self.bm25_rank}"))
        if self.embedding_rank is not None:
            out.append(Badge("emb", f"emb #{self.embedding_rank}"))
        if self.source == "search":
            out.append(Badge("pass", f"pass {self.pass_}"))
        if self.source == "always_include":
            out.append(Badge("always", f"always: {self.reason}" if self.reason else "always-include"))
        rr = self.explanation.rerank if self.explanation else None
        if rr is not None and rr.rank_before != rr.rank_after:
            arrow = "↑" if rr.rank_after < rr.rank_before else "↓"
            out.append(Badge("rerank", f"rerank {arrow}{abs(rr.rank_before - rr.rank_after)}"))
        out.append(Badge("type", self.source_type))
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the date before the passages)."""
        return to_dict(self, _RESULT_KEYS)


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
class SearchStats:
    """Counts of one search."""

    total_documents_searched: int = 0
    """Notes in the index."""
    total_shards_searched: int = 0
    """Shards in the index."""
    bm25_matches: int = 0
    """Distinct shards in pass 1's BM25 rankings."""
    embedding_matches: int = 0
    """Distinct shards in pass 1's dense rankings."""
    final_results: int = 0
    """Entries returned."""
    shards_without_vectors: int = 0
    """Shards not embedded yet."""
    dense_available: bool = False
    """True when the query was embedded."""
    index_version: int = 0
    """The index version searched."""
    named_people: list[str] | None = field(default=None, metadata=OPTIONAL)
    """People of the vault the query names (None: not a ranked search)."""
    feedback_from: list[str] | None = field(default=None, metadata=OPTIONAL)
    """Shards the dense feedback ranking moved toward (None: not a ranked search)."""
    hits: int | None = field(default=None, metadata=OPTIONAL)
    """Classic tools: hits before the cut."""
    stage: str | None = field(default=None, metadata=OPTIONAL)
    """Classic tools: the stage that answered."""
    stages_tried: list[str] | None = field(default=None, metadata=OPTIONAL)
    """Classic tools: the stages tried in order."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the counts, then the optional fields that are set."""
        return to_dict(self)


@dataclass(frozen=True, slots=True)
class AnalysisInfo:
    """The analysis between the passes as the results report it."""

    decision: str
    """`SUFFICIENT` or `REFINE`."""
    refined_query: str = ""
    """The query of pass 2 (REFINE only)."""
    reason: str = ""
    """Why, in a sentence."""
    analyser: str | None = None
    """`heuristic`, `llm`, `llm->heuristic`; None when no analyser ran (knowledge-first early return)."""
    tokens_used: int = 0
    """LLM tokens spent."""
    skipped: str | None = field(default=None, metadata=OPTIONAL)
    """Why pass 2 did not run, when it did not."""
    pass2: str | None = field(default=None, metadata=OPTIONAL)
    """A note on pass 2's outcome (e.g. it found nothing new)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form; an early return (no analyser) lists `reason` after `tokens_used`, as it always has."""
        return to_dict(self, _EARLY_RETURN_ANALYSIS_KEYS if self.analyser is None else None)


@dataclass(slots=True)
class RerankPass:
    """One pass of the multi-pass reranker."""

    applied: bool = False
    """True when the pass scored its candidates."""
    candidates: int = 0
    """Results it scored (or was to score)."""
    latency_ms: float = 0.0
    """Wall time of the pass."""
    timed_out: bool = False
    """True when the budget ran out before the backend finished."""
    budget_limited: bool = False
    """True when the backend's cost estimate cut the candidates."""
    skipped: str | None = field(default=None, metadata=OPTIONAL)
    """Why the pass did not run."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (`skipped` only when set)."""
        return to_dict(self)


@dataclass(slots=True)
class RerankInfo:
    """What reranking did for a search (`backend` None: reranking was not asked for)."""

    applied: bool = False
    """True when at least pass 1 reordered the results."""
    backend: str | None = None
    """The backend's name."""
    pass1: RerankPass = field(default_factory=RerankPass)
    """The gate pass."""
    pass2: RerankPass = field(default_factory=RerankPass)
    """The precision pass."""
    early_exit: bool = False
    """True when pass 2 was skipped because pass 1's scores were decisive or too few."""
    early_exit_reason: str | None = None
    """Why it exited early."""
    score_ratio: float | str | None = None
    """Top-to-second score ratio of pass 1."""
    score_gap: float | str | None = None
    """Top-to-second score gap of pass 1."""
    blend: float = 0.0
    """Weight of the rerank score in the final score."""
    error: str | None = None
    """A backend failure (the last complete order was kept)."""
    notes: list[str] | None = field(default=None, metadata=OPTIONAL)
    """Notes from the backend's set-up."""
    skipped: str | None = field(default=None, metadata=OPTIONAL)
    """Why reranking did not run (e.g. the quality gate)."""
    prepare_ms: float | None = field(default=None, metadata=OPTIONAL)
    """Backend set-up time, when it took 1 ms or more."""
    tokens_used: int | None = field(default=None, metadata=OPTIONAL)
    """LLM tokens spent (LLM backend only)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form: `{"applied": false}` when reranking was not asked for."""
        if self.backend is None:
            return {"applied": self.applied}
        return to_dict(self)


@dataclass(slots=True)
class SearchMode:
    """How a search ran: a ranked search, a filter-only listing (`browse`) or a classic tool (`classic`)."""

    dense: bool = False
    """True when embeddings were used."""
    model_state: str = ""
    """The embedding model's state."""
    runtime: str = ""
    """The embedding runtime."""
    terms: str = ""
    """Who wrote the search terms: `keywords`, `llm`, `llm->keywords`."""
    analyser: str | None = None
    """Who analysed pass 1 (None: no analysis)."""
    llm_tokens: int = 0
    """LLM tokens spent by the search."""
    two_pass: bool = False
    """True when two-pass was on."""
    rerank: bool = False
    """True when reranking was asked for."""
    cached: bool = False
    """True when the results came from the cache."""
    browse: bool = False
    """A filter-only query: notes listed, not ranked."""
    classic: str | None = None
    """The classic tool that answered (tfidf, phrase, and, fuzzy), if one did."""
    stage: str | None = None
    """Classic tools: the stage that answered."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form; a listing and a classic search carry only their own keys."""
        if self.browse:
            return to_dict(self, ("browse", "dense"))
        if self.classic is not None:
            return to_dict(self, ("classic", "stage", "dense"))
        return to_dict(self, _RANKED_MODE_KEYS)


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
    stats: SearchStats = field(default_factory=SearchStats)
    quality: Quality | None = None
    passes: list[PassInfo] = field(default_factory=list)
    analysis: AnalysisInfo | None = None
    rerank: RerankInfo | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    advisory: str | None = None
    mode: SearchMode = field(default_factory=SearchMode)
    filters: dict[str, Any] = field(default_factory=dict)
    early_return: bool = False
    searched_sources: list[str] = field(default_factory=list)
    include_preferences: bool = False
    include_n_minus_1: bool = False
    corrections: list[dict[str, Any]] = field(default_factory=list)
    """Query words found nowhere in the vault and the vault words searched instead."""
    trace: SearchTrace = field(default_factory=SearchTrace, repr=False, compare=False, metadata=INTERNAL)
    """What the stages saw (not in the JSON form, so not in a rebuilt copy, and not compared)."""

    @property
    def total_ms(self) -> float:
        """Wall time of the whole search (0 when not timed)."""
        return self.timings_ms.get("total", 0.0)

    @property
    def stage_ms(self) -> list[tuple[str, float]]:
        """(stage, ms) of every timed stage, in the order they ran (the total excluded)."""
        return [(k, v) for k, v in self.timings_ms.items() if k != "total"]

    @property
    def context_shards(self) -> list[ContextShard]:
        """All results' context shards, in result order."""
        return [c for r in self.results for c in r.context_shards]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (stable keys; see README): every passage also listed after the results, an
        absent analysis or rerank as `{}`, timings rounded to the microsecond."""
        d = to_dict(self, _RESULTS_KEYS)
        if self.analysis is None:
            d["analysis"] = {}
        if self.rerank is None:
            d["rerank"] = {}
        d["timings_ms"] = {k: round(v, 3) for k, v in self.timings_ms.items()}
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchResults:
        """The results rebuilt from their JSON form (`to_dict`), e.g. an answer served by another process.

        `from_dict(r.to_dict())` equals `r` but for what the JSON form leaves out: the trace, and
        timings closer than the microsecond. An empty `analysis` or `rerank` is None again; the
        passages listed after the results are read from the results themselves.

        Raises:
            ValueError: `data` is not a SearchResults JSON form.
        """
        data = dict(data)
        for key in ("analysis", "rerank"):
            if data.get(key) == {}:
                data[key] = None
        return from_dict(cls, data)


#: Key orders of the JSON forms that differ from the order of the fields.
_EXPLANATION_KEYS = (
    "rrf_k",
    "best_node_id",
    "contributions",
    "fused_score",
    "source_weight",
    "shards_matched",
    "rerank",
    "final_score",
    "second_node_id",
    "second_score",
    "second_weight",
    "note_score",
    "fusion",
    "recency",
    "pass_",
)
_RESULT_KEYS = (
    "document_path",
    "title",
    "source_type",
    "node_id",
    "rrf_score",
    "score",
    "bm25_rank",
    "embedding_rank",
    "snippet",
    "source",
    "pass_",
    "reason",
    "relevance",
    "date",
    "date_from",
    "context_shards",
    "explanation",
)
_EARLY_RETURN_ANALYSIS_KEYS = (
    "decision",
    "refined_query",
    "analyser",
    "tokens_used",
    "reason",
    "skipped",
    "pass2",
)
_RANKED_MODE_KEYS = (
    "dense",
    "model_state",
    "runtime",
    "terms",
    "analyser",
    "llm_tokens",
    "two_pass",
    "rerank",
    "cached",
)
_RESULTS_KEYS = (
    "query",
    "search_terms_used",
    "results",
    "context_shards",
    "stats",
    "quality",
    "passes",
    "analysis",
    "rerank",
    "timings_ms",
    "warnings",
    "advisory",
    "mode",
    "filters",
    "early_return",
    "searched_sources",
    "include_preferences",
    "include_n_minus_1",
    "corrections",
)
