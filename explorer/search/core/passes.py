"""The retrieval passes of one search, and the state (`Run`) its stages share.

`SearchPipeline` (explorer.search.core.pipeline) settles a search's options and runs its stages in order;
`Passes` holds the ones that retrieve: pass 1 (knowledge notes first), pass 2 on a refined query,
and the fusion both read (weighted RRF or score fusion, turns lifted by date, recent notes preferred).
Each reads the one `Snapshot` of the index the search took when it started.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np

from explorer.config import Settings
from explorer.index.backend import Snapshot
from explorer.search.core.llm import Budget
from explorer.search.core.notefilters import recency_factor
from explorer.search.core.query import ParsedQuery
from explorer.search.core.results import ResultBuilder
from explorer.search.core.retrieve import Retriever
from explorer.search.core.retrievers.base import source_weights
from explorer.search.core.terms import SearchTerms
from explorer.search.core.twopass import PASS1_ENTRIES, PASS2_ENTRIES, PASS2_SHARDS, merge_passes
from explorer.search.core.typos import Correction
from explorer.search.fusion import Entry, aggregate, rrf, score_fusion
from explorer.search.memory.rescore import rescore_turns, skips_rescore
from explorer.search.memory.signals import Dialog, Owners, lift_answers, lift_by_date
from explorer.search.memory.when import Span
from explorer.search.quality import COS_FLOOR, SUFFICIENT, assess
from explorer.search.schema import PassInfo, Ranking, SearchResults

__all__ = ["Conversation", "Passes", "Run", "SearchCancelled", "Stage"]


class SearchCancelled(Exception):
    """A newer search replaced this one."""


Stage = Callable[[str, SearchResults], None]
"""A hook called after a stage (its name, the results so far), in the searching thread."""


@dataclass(frozen=True)
class Conversation:
    """What conversation memory settles for one search (`SearchPipeline._people`), read where it fuses
    and where its quality is judged: how the rankings are fused and whose notes weigh more."""

    fusion: str = "rrf"
    """`rrf` or `score` (experimental.fusion, `auto` settled by the vault: score with conversation turns)."""
    threshold: float | None = None
    """The dense rankings' cosine floor (None: experimental.dense_threshold)."""
    weight: Callable[[str], float] | None = None
    """The fusion's per-shard weight for this search."""
    dialog: Dialog | None = None
    """Adjacent conversation turns of the index version searched."""
    spans: list[Span] = field(default_factory=list)
    """The days the query names (explorer.search.memory.when), read in conversation-turn vaults only."""
    owners: Owners | None = None
    """Owners of the notes of the index version searched (explorer.search.memory.signals)."""
    named: list[str] = field(default_factory=list)
    """People of the vault the query names (folded owner names)."""
    favoured: frozenset[str] = frozenset()
    """Paths of their notes."""

    @property
    def scored(self) -> bool:
        """Score fusion (conversation turns): the dialog read, no dense feedback ranking."""
        return self.fusion == "score"


@dataclass
class Run:
    """One search in progress: what it was asked and what its stages produced so far that later ones read.

    What one stage alone reads stays with it (`SearchPipeline.search` keeps its options, the analysis
    and the hook as locals).
    """

    snap: Snapshot
    """The index as this search reads it, from its first stage to its last."""
    parsed: ParsedQuery
    k: int
    two_pass: bool
    rerank: bool
    correct: bool
    """Search a word missing from the vault as its closest vault words (False: as typed)."""
    cancelled: Callable[[], bool] | None
    budget: Budget
    warnings: list[str]
    today: _dt.date
    """The date relative dates and recency were read against."""
    timings: dict[str, float] = field(default_factory=dict)
    terms: SearchTerms | None = None
    qvecs: dict[str, np.ndarray] | None = None
    qvec: np.ndarray | None = None
    allowed: set[str] | None = None
    """node_ids the query's filters allow (None: all), found once for every pass."""
    corrections: list[Correction] = field(default_factory=list)
    conversation: Conversation = field(default_factory=Conversation)
    """How it fuses and whose notes weigh more (settled by conversation memory)."""

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


