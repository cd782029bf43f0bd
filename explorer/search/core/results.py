"""Fused entries become SearchResult records: context shards with highlights, explanation, relevance."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from explorer.config import Settings
from explorer.index.backend import Snapshot
from explorer.search.core.notefilters import NoteDates
from explorer.search.core.query import ParsedQuery
from explorer.search.core.typos import Correction
from explorer.search.fusion import Entry
from explorer.search.quality import coverage, relevance, token_idf
from explorer.search.schema import ContextShard, Explanation, SearchResult, SearchStats
from explorer.vault.model import Shard
from explorer.vault.windows import highlight_spans, query_words, snippet


class ResultBuilder:
    """Builds results from the snapshot a search reads."""

    def __init__(self, settings: Settings, dates: NoteDates) -> None:
        self.settings = settings
        self.dates = dates
        """Each note's date and properties (read from the index itself, per version)."""

    def results(
        self,
        snap: Snapshot,
        entries: Sequence[Entry],
        parsed: ParsedQuery,
        kc: int,
        qvec: np.ndarray | None = None,
    ) -> list[SearchResult]:
        """`result` of each entry, the texts of their notes read first in one go (`Snapshot.prefetch`)."""
        snap.prefetch(e.path for e in entries)
        words = query_words(parsed.text) if parsed.text else []
        return [self._result(snap, e, parsed, kc, qvec, words) for e in entries]

    def judged(
        self,
        snap: Snapshot,
        entries: Sequence[Entry],
        parsed: ParsedQuery,
        kc: int,
        qvec: np.ndarray | None = None,
    ) -> list[SearchResult]:
        """The entries as `results` would build them, with what the quality of a list reads
        (`explorer.search.quality.assess`: relevance, ranks, source) and no passages: no note text is
        read, no shard highlighted, for a list that is judged and never shown (knowledge first)."""
        words = query_words(parsed.text) if parsed.text else []
        out = []
        for entry in entries:
            best = entry.fused[0] if entry.fused else None
            note = snap.notes[entry.path]
            bm25_rank, dense_rank = _ranks(entry)
            out.append(
                SearchResult(
                    document_path=entry.path,
                    title=note.title,
                    source_type=note.source_type,
                    node_id=best.node_id if best else entry.path,
                    rrf_score=entry.score if best else 0.0,
                    score=entry.score if best else 0.0,
                    bm25_rank=bm25_rank,
                    embedding_rank=dense_rank,
                    snippet="",
                    source=entry.source,
                    pass_=entry.pass_,
                    reason=entry.reason,
                    relevance=self.relevance(snap, entry, words, qvec, kc) if best is not None else 0.0,
                )
            )
        return out

    def result(
        self, snap: Snapshot, entry: Entry, parsed: ParsedQuery, kc: int, qvec: np.ndarray | None = None
    ) -> SearchResult:
        """The record of `entry` with its first `kc` shards as context; relevance against `qvec` and the query words."""
        return self._result(snap, entry, parsed, kc, qvec, query_words(parsed.text) if parsed.text else [])

    def _result(
        self,
        snap: Snapshot,
        entry: Entry,
        parsed: ParsedQuery,
        kc: int,
        qvec: np.ndarray | None,
        words: list[str],
    ) -> SearchResult:
        best = entry.fused[0] if entry.fused else None
        note = snap.notes[entry.path]
        shards: list[ContextShard] = []
        for f in entry.fused[:kc]:
            sh = snap.shards.get(f.node_id)
            if sh is None:
                continue
            shards.append(make_context_shard(sh, words, parsed.phrases, f.score, entry.pass_))
        if not shards:
            first = snap.shard_ids(entry.path)
            if first:
                shards.append(
                    make_context_shard(snap.shards[first[0]], words, parsed.phrases, 0.0, entry.pass_)
                )
        bm25_rank, dense_rank = _ranks(entry)
        explanation = None
        if best is not None:
            explanation = Explanation(
                rrf_k=self.settings.experimental.rrf_k,
                best_node_id=best.node_id,
                contributions=best.contributions,
                fused_score=best.score,
                source_weight=best.contributions[0].source_weight if best.contributions else 1.0,
                pass_=entry.pass_,
                shards_matched=len(entry.fused),
                fusion=entry.fusion,
                recency=entry.recency,
            )
        top = shards[0] if shards else None
        rel = self.relevance(snap, entry, words, qvec, kc) if best is not None else 0.0
        day, day_from = self.dates.iso(snap, entry.path)
        return SearchResult(
            document_path=entry.path,
            title=note.title,
            source_type=note.source_type,
            node_id=best.node_id if best else (top.node_id if top else entry.path),
            rrf_score=entry.score if best else 0.0,
            score=entry.score if best else 0.0,
            bm25_rank=bm25_rank,
            embedding_rank=dense_rank,
            snippet=snippet(top.text, top.highlights, top.start) if top else "",
            source=entry.source,
            pass_=entry.pass_,
            reason=entry.reason,
            relevance=rel,
            context_shards=tuple(shards),
            explanation=explanation,
            date=day,
            date_from=day_from,
        )

    def relevance(
        self, snap: Snapshot, entry: Entry, words: list[str], qvec: np.ndarray | None, kc: int
    ) -> float:
        """0-1 (explorer.search.quality.relevance): the entry's best cosine to the query vector and
        the IDF-weighted coverage of the query's words by its top `kc` retrieved shards."""
        return self._relevance(snap, [f.node_id for f in entry.fused[: max(kc, 1)]], words, qvec)

    def with_corrections(
        self,
        snap: Snapshot,
        result: SearchResult,
        parsed: ParsedQuery,
        qvec: np.ndarray | None,
        corrections: Sequence[Correction],
    ) -> SearchResult:
        """`result` with its relevance judged with each misspelt word (explorer.search.core.typos) read as
        its correction: the first one the result's shards hold, else the closest."""
        if result.source != "search" or not corrections:
            return result
        ids = [c.node_id for c in result.context_shards] or [result.node_id]
        words = query_words(parsed.text) if parsed.text else []
        return replace(result, relevance=self._relevance(snap, ids, words, qvec, corrections))

    def _relevance(
        self,
        snap: Snapshot,
        ids: list[str],
        words: list[str],
        qvec: np.ndarray | None,
        corrections: Sequence[Correction] = (),
    ) -> float:
        toks: set[str] = set()
        for node_id in ids:
            toks.update(snap.lexical.tokens(node_id))
        if corrections:
            fixed = {c.token: c.candidates for c in corrections if c.candidates}
            words = [
                next((t for t in fixed[w] if t in toks), fixed[w][0]) if w in fixed else w for w in words
            ]
        n_docs = snap.lexical.n_docs()
        cover = coverage(words, toks, lambda w: token_idf(n_docs, snap.lexical.doc_freq(w)))
        cos: float | None = None
        if qvec is not None:
            sims = [float(np.dot(v, qvec)) for v in (snap.vector(n) for n in ids) if v is not None]
            cos = max(sims) if sims else None
        return relevance(cos, cover)

    def stats(self, snap: Snapshot, dense: bool) -> SearchStats:
        """The `stats` block of the results before the counts of the search are filled in."""
        st = snap.counts()
        return SearchStats(
            total_documents_searched=st.notes,
            total_shards_searched=st.shards,
            shards_without_vectors=st.pending,
            dense_available=dense,
            index_version=st.version,
        )


def _ranks(entry: Entry) -> tuple[int | None, int | None]:
    """The best rank any of the entry's shards reached in a BM25 ranking and in a dense one (None: none)."""
    bm25 = min((c.rank for f in entry.fused for c in f.contributions if c.retriever == "bm25"), default=None)
    dense = min(
        (c.rank for f in entry.fused for c in f.contributions if c.retriever == "dense"), default=None
    )
    return bm25, dense


def make_context_shard(
    shard: Shard, words: list[str], phrases: tuple[str, ...] | list[str], score: float, pass_: int
) -> ContextShard:
    """A shard as a context passage with highlights in note offsets."""
    hl = highlight_spans(shard.text, words, phrases, offset=shard.start)
    return ContextShard(
        node_id=shard.node_id,
        path=shard.path,
        cursor=hl[0].start if hl else shard.start,
        start=shard.start,
        end=shard.end,
        text=shard.text,
        highlights=hl,
        score=score,
        pass_=pass_,
    )
