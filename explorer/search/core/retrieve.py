"""The retrieve stage: filters to allowed shards, query vectors, and per term the rankings of every retriever.

The retrievers themselves (BM25, dense, phrase, name, feedback) are explorer.search.core.retrievers;
this stage prepares what they read (the allowed shards, the corrections, the query vectors) and runs them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from explorer.config import Settings
from explorer.index.backend import IndexBackend, Snapshot
from explorer.search.changes import NoteChanges
from explorer.search.core.notefilters import NoteDates
from explorer.search.core.query import ParsedQuery
from explorer.search.core.retrievers import build_retrievers
from explorer.search.core.retrievers.base import Request, note_depth, shard_depth
from explorer.search.core.retrievers.dense import expect_dense
from explorer.search.core.terms import SearchTerms
from explorer.search.core.typos import Correction, Speller, corrected_tokens
from explorer.search.memory.rescore import WordMatches
from explorer.search.memory.signals import Owners
from explorer.search.memory.turn_vectors import EncodeTokens, TokenVectors, word_matches
from explorer.search.schema import Ranking
from explorer.text.tokenize import tokenize

#: Turn texts per model run when a session warms the turns' token vectors (explorer.search.memory.turn_vectors).
WARM_BATCH = 64


class Retriever:
    """Ranks shards for search terms against a snapshot of one index (each method reads the one it is given).

    The tables it keeps between searches (knowledge shards, dialog pairs, the name table) are
    keyed by the snapshot version they were built from; searches in several threads share them.
    """

    def __init__(
        self,
        index: IndexBackend,
        settings: Settings,
        source_weights: dict[str, float],
        changes: NoteChanges | None = None,
    ) -> None:
        self.index = index
        self.settings = settings
        self.weights = source_weights
        self._changes = changes or NoteChanges()
        """Notes changed between versions, so the tables below update only those."""
        self.retrievers = build_retrievers(settings, source_weights, self._changes)
        """One of each registered retriever (explorer.search.core.retrievers), in the order they run."""
        self._facts_cache: tuple[int, set[str]] = (-1, set())
        self._facts_by_path: dict[str, tuple[str, ...]] = {}
        self._facts_lock = threading.Lock()
        self.tokens = TokenVectors()
        """The word-piece vectors of the turns met last (explorer.search.memory.turn_vectors), kept between searches."""
        self._speller = Speller()
        self._spelling = threading.Lock()
        """Held while the speller is read or rebuilt (it is changed in place)."""
        self.dates = NoteDates()

    def prepare(self, snap: Snapshot) -> None:
        """Build the tables a query reads for the snapshot's version: the retrievers' (the name table) and the idf."""
        for retriever in self.retrievers:
            retriever.prepare(snap)
        snap.lexical.idf()

    def _token_encoder(self) -> EncodeTokens | None:
        """The model's `encode_tokens` (explorer.search.memory.turn_vectors), or None when no model gives token vectors."""
        emb = self.index.embedder()
        encode = getattr(emb, "encode_tokens", None) if emb is not None else None
        return encode if callable(encode) else None

    def word_matcher(self, query: str, owners: Owners) -> WordMatches | None:
        """The word matches of turn texts with `query` (explorer.search.memory.turn_vectors), or None when no model gives token vectors."""
        encode = self._token_encoder()
        if encode is None:
            return None
        names = {w for words in owners.words.values() for w in words}
        return partial(word_matches, query, names=names, encode=encode, vectors=self.tokens)

    def warm_tokens(self, texts: Sequence[str], cancelled: Callable[[], bool] | None = None) -> int:
        """Make the token vectors of `texts` not kept yet (at most as many as are kept), a model batch at a time."""
        encode = self._token_encoder()
        if encode is None:
            return 0
        made = 0
        todo = self.tokens.missing(texts[: self.tokens.limit])
        for start in range(0, len(todo), WARM_BATCH):
            if cancelled is not None and cancelled():
                break
            chunk = todo[start : start + WARM_BATCH]
            self.tokens.get(encode, chunk)
            made += len(chunk)
        return made

    def encode(self, texts: list[str]) -> dict[str, np.ndarray] | None:
        """Query vectors by text, or None when no embedding model is available."""
        emb = self.index.embedder()
        if emb is None:
            return None
        vecs = emb.encode(texts)
        return dict(zip(texts, vecs))

    def allowed(self, snap: Snapshot, parsed: ParsedQuery) -> set[str] | None:
        """node_ids of the shards the query's filters allow (None: no filter, everything is allowed)."""
        # An exclusion with no word in it (`---`, `-!`) excludes nothing: it must not cost a scan of every shard.
        excluded_tokens = [t for t in (tokenize(x) for x in parsed.excluded) if t]
        if not (
            parsed.tags
            or parsed.paths
            or parsed.files
            or parsed.sections
            or excluded_tokens
            or parsed.has_note_filters
        ):
            return None
        out = set()
        # `-word` excludes notes, as in Obsidian: a note with the word in any section is left out.
        banned: set[str] = set()
        passing = self.dates.passing(snap, parsed)  # [property:value], after:/before:/on: (None: none given)
        if passing is not None and not (
            parsed.tags or parsed.paths or parsed.files or parsed.sections or excluded_tokens
        ):
            return {nid for path in passing for nid in snap.shard_ids(path)}
        if excluded_tokens:
            for node_id, shard in snap.shards.items():
                if shard.path not in banned:
                    toks = set(snap.lexical.tokens(node_id))
                    if any(ex and all(t in toks for t in ex) for ex in excluded_tokens):
                        banned.add(shard.path)
        for node_id, shard in snap.shards.items():
            if shard.path in banned:
                continue
            note = snap.notes.get(shard.path)
            if note is None:
                continue
            if parsed.tags and not all(_has_tag(note.tag_names, t) for t in parsed.tags):
                continue
            low_path = shard.path.lower()
            if parsed.paths and not all(p.lower() in low_path for p in parsed.paths):
                continue
            if parsed.files and not all(f.lower() in low_path.rsplit("/", 1)[-1] for f in parsed.files):
                continue
            if parsed.sections and not all(
                any(sec.lower() in h.lower() for h in shard.heading_path) for sec in parsed.sections
            ):
                continue
            if passing is not None and shard.path not in passing:
                continue
            out.add(node_id)
        return out

    def facts(self, snap: Snapshot) -> set[str]:
        """node_ids of knowledge shards, per index version (updated from the notes that changed)."""
        cached = self._facts_cache
        if cached[0] == snap.version:
            return cached[1]
        with self._facts_lock:
            cached = self._facts_cache
            if cached[0] == snap.version:
                return cached[1]
            changed = self._changes.since(snap, cached[0] if cached[0] >= 0 else None)
            if changed is None:
                by_path: dict[str, list[str]] = {}
                for nid, sh in snap.shards.items():
                    if sh.source_type == "fact":
                        by_path.setdefault(sh.path, []).append(nid)
                self._facts_by_path = {p: tuple(ids) for p, ids in by_path.items()}
                facts = {nid for ids in self._facts_by_path.values() for nid in ids}
            elif not changed:
                facts = cached[1]
            else:
                facts = set(cached[1])
                by_path_now = self._facts_by_path
                for path in changed:
                    facts.difference_update(by_path_now.pop(path, ()))
                    ids = tuple(
                        nid
                        for nid in snap.shard_ids(path)
                        if (found := snap.shards.get(nid)) is not None and found.source_type == "fact"
                    )
                    if ids:
                        by_path_now[path] = ids
                        facts.update(ids)
            self._facts_cache = (snap.version, facts)
            return facts

    def rankings(
        self,
        snap: Snapshot,
        terms: SearchTerms,
        qvecs: dict[str, np.ndarray] | None,
        allowed: set[str] | None,
        timings: dict[str, float],
        prefix: str,
        depth: int | None = None,
        corrections: list[Correction] | None = None,
        phrases: tuple[str, ...] = (),
        threshold: float | None = None,
        feedback: bool = True,
        dialog: bool = False,
    ) -> list[Ranking]:
        """The rankings of every retriever that applies, in the registry's order, each timed as
        `timings[prefix + its timing]` (explorer.search.core.retrievers).

        BM25 and the name ranking search a misspelt word's `corrections` in its place. Quoted
        `phrases` are evidence, not a filter (retriever `phrase`). `threshold` is the dense
        rankings' cosine floor (default `experimental.dense_threshold`); `feedback` False leaves the
        feedback ranking out. `dialog` reads conversation turns in their dialog: a turn's BM25
        document also holds its adjacent turns' words at `experimental.dialog_words`, and its cosine
        is the better of its own vector's and its dialog-context vector's (explorer.index.local.dialog).
        """
        s = self.settings.experimental
        depth = max(depth or 0, s.candidates)
        request = Request(
            snap=snap,
            terms=terms,
            qvecs=qvecs,
            allowed=allowed,
            restriction=snap.restrict(allowed) if allowed is not None else None,
            depth=depth,
            fetch=shard_depth(snap, depth),
            floor=s.dense_threshold if threshold is None else threshold,
            corrections=corrections or [],
            phrases=phrases,
            feedback=feedback,
            dialog=dialog,
        )
        rankings: list[Ranking] = []
        if any(r.name == "dense" and r.applies(request) for r in self.retrievers):
            expect_dense(request, s.term_retrievers)  # an engine asks for BM25 and dense rankings at once
        for retriever in self.retrievers:
            if not retriever.applies(request):
                continue
            t0 = time.perf_counter()
            rankings += retriever.rank(request, rankings)
            key = prefix + retriever.timing
            timings[key] = timings.get(key, 0.0) + (time.perf_counter() - t0) * 1000
        return rankings

    def corrections(self, snap: Snapshot, text: str) -> list[Correction]:
        """Typo corrections of `text`'s words against the BM25 vocabulary (explorer.search.core.typos)."""
        if not self.settings.search.typo_tolerance or not text:
            return []
        idf = snap.lexical.idf()
        with self._spelling:
            return self._speller.corrections(text, idf, snap.lexical.doc_freq)

    def own_words(
        self, snap: Snapshot, term: str, allowed: set[str] | None, corrections: list[Correction] | None = None
    ) -> Ranking:
        """The plain BM25 ranking of `term` (each turn's own words, whatever `dialog` did to the fused one)."""
        s = self.settings.experimental
        toks = tokenize(term)
        if corrections:
            toks = corrected_tokens(toks, corrections)
        restriction = snap.restrict(allowed) if allowed is not None else None
        items = (
            note_depth(
                snap,
                lambda n: snap.bm25_top(toks, n, restriction),
                shard_depth(snap, s.candidates),
                s.candidates,
            )
            if toks
            else []
        )
        return Ranking(term, "bm25", s.bm25_weight, s.query_weight, tuple(items))


def _has_tag(tags: tuple[str, ...], wanted: str) -> bool:
    return any(t == wanted or t.startswith(wanted + "/") for t in tags)
