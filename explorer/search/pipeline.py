"""SearchPipeline: the one entry point that answers a query, stage by stage, with timings and explanations.

Each stage lives in its own module; `SearchPipeline.search` runs them in order:

    terms (search/terms.py)  ->  query vectors + retrieve (search/retrieve.py)
      ->  fuse (search/fusion.py) and build results (search/results.py)   [pass 1, knowledge first]
      ->  analyse and pass 2 (search/twopass.py)  ->  always-include (search/always.py)
      ->  rerank (search/rerank.py)  ->  quality (search/quality.py)

The stages record what they saw in `SearchResults.trace` as they run. Every stage reads one
`Snapshot` of the index (explorer.index.backend), taken when the search starts: a change batch
applied meanwhile shows in the next search, never in half of this one.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from explorer.config import Settings
from explorer.index.backend import IndexBackend, Snapshot
from explorer.index.windows import query_words
from explorer.search.always import always_include, latest_turn
from explorer.search.changes import NoteChanges
from explorer.search.fusion import Entry, Fused, aggregate, rrf, score_fusion
from explorer.search.llm import Budget
from explorer.search.memory import (
    Dialog,
    MemoryCache,
    lift_by_date,
    named_coverage,
    named_match,
    other_coverage,
    owner_weights,
)
from explorer.search.notefilters import recency_factor
from explorer.search.quality import COS_FLOOR, OTHERS_N, SUFFICIENT, TOP_N, assess, diminishing_returns
from explorer.search.query import ParsedQuery, parse_query
from explorer.search.results import ResultBuilder, make_context_shard
from explorer.search.retrieve import Retriever, source_weights
from explorer.search.schema import (
    AnalysisInfo,
    PassInfo,
    Ranking,
    RerankInfo,
    SearchMode,
    SearchResult,
    SearchResults,
)
from explorer.search.terms import SearchTerms, write_terms
from explorer.search.twopass import (
    PASS1_ENTRIES,
    PASS2_ENTRIES,
    PASS2_SHARDS,
    Analysis,
    analyse,
    merge_passes,
    repeats_query,
)
from explorer.search.typos import Correction
from explorer.search.when import Span, mentions
from explorer.text.lru import LRUCache

__all__ = ["QueryError", "SearchCancelled", "SearchPipeline", "latest_turn", "make_context_shard"]

MAX_QUERY_CHARS = 2000
#: Context shards per entry of a search with no ranking (filters only).
SHARDS_PER_ENTRY = 3


class QueryError(ValueError):
    """The query cannot be searched; the message says why and what to do."""


class SearchCancelled(Exception):
    """A newer search replaced this one."""


class Analyser(Protocol):
    """Decides after pass 1 whether a second pass is needed."""

    def __call__(self, query: str, results: SearchResults) -> Analysis: ...


class Reranker(Protocol):
    """Reorders fused results (see explorer.search.rerank)."""

    def rerank(
        self, query: str, results: list[SearchResult], query_vector: np.ndarray | None = None
    ) -> tuple[list[SearchResult], RerankInfo]: ...


Stage = Callable[[str, SearchResults], None]
"""A hook called after a stage (its name, the results so far), in the searching thread."""


@dataclass
class _Run:
    """One search in progress: what it was asked and what its stages produced so far."""

    snap: Snapshot
    """The index as this search reads it, from its first stage to its last."""
    parsed: ParsedQuery
    k: int
    use_dense: bool
    two_pass: bool
    rerank: bool
    cancelled: Callable[[], bool] | None
    started: float
    budget: Budget
    warnings: list[str]
    timings: dict[str, float] = field(default_factory=dict)
    terms: SearchTerms | None = None
    qvecs: dict[str, np.ndarray] | None = None
    qvec: np.ndarray | None = None
    allowed: set[str] | None = None
    early: bool = False
    analysis: Analysis | None = None
    corrections: list[Correction] = field(default_factory=list)
    named: list[str] = field(default_factory=list)
    """People of the vault the query names (folded owner names)."""
    favoured: frozenset[str] = frozenset()
    """Paths of their notes."""
    weight: Callable[[str], float] | None = None
    """The fusion's per-shard weight for this search."""
    dialog: Dialog | None = None
    """Adjacent conversation turns of the index version searched."""
    spans: list[Span] = field(default_factory=list)
    """The days the query names (explorer.search.when), read in conversation-turn vaults only."""
    fusion: str = "rrf"
    """`rrf` or `score` (experimental.fusion, `auto` settled by the vault: score with conversation turns)."""
    threshold: float | None = None
    """The dense rankings' cosine floor (None: experimental.dense_threshold)."""
    on_stage: Stage | None = None
    """Called after pass 1 and after quality (see SearchPipeline.search)."""
    today: _dt.date = field(default_factory=_dt.date.today)
    """The date relative dates and recency were read against."""

    def check(self) -> None:
        """Raise SearchCancelled when a newer search replaced this one."""
        if self.cancelled is not None and self.cancelled():
            raise SearchCancelled()

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Record the wall time of the block as `timings[stage]` (ms)."""
        t = time.perf_counter()
        yield
        self.timings[stage] = (time.perf_counter() - t) * 1000


class SearchPipeline:
    """Answers queries against one index backend, each search against one snapshot of it.

    Steps (each a method below, timed in `timings_ms`, cancellation checked between them):
      1. parse the query (filters) and write search terms (query + 3-5 terms);
      2. per term, a BM25 ranking and an embedding ranking (cosine >= threshold);
      3. weighted RRF over all rankings, built with its explanation;
      4. shards aggregate to notes (best shard wins); knowledge notes first;
      5. two-pass: analysis of pass 1, then pass 2 on a refined query, merged;
         always-include rules append notes;
      6. rerank (multi-pass, early exit);
      7. quality score, diminishing-returns advisory; results with context shards.
    """

    def __init__(
        self,
        index: IndexBackend,
        settings: Settings | None = None,
        term_writer: Callable[[str], SearchTerms] | None = None,
        analyser: Analyser | None = None,
        reranker: Reranker | None = None,
        notices: list[str] | None = None,
    ) -> None:
        self.index = index
        self.settings = settings or index.settings
        self.term_writer = term_writer
        self.analyser = analyser
        self.reranker = reranker
        self.history: list[dict[str, Any]] = []
        self.notices: tuple[str, ...] = tuple(notices or ())
        """What went wrong assembling this pipeline (a component that failed to load); every search repeats it as a warning."""
        self._cache: LRUCache[tuple, SearchResults] = LRUCache(self.settings.experimental.cache_size)
        self._weights = dict(self.settings.experimental.source_weights)
        changes = NoteChanges()
        self._retriever = Retriever(index, self.settings, self._weights, changes)
        self._builder = ResultBuilder(self.settings, self._retriever.dates)
        self.today: Callable[[], _dt.date] = _dt.date.today
        """Today's date, against which relative dates (`after:last week`) and recency are read."""
        self._memory = MemoryCache(changes)

    # -- public -----------------------------------------------------------------------------
    def prepare(self) -> None:
        """Build what the first query of this index version would (name table, idf, note owners
        and dialog turns), so that a process serving queries answers its first one at full speed."""
        with self.index.snapshot() as snap:
            self._retriever.prepare(snap)
            self._memory.get(snap)

    def clear_cache(self) -> None:
        """Forget the remembered answers, so the next searches run in full (a benchmark measures
        searches, not cache hits)."""
        self._cache.clear()

    def search(
        self,
        query: str,
        k: int | None = None,
        *,
        dense: bool = True,
        two_pass: bool | None = None,
        rerank: bool | None = None,
        cancelled: Callable[[], bool] | None = None,
        record: bool = True,
        on_stage: Stage | None = None,
    ) -> SearchResults:
        """Answer `query`. Raises QueryError for an empty query, SearchCancelled when `cancelled()`.

        The whole search reads one snapshot of the index. `on_stage(name, results)` is called in
        this thread after pass 1 (`"pass1"`, its results) and after quality (`"quality"`). With
        `record` False the search is left out of the history the diminishing-returns advice reads.
        """
        with self.index.snapshot() as snap:
            run = self._begin(snap, query, k, dense, two_pass, rerank, cancelled)
            run.on_stage = on_stage
            key = (
                run.parsed.raw,
                run.k,
                run.use_dense,
                run.two_pass,
                run.rerank,
                snap.version,
                self.index.model_state,
                run.today,
            )
            hit = self._cached(key, run, record)
            if hit is not None:
                return hit
            if not run.parsed.text:
                return self._browse(run)
            self._write_terms(run)
            self._people(run)
            self._embed_query(run)
            out = self._first_pass(run)
            self._stage(run, "pass1", out)
            self._analyse_and_refine(run, out)
            self._always_include(run, out)
            self._rerank(run, out)
            self._assess(run, out)
            self._stage(run, "quality", out)
            return self._finish(run, out, key, record)

    def allowed_paths(self, query: str) -> set[str] | None:
        """The notes the filters of `query` allow (tag:, path:, file:, section:, -word, [property:value],
        after:/before:/on:); None when it has none.

        For tools that search on their own (the classic cursor tools) but should honour the same filters.
        """
        parsed = parse_query(query, self.today())
        with self.index.snapshot() as snap:
            allowed = self._retriever.allowed(snap, parsed)
            if allowed is None:
                return None
            return {snap.shards[n].path for n in allowed}

    # -- stages ------------------------------------------------------------------------------
    def _begin(
        self,
        snap: Snapshot,
        query: str,
        k: int | None,
        dense: bool,
        two_pass: bool | None,
        rerank: bool | None,
        cancelled: Callable[[], bool] | None,
    ) -> _Run:
        """Check and parse the query; settle the options of this search."""
        s = self.settings.search
        started = time.perf_counter()
        if not query or not query.strip():
            raise QueryError("empty query: type words to search, or a filter such as tag:name")
        warnings: list[str] = list(self.notices)
        if len(query) > MAX_QUERY_CHARS:
            warnings.append(f"query of {len(query)} characters cut to {MAX_QUERY_CHARS}")
            query = query[:MAX_QUERY_CHARS]
        today = self.today()
        parsed = parse_query(query, today)
        warnings.extend(parsed.warnings)
        has_reranker = self.reranker is not None
        return _Run(
            snap=snap,
            parsed=parsed,
            k=k or s.top_k,
            use_dense=dense and self.index.model_state != "off",
            two_pass=s.two_pass if two_pass is None else two_pass,
            rerank=(self.settings.rerank.enabled and has_reranker)
            if rerank is None
            else (rerank and has_reranker),
            cancelled=cancelled,
            started=started,
            budget=Budget(self.settings.llm.token_budget),
            warnings=warnings,
            today=today,
        )

    def _cached(self, key: tuple, run: _Run, record: bool) -> SearchResults | None:
        """A copy of the results of the same search on the same index version, if kept."""
        hit = self._cache.get(key)
        if hit is None:
            return None
        ms = (time.perf_counter() - run.started) * 1000
        out = replace(hit, timings_ms={"cache": ms, "total": (time.perf_counter() - run.started) * 1000})
        out.mode = replace(out.mode, cached=True)
        self._record(out, record)
        return out

    def _write_terms(self, run: _Run) -> None:
        """1. The query plus 3-5 search terms (LLM when configured, keywords otherwise)."""
        with run.timed("terms"):
            run.terms = self._terms_for(run, run.parsed.text)
            run.warnings.extend(run.terms.warnings)
        run.check()

    def _people(self, run: _Run) -> None:
        """Agent memory: the people the query names (their notes weigh `owner_weight` more) and the dialog."""
        s = self.settings.experimental
        owners, run.dialog = self._memory.get(run.snap)
        run.fusion = s.fusion if s.fusion != "auto" else ("score" if run.dialog.neighbours else "rrf")
        if run.fusion == "score":
            # Cosines count from the floor of unrelated texts, so the dense rankings reach down to it.
            # No dense feedback ranking: its cosines would count the query's meaning twice (on LoCoMo
            # it cost 0.026 recall@10 under score fusion; BENCHMARKS.md).
            run.threshold = min(s.dense_threshold, COS_FLOOR)
            if s.date_weight > 0 and run.dialog.days:
                run.spans = mentions(run.parsed.text)
        if s.owner_weight != 1.0:
            run.named = owners.named(run.parsed.text)
            run.favoured = owners.favoured(run.named)
        run.weight = owner_weights(
            source_weights(run.snap, self._weights), run.snap, run.favoured, s.owner_weight
        )

    def _embed_query(self, run: _Run) -> None:
        """The query vectors of every term (none when the model is off or unavailable)."""
        assert run.terms is not None
        if run.use_dense:
            with run.timed("embed_query"):
                run.qvecs = self._retriever.encode(run.terms.all_terms)
            if run.qvecs is None:
                run.warnings.append(f"embedding model {self.index.model_state}: BM25 only")
        run.qvec = run.qvecs.get(run.terms.all_terms[0]) if run.qvecs is not None else None
        run.check()

    def _first_pass(self, run: _Run) -> SearchResults:
        """2-4. Retrieve per term, fuse, aggregate to notes and build pass 1's results (knowledge first)."""
        s, terms, parsed = self.settings.experimental, run.terms, run.parsed
        assert terms is not None
        snap = run.snap
        run.allowed = self._retriever.allowed(snap, parsed)
        run.corrections = self._retriever.corrections(snap, parsed.text)
        version = snap.version
        stats = self._builder.stats(snap, run.qvecs is not None)
        entries, rankings, searched = self._knowledge_first(run)
        run.check()
        t = time.perf_counter()
        if entries is None:
            if not rankings:
                rankings = self._retriever.rankings(
                    snap,
                    terms,
                    run.qvecs,
                    run.allowed,
                    run.timings,
                    "",
                    corrections=run.corrections,
                    phrases=parsed.phrases,
                    threshold=run.threshold,
                    feedback=run.fusion != "score",
                    dialog=run.fusion == "score",
                )
            with run.timed("fusion"):
                entries = self._fuse(rankings, 1, run)
        ke1 = max(PASS1_ENTRIES, run.k) if run.two_pass else run.k
        if run.rerank:  # the reranker's gate pass looks past the page; the list is cut to k after it
            ke1 = max(ke1, s.rerank_pass1_candidates)
        pass1 = entries[:ke1]
        results = [self._builder.result(snap, e, parsed, kc=s.pass1_shards, qvec=run.qvec) for e in pass1]
        passes = [
            PassInfo(
                1,
                parsed.text,
                tuple(terms.all_terms),
                ke1,
                s.pass1_shards,
                len(entries),
                len(pass1),
                (time.perf_counter() - t) * 1000,
            )
        ]
        run.timings["pass1"] = passes[0].ms
        run.check()
        out = SearchResults(
            query=parsed.raw,
            search_terms_used=terms.all_terms,
            results=results,
            stats=stats,
            passes=passes,
            warnings=run.warnings,
            filters=parsed.filters_dict() if parsed.has_filters or parsed.recent is not None else {},
            early_return=run.early,
            searched_sources=searched,
            include_preferences=terms.include_preferences,
            include_n_minus_1=terms.include_n_minus_1,
            corrections=[
                {"word": c.word, "searched": list(c.candidates), "edits": c.distance} for c in run.corrections
            ],
        )
        out.trace.rankings = rankings
        if parsed.phrases and not any(r.retriever == "phrase" and r.items for r in rankings):
            quoted = ", ".join(f'"{p}"' for p in parsed.phrases)
            out.warnings.append(f"no exact match for {quoted}: ranked by its words")
        out.trace.entries = [(e.path, e.fused[0].score) for e in entries]
        out.trace.version = version
        out.stats.named_people = list(run.named)
        feedback = next((r for r in rankings if r.retriever == "feedback"), None)
        out.stats.feedback_from = list(feedback.sources) if feedback is not None else []
        return out

    def _knowledge_first(self, run: _Run) -> tuple[list[Entry] | None, list[Ranking], list[str]]:
        """When knowledge notes alone fill the page with high quality, stop there (entries, rankings, sources).

        One retrieval serves both: the knowledge rankings are the full rankings restricted to
        knowledge shards (ranks counted among those alone); the full rankings are returned for
        pass 1 otherwise.
        """
        s = self.settings.experimental
        if not s.knowledge_first:
            return None, [], ["all"]
        assert run.terms is not None
        with run.timed("knowledge_first"):
            facts = self._retriever.facts(run.snap)
            facts = facts if run.allowed is None else facts & run.allowed
            if not facts:
                return None, [], ["all"]
            rankings = self._retriever.rankings(
                run.snap,
                run.terms,
                run.qvecs,
                run.allowed,
                run.timings,
                "",
                corrections=run.corrections,
                phrases=run.parsed.phrases,
                threshold=run.threshold,
                feedback=run.fusion != "score",
                dialog=run.fusion == "score",
            )
            kb_rankings = [replace(r, items=tuple(it for it in r.items if it[0] in facts)) for r in rankings]
            kb_entries = self._fuse(kb_rankings, 1, run, dialog=False)
            # Judged on pass 1's page whatever the number of results asked, so k never changes the top.
            kb_results = [
                self._builder.result(run.snap, e, run.parsed, kc=s.pass1_shards, qvec=run.qvec)
                for e in kb_entries[:PASS1_ENTRIES]
            ]
            kb_quality = assess(kb_results, run.qvecs is not None)
            # The page is full when as many relevant knowledge notes as pass 1 would show were found.
            # A query that names a note outside the knowledge notes searches everything.
            named_elsewhere = any(
                r.retriever == "name" and any(nid not in facts for nid, _ in r.items) for r in rankings
            )
            if (
                kb_quality.score >= SUFFICIENT
                and kb_quality.factors["relevant_count"] >= min(run.k, PASS1_ENTRIES)
                and not named_elsewhere
            ):
                run.early = True
                return kb_entries, kb_rankings, ["fact"]
        return None, rankings, ["fact", "all"]

    def _analyse_and_refine(self, run: _Run, out: SearchResults) -> None:
        """5. Two-pass: analyse pass 1 (SUFFICIENT or REFINE: query), then search the refined query and merge."""
        if run.two_pass and run.early:
            out.analysis = AnalysisInfo(
                "SUFFICIENT",
                reason="knowledge notes answered with high quality (early return)",
                skipped="pass 2 skipped: knowledge-first early return",
            )
        elif run.two_pass:
            with run.timed("analysis"):
                # The analyser sees pass 1's page (ke), not the k results asked for: the number of
                # results requested must not change the refinement, hence the top 10.
                page = replace(out, results=out.results[:PASS1_ENTRIES])
                analysis = run.analysis = analyse(
                    self.analyser,
                    self.settings.experimental.analyser,
                    run.parsed.text,
                    page,
                    run.snap,
                    run.budget,
                )
            out.analysis = AnalysisInfo(
                analysis.decision,
                analysis.refined_query,
                analysis.reason,
                analysis.analyser,
                analysis.tokens_used,
            )
            run.check()
            refined = analysis.refined_query.strip() if analysis.decision == "REFINE" else ""
            if analysis.decision == "REFINE" and not refined:
                out.analysis = replace(out.analysis, skipped="pass 2 skipped: REFINE without a query")
            elif refined and repeats_query(refined, run.parsed.text):
                out.analysis = replace(
                    out.analysis,
                    skipped="pass 2 skipped: the refined query repeats the original (it would repeat pass 1)",
                )
            elif refined:
                self._second_pass(run, out, refined)
        run.check()

    def _second_pass(self, run: _Run, out: SearchResults, refined: str) -> None:
        """Pass 2 on the refined query (ke=PASS2_ENTRIES, kc=PASS2_SHARDS), merged below pass 1."""
        t = time.perf_counter()
        terms2 = self._terms_for(run, refined)
        out.warnings.extend(f"pass 2: {w}" for w in terms2.warnings)
        qvecs2 = self._retriever.encode(terms2.all_terms) if run.qvecs is not None else None
        run.check()
        snap = run.snap
        rankings2 = self._retriever.rankings(
            snap,
            terms2,
            qvecs2,
            run.allowed,
            run.timings,
            "pass2_",
            corrections=self._retriever.corrections(snap, refined),
            phrases=run.parsed.phrases,
            threshold=run.threshold,
            feedback=run.fusion != "score",
            dialog=run.fusion == "score",
        )
        entries2 = self._fuse(rankings2, 2, run)
        found2 = [
            self._builder.result(snap, e, run.parsed, kc=PASS2_SHARDS, qvec=run.qvec)
            for e in entries2[:PASS2_ENTRIES]
        ]
        top1 = max((r.rrf_score for r in out.results), default=0.0)
        top2 = max((r.rrf_score for r in found2), default=0.0)
        # Pass 2 merges into pass 1's page (ke entries); pass-1 entries past the page follow. So the
        # merged top does not depend on how many results were asked for.
        page, rest = out.results[:PASS1_ENTRIES], out.results[PASS1_ENTRIES:]
        merged, added = merge_passes(page, found2, top1 / top2 if top1 > 0 and top2 > 0 else 1.0)
        in_merged = {r.document_path for r in merged}
        out.results = merged + [r for r in rest if r.document_path not in in_merged]
        out.trace.rankings_pass2 = rankings2
        out.passes.append(
            PassInfo(
                2,
                refined,
                tuple(terms2.all_terms),
                PASS2_ENTRIES,
                PASS2_SHARDS,
                len(found2),
                added,
                (time.perf_counter() - t) * 1000,
            )
        )
        run.timings["pass2"] = out.passes[-1].ms
        if not added and out.analysis is not None:
            out.analysis = replace(out.analysis, pass2="pass 2 found no entry pass 1 had not")

    def _always_include(self, run: _Run, out: SearchResults) -> None:
        """Preferences, the last turn and named notes, appended after the passes (so they stay at the end)."""
        if not self.settings.search.always_include:
            return
        assert run.terms is not None
        with run.timed("always_include"):
            out.results = out.results[: max(run.k, 0)] if not run.rerank else out.results
            always_include(
                out.results,
                run.parsed,
                run.terms,
                run.snap,
                lambda entry: self._builder.result(run.snap, entry, run.parsed, kc=1),
            )

    def _rerank(self, run: _Run, out: SearchResults) -> None:
        """6. Rerank the searched results (always-include entries keep their place at the end)."""
        if run.rerank and self.reranker is not None:
            with run.timed("rerank"):
                searched_part = [r for r in out.results if r.source == "search"]
                appended = [r for r in out.results if r.source != "search"]
                reranked, meta = self.reranker.rerank(run.parsed.text, searched_part, query_vector=run.qvec)
                out.results = reranked + appended
                out.rerank = meta
        else:
            out.rerank = RerankInfo(applied=False)
        run.check()

    def _assess(self, run: _Run, out: SearchResults) -> None:
        """7. Cut to k, then the quality of what the search found."""
        searched_results = [r for r in out.results if r.source == "search"][: run.k]
        if run.corrections:
            # A misspelt word counts as the word it was corrected to in the relevance shown and judged
            # (after ranking: the passes and the reranker read relevance as it was).
            searched_results = [
                self._builder.with_corrections(run.snap, r, run.parsed, run.qvec, run.corrections)
                for r in searched_results
            ]
        out.results = searched_results + [r for r in out.results if r.source != "search"]
        with run.timed("quality"):
            # A query that names people is judged on their notes: someone else's matches do not answer it.
            judged = (
                [r for r in searched_results if r.document_path in run.favoured]
                if run.favoured
                else searched_results
            )
            snap = run.snap
            owners = self._memory.get(snap)[0]
            rankings = out.trace.rankings
            if run.named and run.fusion == "score" and self.settings.experimental.dialog_words > 0:
                # Whose words match is judged on each turn's own words, not the neighbours' it also holds.
                assert run.terms is not None
                rankings = [
                    self._retriever.own_words(snap, run.terms.all_terms[0], run.allowed, run.corrections)
                ]
            share = named_match(rankings, snap, owners, run.named, TOP_N)
            words = query_words(run.parsed.text)
            covered = named_coverage(judged, snap, owners, run.named, words, TOP_N)
            elsewhere = other_coverage(out.trace.entries, snap, owners, run.named, words, OTHERS_N)
            out.quality = assess(
                judged,
                run.qvecs is not None,
                share,
                covered,
                elsewhere,
                named=bool(run.named),
                conversation=run.fusion == "score",
            )
        out.stats.final_results = len(out.results)

    def _finish(self, run: _Run, out: SearchResults, key: tuple, record: bool) -> SearchResults:
        """Mode and timings; record the search in the history and keep it in the cache."""
        assert run.terms is not None
        analysis = run.analysis
        out.mode = SearchMode(
            dense=run.qvecs is not None,
            model_state=self.index.model_state,
            runtime=self.index.runtime,
            terms=run.terms.source,
            analyser=analysis.analyser if analysis else None,
            llm_tokens=run.budget.used,
            two_pass=run.two_pass,
            rerank=bool(run.rerank),
        )
        run.timings["total"] = (time.perf_counter() - run.started) * 1000
        out.timings_ms = run.timings
        self._record(out, record)
        # A search that fell back from the LLM is not kept: the next one may reach it again.
        fell_back = (
            "->" in run.terms.source
            or (analysis is not None and "->" in analysis.analyser)
            or any(w.startswith("pass 2: LLM") for w in out.warnings)
        )
        if not fell_back:
            self._cache.put(key, out)
        return out

    def _browse(self, run: _Run) -> SearchResults:
        """A filter-only query: the notes the filters allow, in path order (no ranking); newest first under
        a date filter or a recency preference."""
        parsed, k, snap = run.parsed, run.k, run.snap
        allowed = self._retriever.allowed(snap, parsed)
        timely = bool(parsed.after or parsed.before or parsed.on) or self._half_life(run) > 0
        if allowed is None:  # `recent:` alone lists every note, newest first
            allowed = set(snap.shards) if timely else set()
        paths = sorted({snap.shards[n].path for n in allowed})
        if timely:  # newest first (undated notes last), then by path
            dates = self._retriever.dates
            paths.sort(key=lambda p: -(dates.get(p) or (_dt.date.min,))[0].toordinal())
        results = []
        for path in paths[:k]:
            ids = [n for n in snap.shard_ids(path) if n in allowed]
            fused = [Fused(n, 0.0, (), 0) for n in ids]
            results.append(self._builder.result(snap, Entry(path, fused, 1), parsed, kc=SHARDS_PER_ENTRY))
        stats = self._builder.stats(snap, False)
        out = SearchResults(
            query=parsed.raw,
            search_terms_used=[],
            results=results,
            stats=stats,
            filters=parsed.filters_dict(),
            mode=SearchMode(browse=True),
            searched_sources=["all"],
        )
        always_include(
            out.results,
            parsed,
            SearchTerms(query="", terms=(), source="keywords"),
            snap,
            lambda entry: self._builder.result(snap, entry, parsed, kc=1),
        )
        stats.final_results = len(out.results)
        out.warnings = run.warnings
        out.timings_ms = {"total": (time.perf_counter() - run.started) * 1000}
        return out

    # -- helpers -----------------------------------------------------------------------------
    def _stage(self, run: _Run, name: str, out: SearchResults) -> None:
        """Tell the caller's hook that stage `name` is done."""
        if run.on_stage is not None:
            run.on_stage(name, out)

    def _terms_for(self, run: _Run, text: str) -> SearchTerms:
        return write_terms(
            text,
            self.term_writer,
            self.settings.search.max_terms,
            run.budget,
            snapshot=run.snap,
        )

    def _fuse(self, rankings: list[Ranking], pass_: int, run: _Run, dialog: bool = True) -> list[Entry]:
        """Weighted RRF (or score fusion) over `rankings`, turns lifted by date, aggregated to notes."""
        s = self.settings.experimental
        snap = run.snap
        weight = run.weight or source_weights(snap, self._weights)
        if run.fusion == "score":
            fused = score_fusion(rankings, COS_FLOOR, weight)
        else:
            fused = rrf(rankings, s.rrf_k, weight)
        if dialog and run.dialog is not None and run.fusion == "score":
            fused = lift_by_date(fused, snap, run.dialog, run.spans, s.date_weight)
        shards = snap.shards

        def path_of(node_id: str) -> str | None:
            shard = shards.get(node_id)
            return shard.path if shard is not None else None

        entries = aggregate(fused, path_of, pass_, run.fusion)
        return self._prefer_recent(entries, run)

    def _half_life(self, run: _Run) -> float:
        """The recency half-life of this search in days (the query's `recent:`, else the setting; 0: off)."""
        return (
            run.parsed.recent
            if run.parsed.recent is not None
            else self.settings.search.recency_half_life_days
        )

    def _prefer_recent(self, entries: list[Entry], run: _Run) -> list[Entry]:
        """Under a recency preference, each entry's score times its recency factor, re-sorted (stable)."""
        half_life = self._half_life(run)
        if half_life <= 0:
            return entries
        for e in entries:
            found = self._retriever.dates.get(e.path)
            e.recency = recency_factor(
                found[0] if found is not None else None,
                run.today,
                half_life,
                self.settings.experimental.recency_weight,
            )
        return sorted(entries, key=lambda e: -e.score)

    def _record(self, out: SearchResults, history: bool = True) -> None:
        """Count pass 1's matches; with `history`, keep the search in the history and advise from it.

        A search not kept in the history (a served one-shot search, an explanation) gets the
        advisory a first search would: none.
        """
        rankings = out.trace.rankings
        out.stats.bm25_matches = len({n for r in rankings if r.retriever == "bm25" for n, _ in r.items})
        out.stats.embedding_matches = len({n for r in rankings if r.retriever == "dense" for n, _ in r.items})
        if not history:
            return
        searched = [r for r in out.results if r.source == "search"]
        ids = [r.document_path for r in searched]
        top = max((r.relevance for r in searched[:3]), default=0.0)
        out.advisory = diminishing_returns(self.history, out.query, ids, top)
        self.history.append({"query": out.query, "ids": ids, "top": top, "time": time.time()})
        del self.history[:-50]
