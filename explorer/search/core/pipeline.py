"""SearchPipeline: the one entry point that answers a query, stage by stage, with timings and explanations.

Each stage lives in its own module; `SearchPipeline.search` runs them in order:

    terms (search/core/terms.py)  ->  query vectors + retrieve (search/core/retrieve.py)
      ->  fuse (search/fusion.py) and build results (search/core/results.py)   [pass 1, knowledge first;
          the passes in search/core/passes.py]
      ->  analyse and pass 2 (search/core/twopass.py)  ->  always-include (search/core/always.py)
      ->  rerank (search/rerank/)  ->  quality (search/quality.py)

The stages record what they saw in `SearchResults.trace` as they run. Every stage reads one
`Snapshot` of the index (explorer.index.backend), taken when the search starts: a change batch
applied meanwhile shows in the next search, never in half of this one.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from explorer.config import Settings
from explorer.index.backend import IndexBackend, ModelState, Scope, ScopeError, Snapshot
from explorer.search.changes import NoteChanges
from explorer.search.core.always import always_include, latest_turn
from explorer.search.core.llm import Budget
from explorer.search.core.notefilters import day_bounds
from explorer.search.core.passes import Conversation, Passes, Run, SearchCancelled, Stage
from explorer.search.core.query import MAX_QUERY_FILTERS, parse_query
from explorer.search.core.results import ResultBuilder, make_context_shard
from explorer.search.core.retrieve import Retriever
from explorer.search.core.retrievers.base import source_weights
from explorer.search.core.retrievers.names import name_likeness, names_note
from explorer.search.core.terms import SearchTerms, write_terms
from explorer.search.core.twopass import PASS1_ENTRIES, Analysis, analyse, repeats_query
from explorer.search.fusion import Entry, Fused
from explorer.search.memory.signals import (
    MemoryCache,
    named_coverage,
    named_match,
    other_coverage,
    owner_weights,
)
from explorer.search.memory.turn_vectors import turn_text
from explorer.search.memory.when import mentions
from explorer.search.quality import COS_FLOOR, OTHERS_N, TOP_N, assess, diminishing_returns
from explorer.search.schema import AnalysisInfo, RerankInfo, SearchMode, SearchResult, SearchResults
from explorer.text.dates import TimeFilters
from explorer.text.lru import LRUCache
from explorer.vault.model import display_title
from explorer.vault.windows import query_words

__all__ = ["QueryError", "SearchCancelled", "SearchPipeline", "latest_turn", "make_context_shard"]

MAX_QUERY_CHARS = 2000
#: Context shards per entry of a search with no ranking (filters only).
SHARDS_PER_ENTRY = 3


class QueryError(ValueError):
    """The query cannot be searched; the message says why and what to do."""


def too_many_filters(count: int) -> str:
    """The message for a query with `count` filters, over MAX_QUERY_FILTERS."""
    return f"the query has {count:,} filters; a search takes at most {MAX_QUERY_FILTERS}: keep the ones that matter"


class Analyser(Protocol):
    """Decides after pass 1 whether a second pass is needed."""

    def __call__(self, query: str, results: SearchResults) -> Analysis: ...


class Reranker(Protocol):
    """Reorders fused results (see explorer.search.rerank)."""

    def rerank(
        self,
        query: str,
        results: list[SearchResult],
        query_vector: np.ndarray | None = None,
        snapshot: Snapshot | None = None,
    ) -> tuple[list[SearchResult], RerankInfo]: ...


class SearchPipeline:
    """Answers queries against one index backend, each search against one snapshot of it.

    Steps (each a method below or of its `Passes`, timed in `timings_ms`, cancellation checked between them):
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
        self._passes = Passes(self.settings, self._retriever, self._builder, self._weights, self._terms_for)
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

    def warm_turns(self, cancelled: Callable[[], bool] | None = None) -> int:
        """Run the turns of a vault of conversations through the model for the turn model's token vectors.

        The engine session calls this from its embedding loop once the vectors are made, so the first
        searches of a session find the turns' token vectors kept (explorer.search.memory.turn_vectors) instead of
        making them. A search reads the same values either way. Returns how many texts were made.
        """
        if not self.settings.experimental.turn_rescore:
            return 0
        with self.index.snapshot() as snap:
            owners, dialog = self._memory.get(snap)
            shards = snap.shards
            paths = list(dialog.neighbours)[: self._retriever.tokens.limit]  # no more than are kept
            texts = [
                turn_text(shard.text, owners.owner_of.get(path))
                for path in paths
                for node_id in snap.shard_ids(path)
                if (shard := shards.get(node_id)) is not None
            ]
        return self._retriever.warm_tokens(texts, cancelled)

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
        lexical_stage: bool = False,
        correct: bool = True,
        when: TimeFilters | None = None,
    ) -> SearchResults:
        """Answer `query`. Raises QueryError for an empty query, SearchCancelled when `cancelled()`.

        `when` adds date filters and a recency preference given apart from the query's text (an
        agent's tool arguments): they count as the query's own operators, and the query is echoed
        with them, but they are not cut with a query over MAX_QUERY_CHARS.

        A word of the query that is neither in the vault nor a common word of its languages is
        searched as the vault's closest words (explorer.search.core.typos; the results' `corrections`
        say so); with `correct` False every word is searched as typed.

        The whole search reads one snapshot of the index. `on_stage(name, results)` is called in
        this thread after pass 1 (`"pass1"`, its results) and after quality (`"quality"`). With
        `lexical_stage`, it is first called with `"lexical"`: the results of BM25 alone in one pass,
        from the same search terms, before the query is embedded (a first answer to show while the
        rest runs; not when the search itself is no more than that). With
        `record` False, the search is left out of the history the diminishing-returns advice reads.
        """
        with self.index.snapshot() as snap:
            started = time.perf_counter()
            run = self._begin(snap, query, k, two_pass, rerank, cancelled, correct, when)
            use_dense = dense and self.index.model_state is not ModelState.OFF
            # An engine backend's answers move without a new version (another writer, the engine gone
            # or back): what moves them is part of the key, and how the view answers is said.
            fresh, said = snap.freshness()
            if said:
                run.warnings.insert(0, said)
            own_vault = self._widen(run) if run.parsed.vaults else True
            key = (
                run.parsed.raw,
                run.k,
                use_dense,
                run.two_pass,
                run.rerank,
                snap.version,
                fresh,
                self.index.model_state,
                run.today,
                correct,
            )
            # Other vaults change without this index's version: a team search is never answered from the cache.
            hit = None if run.parsed.vaults else self._cached(key, started, record)
            if hit is not None:
                return hit
            if not run.parsed.text:
                return self._browse(run, started)
            self._write_terms(run)
            self._people(run)
            self._filters(run, own_vault)
            if lexical_stage and (use_dense or run.two_pass or run.rerank):
                _stage(on_stage, "lexical", self._lexical(run, started))
            self._embed_query(run, use_dense)
            out = self._passes.first_pass(run)
            _stage(on_stage, "pass1", out)
            analysis = self._analyse_and_refine(run, out)
            self._always_include(run, out)
            self._rerank(run, out)
            self._assess(run, out)
            if not said:  # the view met an engine fault during this search and answered locally from then on
                said = snap.freshness()[1]
                if said and said not in out.warnings:
                    out.warnings.insert(0, said)
            _stage(on_stage, "quality", out)
            return self._finish(run, out, key, record, started, analysis)

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
        two_pass: bool | None,
        rerank: bool | None,
        cancelled: Callable[[], bool] | None,
        correct: bool,
        when: TimeFilters | None = None,
    ) -> Run:
        """Check and parse the query (with `when` joined to its filters); settle the options of this search."""
        s = self.settings.search
        operators = when.operators() if when is not None else ""
        if (not query or not query.strip()) and not operators:
            raise QueryError("empty query: type words to search, or a filter such as tag:name")
        warnings: list[str] = list(self.notices)
        if len(query) > MAX_QUERY_CHARS:
            warnings.append(f"query of {len(query)} characters cut to {MAX_QUERY_CHARS}")
            query = query[:MAX_QUERY_CHARS]
        today = self.today()
        parsed = parse_query(query, today)
        if when is not None and operators:
            parsed = replace(
                parsed,
                raw=f"{parsed.raw} {operators}".strip(),
                after=parsed.after + when.after,
                before=parsed.before + when.before,
                on=parsed.on + when.on,
                recent=parsed.recent if when.recent is None else when.recent,
            )
        if parsed.filter_count > MAX_QUERY_FILTERS:
            raise QueryError(too_many_filters(parsed.filter_count))
        warnings.extend(parsed.warnings)
        has_reranker = self.reranker is not None
        return Run(
            snap=snap,
            parsed=parsed,
            k=k or s.top_k,
            two_pass=s.two_pass if two_pass is None else two_pass,
            rerank=(self.settings.rerank.enabled and has_reranker)
            if rerank is None
            else (rerank and has_reranker),
            correct=correct,
            cancelled=cancelled,
            budget=Budget(self.settings.llm.token_budget),
            warnings=warnings,
            today=today,
        )

    def _widen(self, run: Run) -> bool:
        """`vault:name` / `vault:*`: the search reads the vaults named (a QueryError when the backend has no such).

        Returns whether this vault is among them (False when `vault:` names only other vaults)."""
        p = run.parsed
        props = p.properties
        scope = Scope(
            p.vaults,
            p.tags,
            p.paths,
            p.files,
            p.sections,
            p.excluded,
            day_bounds(p),
            # Other vaults' notes pass [property:value] as this vault's do (explorer.search.core.notefilters).
            (lambda front: all(f.matches(dict(front)) != f.negated for f in props)) if props else None,
        )
        base = run.snap
        try:
            run.snap, note, own_vault = base.widen(scope)
        except ScopeError as exc:
            raise QueryError(str(exc)) from None
        if note:
            run.warnings.append(note)
        return own_vault

    def _cached(self, key: tuple, started: float, record: bool) -> SearchResults | None:
        """A copy of the results of the same search on the same index version, if kept."""
        hit = self._cache.get(key)
        if hit is None:
            return None
        ms = (time.perf_counter() - started) * 1000
        out = replace(hit, timings_ms={"cache": ms, "total": (time.perf_counter() - started) * 1000})
        out.mode = replace(out.mode, cached=True)
        self._record(out, record)
        return out

    def _write_terms(self, run: Run) -> None:
        """1. The query plus 3-5 search terms (LLM when configured, keywords otherwise)."""
        with run.timed("terms"):
            run.terms = self._terms_for(run, run.parsed.text)
            run.warnings.extend(run.terms.warnings)
        run.check()

    def _people(self, run: Run) -> None:
        """Agent memory: the people the query names (their notes weigh `owner_weight` more) and the dialog."""
        s = self.settings.experimental
        owners, dialog = self._memory.get(run.snap)
        fusion = s.fusion if s.fusion != "auto" else ("score" if dialog.neighbours else "rrf")
        threshold, spans = None, []
        if fusion == "score":
            # Cosines count from the floor of unrelated texts, so the dense rankings reach down to it.
            # No dense feedback ranking: its cosines would count the query's meaning twice (on LoCoMo
            # it cost 0.026 recall@10 under score fusion; BENCHMARKS.md#agent-memory-locomo).
            threshold = min(s.dense_threshold, COS_FLOOR)
            if s.date_weight > 0 and dialog.days:
                spans = mentions(run.parsed.text)
        named: list[str] = []
        favoured: frozenset[str] = frozenset()
        if s.owner_weight != 1.0:
            named = owners.named(run.parsed.text)
            favoured = owners.favoured(named)
        weight = owner_weights(source_weights(run.snap, self._weights), run.snap, favoured, s.owner_weight)
        run.conversation = Conversation(
            fusion=fusion,
            threshold=threshold,
            weight=weight,
            dialog=dialog,
            spans=spans,
            owners=owners,
            named=named,
            favoured=favoured,
        )

    def _filters(self, run: Run, own_vault: bool) -> None:
        """The shards the filters allow and the corrections of misspelt words, found once for every pass."""
        # `vault:other` alone: this vault's shards are left out of every ranking.
        run.allowed = self._retriever.allowed(run.snap, run.parsed) if own_vault else set()
        run.corrections = self._retriever.corrections(run.snap, run.parsed.text) if run.correct else []

    def _embed_query(self, run: Run, use_dense: bool) -> None:
        """The query vectors of every term (none when the model is off or unavailable)."""
        assert run.terms is not None
        if use_dense:
            with run.timed("embed_query"):
                run.qvecs = self._retriever.encode(run.terms.all_terms)
            if run.qvecs is None:
                run.warnings.append(f"embedding model {self.index.model_state}: BM25 only")
        run.qvec = run.qvecs.get(run.terms.all_terms[0]) if run.qvecs is not None else None
        run.check()

    def _analyse_and_refine(self, run: Run, out: SearchResults) -> Analysis | None:
        """5. Two-pass: analyse pass 1 (SUFFICIENT or REFINE: query), then search the refined query and merge.

        Returns the analysis (None when there was none)."""
        analysis = None
        if run.two_pass and out.early_return:
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
                analysis = analyse(
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
                self._passes.second_pass(run, out, refined)
        run.check()
        return analysis

    def _always_include(self, run: Run, out: SearchResults) -> None:
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

    def _rerank(self, run: Run, out: SearchResults) -> None:
        """6. Rerank the searched results (always-include entries keep their place at the end)."""
        if run.rerank and self.reranker is not None:
            with run.timed("rerank"):
                searched_part = [r for r in out.results if r.source == "search"]
                appended = [r for r in out.results if r.source != "search"]
                reranked, meta = self.reranker.rerank(
                    run.parsed.text, searched_part, query_vector=run.qvec, snapshot=run.snap
                )
                out.results = reranked + appended
                out.rerank = meta
        else:
            out.rerank = RerankInfo(applied=False)
        run.check()

    def _assess(self, run: Run, out: SearchResults) -> None:
        """7. Cut to k, then the quality of what the search found."""
        searched_results = [r for r in out.results if r.source == "search"][: run.k]
        if run.corrections:
            # A misspelt word counts as the word it was corrected to in the relevance shown and judged
            # (after ranking: the passes and the reranker read relevance as it was).
            searched_results = [
                self._builder.with_corrections(run.snap, r, run.parsed, run.qvec, run.corrections)
                for r in searched_results
            ]
        out.results = [
            _shown_title(run.snap, r)
            for r in searched_results + [r for r in out.results if r.source != "search"]
        ]
        with run.timed("quality"):
            # A query that names people is judged on their notes: someone else's matches do not answer it.
            c = run.conversation
            judged = (
                [r for r in searched_results if r.document_path in c.favoured]
                if c.favoured
                else searched_results
            )
            snap = run.snap
            owners = self._memory.get(snap)[0]
            rankings = out.trace.rankings
            if c.named and c.scored and self.settings.experimental.dialog_words > 0:
                # Whose words match is judged on each turn's own words, not the neighbours' it also holds.
                assert run.terms is not None
                rankings = [
                    self._retriever.own_words(snap, run.terms.all_terms[0], run.allowed, run.corrections)
                ]
            share = named_match(rankings, snap, owners, c.named, TOP_N)
            words = query_words(run.parsed.text)
            covered = named_coverage(judged, snap, owners, c.named, words, TOP_N)
            elsewhere = other_coverage(out.trace.entries, snap, owners, c.named, words, OTHERS_N)
            first = snap.notes.get(searched_results[0].document_path) if searched_results else None
            out.quality = assess(
                judged,
                run.qvecs is not None,
                share,
                covered,
                elsewhere,
                named=bool(c.named),
                conversation=c.scored,
                first_named=first is not None and names_note(run.parsed.text, first),
                first_likeness=name_likeness(run.parsed.text, first) if first is not None else 0.0,
            )
        out.stats.final_results = len(out.results)

    def _lexical(self, run: Run, started: float) -> SearchResults:
        """Pass 1 with BM25 alone (no vectors, no pass 2, no rerank), from the search's own terms."""
        lex = replace(
            run,
            two_pass=False,
            rerank=False,
            timings=dict(run.timings),
            warnings=list(run.warnings),
        )
        out = self._passes.first_pass(lex)
        self._always_include(lex, out)
        self._rerank(lex, out)
        self._assess(lex, out)
        assert lex.terms is not None
        out.mode = SearchMode(
            model_state=self.index.model_state,
            runtime=self.index.runtime,
            terms=lex.terms.source,
            llm_tokens=lex.budget.used,
        )
        lex.timings["total"] = (time.perf_counter() - started) * 1000
        out.timings_ms = lex.timings
        return out

    def _finish(
        self,
        run: Run,
        out: SearchResults,
        key: tuple,
        record: bool,
        started: float,
        analysis: Analysis | None,
    ) -> SearchResults:
        """Mode and timings; record the search in the history and keep it in the cache."""
        assert run.terms is not None
        out.mode = SearchMode(
            dense=run.qvecs is not None,
            model_state=self.index.model_state.value,
            runtime=self.index.runtime,
            terms=run.terms.source,
            analyser=analysis.analyser if analysis else None,
            llm_tokens=run.budget.used,
            two_pass=run.two_pass,
            rerank=bool(run.rerank),
        )
        run.timings["total"] = (time.perf_counter() - started) * 1000
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

    def _browse(self, run: Run, started: float) -> SearchResults:
        """A filter-only query: the notes the filters allow, in path order (no ranking); newest first under
        a date filter or a recency preference."""
        parsed, k, snap = run.parsed, run.k, run.snap
        allowed = self._retriever.allowed(snap, parsed)
        timely = bool(parsed.after or parsed.before or parsed.on) or self._passes.half_life(run) > 0
        if allowed is None:  # `recent:` alone lists every note, newest first
            allowed = set(snap.shards) if timely else set()
        paths = sorted({snap.shards[n].path for n in allowed})
        if timely:  # newest first (undated notes last), then by path
            dates = self._retriever.dates
            paths.sort(key=lambda p: -(dates.get(snap, p) or (_dt.date.min,))[0].toordinal())
        results = []
        snap.prefetch(paths[:k])
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
        out.timings_ms = {"total": (time.perf_counter() - started) * 1000}
        return out

    # -- helpers -----------------------------------------------------------------------------
    def _terms_for(self, run: Run, text: str) -> SearchTerms:
        return write_terms(
            text,
            self.term_writer,
            self.settings.search.max_terms,
            run.budget,
            snapshot=run.snap,
        )

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


def _stage(on_stage: Stage | None, name: str, out: SearchResults) -> None:
    """Tell the caller's hook that stage `name` is done."""
    if on_stage is not None:
        on_stage(name, out)


def _shown_title(snap: Snapshot, result: SearchResult) -> SearchResult:
    """`result` titled as a person reads it (`display_title`: a conversation turn by who said what
    when, not by its file name `context`). Done after ranking: the reranker reads the note's title."""
    note = snap.notes.get(result.document_path)
    title = display_title(note) if note is not None else result.title
    return result if title == result.title else replace(result, title=title)