class Passes:
    """Pass 1 and pass 2 of a search: per-term rankings, fused, aggregated to notes, built to results."""

    def __init__(
        self,
        settings: Settings,
        retriever: Retriever,
        builder: ResultBuilder,
        weights: dict[str, float],
        terms_for: Callable[[Run, str], SearchTerms],
    ) -> None:
        self.settings = settings
        self._retriever = retriever
        self._builder = builder
        self._weights = weights
        self._terms_for = terms_for
        """Writes the search terms of a text (the pipeline's term writer, read at each call)."""

    def first_pass(self, run: Run) -> SearchResults:
        """2-4. Retrieve per term, fuse, aggregate to notes and build pass 1's results (knowledge first)."""
        s, terms, parsed = self.settings.experimental, run.terms, run.parsed
        assert terms is not None
        snap = run.snap
        version = snap.version
        stats = self._builder.stats(snap, run.qvecs is not None)
        entries, rankings, searched = self.knowledge_first(run)
        early = entries is not None
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
                    threshold=run.conversation.threshold,
                    feedback=not run.conversation.scored,
                    dialog=run.conversation.scored,
                )
            with run.timed("fusion"):
                entries = self.fuse(rankings, 1, run)
        ke1 = max(PASS1_ENTRIES, run.k) if run.two_pass else run.k
        if run.rerank:  # the reranker's gate pass looks past the page; the list is cut to k after it
            ke1 = max(ke1, s.rerank_pass1_candidates)
        pass1 = entries[:ke1]
        results = self._builder.results(snap, pass1, parsed, kc=s.pass1_shards, qvec=run.qvec)
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
            early_return=early,
            searched_sources=searched,
            include_preferences=terms.include_preferences,
            include_n_minus_1=terms.include_n_minus_1,
            corrections=[
                {"word": c.word, "searched": list(c.candidates), "shown": list(c.shown), "edits": c.distance}
                for c in run.corrections
            ],
        )
        out.trace.rankings = rankings
        if parsed.phrases and not any(r.retriever == "phrase" and r.items for r in rankings):
            quoted = ", ".join(f'"{p}"' for p in parsed.phrases)
            out.warnings.append(f"no exact match for {quoted}: ranked by its words")
        out.trace.entries = [(e.path, e.fused[0].score) for e in entries]
        out.trace.version = version
        out.stats.named_people = list(run.conversation.named)
        feedback = next((r for r in rankings if r.retriever == "feedback"), None)
        out.stats.feedback_from = list(feedback.sources) if feedback is not None else []
        return out

    def knowledge_first(self, run: Run) -> tuple[list[Entry] | None, list[Ranking], list[str]]:
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
                threshold=run.conversation.threshold,
                feedback=not run.conversation.scored,
                dialog=run.conversation.scored,
            )
            kb_rankings = [replace(r, items=tuple(it for it in r.items if it[0] in facts)) for r in rankings]
            kb_entries = self.fuse(kb_rankings, 1, run, dialog=False)
            # Judged on pass 1's page whatever the number of results asked, so k never changes the top.
            # Judged only: pass 1 builds the results it shows (passages, highlights) itself.
            kb_results = self._builder.judged(
                run.snap, kb_entries[:PASS1_ENTRIES], run.parsed, kc=s.pass1_shards, qvec=run.qvec
            )
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
                return kb_entries, kb_rankings, ["fact"]
        return None, rankings, ["fact", "all"]

    def second_pass(self, run: Run, out: SearchResults, refined: str) -> None:
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
            corrections=self._retriever.corrections(snap, refined) if run.correct else [],
            phrases=run.parsed.phrases,
            threshold=run.conversation.threshold,
            feedback=not run.conversation.scored,
            dialog=run.conversation.scored,
        )
        entries2 = self.fuse(rankings2, 2, run)
        found2 = self._builder.results(
            snap, entries2[:PASS2_ENTRIES], run.parsed, kc=PASS2_SHARDS, qvec=run.qvec
        )
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

    def fuse(self, rankings: list[Ranking], pass_: int, run: Run, dialog: bool = True) -> list[Entry]:
        """Weighted RRF (or score fusion) over `rankings`, turns lifted by date and replies to questions, aggregated to notes."""
        s = self.settings.experimental
        snap, c = run.snap, run.conversation
        weight = c.weight or source_weights(snap, self._weights)
        if c.fusion == "score":
            fused = score_fusion(rankings, COS_FLOOR, weight)
        else:
            fused = rrf(rankings, s.rrf_k, weight)
        if dialog and c.dialog is not None and c.fusion == "score":
            fused = lift_by_date(fused, snap, c.dialog, c.spans, s.date_weight)
            fused = lift_answers(fused, snap, c.dialog, c.favoured, s.answer_weight, s.asking_discount)
            # (recall) conversation turns: the first ones re-ordered by the turn model, but for "when" questions
            if (
                s.turn_rescore
                and c.owners is not None
                and c.dialog.neighbours
                and not skips_rescore(run.parsed.text)
            ):
                # only with the query embedded: the model is loaded (asking for it earlier would wait for its load)
                words = (
                    self._retriever.word_matcher(run.parsed.text, c.owners) if run.qvec is not None else None
                )
                fused = rescore_turns(fused, snap, c.dialog, c.owners, c.named, run.qvec, words=words)
        shards = snap.shards

        def path_of(node_id: str) -> str | None:
            shard = shards.get(node_id)
            return shard.path if shard is not None else None

        entries = aggregate(fused, path_of, pass_, c.fusion)
        return self.prefer_recent(entries, run)

    def half_life(self, run: Run) -> float:
        """The recency half-life of this search in days (the query's `recent:`, else the setting; 0: off)."""
        return (
            run.parsed.recent
            if run.parsed.recent is not None
            else self.settings.search.recency_half_life_days
        )

    def prefer_recent(self, entries: list[Entry], run: Run) -> list[Entry]:
        """Under a recency preference, each entry's score times its recency factor, re-sorted (stable)."""
        half_life = self.half_life(run)
        if half_life <= 0:
            return entries
        for e in entries:
            found = self._retriever.dates.get(run.snap, e.path)
            e.recency = recency_factor(
                found[0] if found is not None else None,
                run.today,
                half_life,
                self.settings.experimental.recency_weight,
            )
        return sorted(entries, key=lambda e: -e.score)
