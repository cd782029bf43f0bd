"""The retrieve stage: filters to allowed shards, query vectors, and per term a BM25 and a dense ranking (+ feedback)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from explorer.config import Settings
from explorer.index.backend import IndexBackend, Restriction, Snapshot, Spread
from explorer.search.changes import NoteChanges
from explorer.search.core.namedpart import HeadingWords, named_part
from explorer.search.core.names import NameIndex
from explorer.search.core.notefilters import NoteDates
from explorer.search.core.query import ParsedQuery
from explorer.search.core.terms import SearchTerms
from explorer.search.core.typos import Correction, Speller, corrected_tokens
from explorer.search.fusion import rrf
from explorer.search.memory.rescore import WordMatches
from explorer.search.memory.signals import Owners
from explorer.search.memory.turn_vectors import EncodeTokens, TokenVectors, word_matches
from explorer.search.schema import Ranking
from explorer.text.tokenize import tokenize

#: Turns away a turn's BM25 document reaches for its neighbours' words, the share
#: (`experimental.dialog_words`) multiplied at each step: 2 = the adjacent turns at 0.5, the next at 0.25.
DIALOG_REACH = 2
#: Turn texts per model run when a session warms the turns' token vectors (explorer.search.memory.turn_vectors).
WARM_BATCH = 64
#: Weight of the feedback passages' mean vector added to the query vector.
FEEDBACK_BETA = 1.0
#: Weight of the dense feedback ranking.
FEEDBACK_WEIGHT = 1.0
#: Weight of the ranking of passages that contain a query's quoted phrases exactly.
PHRASE_WEIGHT = 1.0


def source_weights(snap: Snapshot, weights: dict[str, float]) -> Callable[[str], float]:
    """w_source(node_id): the weight of the shard's source type (1.0 for unknown shards and types)."""
    shards = snap.shards

    def weight(node_id: str) -> float:
        shard = shards.get(node_id)
        if shard is None:
            return 1.0
        return weights.get(shard.source_type, 1.0)

    return weight


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
        self._facts_cache: tuple[int, set[str]] = (-1, set())
        self._facts_by_path: dict[str, tuple[str, ...]] = {}
        self._facts_lock = threading.Lock()
        self._pairs_cache: tuple[tuple[int, float, int] | None, Spread | None] = (None, None)
        self._names = NameIndex()
        self._heading_words = HeadingWords()
        """The words of each note's headings (explorer.search.core.namedpart), per index version."""
        self.tokens = TokenVectors()
        """The word-piece vectors of the turns met last (explorer.search.memory.turn_vectors), kept between searches."""
        self._speller = Speller()
        self._tables = threading.Lock()
        """Held while the name table or the speller is read or rebuilt (they are changed in place)."""
        self.dates = NoteDates()

    def prepare(self, snap: Snapshot) -> None:
        """Build the tables a query reads for the snapshot's version: the name table and the idf."""
        with self._tables:
            self._refresh_names(snap)
        snap.idf()

    def _refresh_names(self, snap: Snapshot) -> None:
        """Bring the name table to the snapshot's version (the caller holds `_tables`)."""
        if self._names.version == snap.version:
            return
        changed = self._changes.since(snap, self._names.version if self._names.version >= 0 else None)
        self._names.refresh(snap.notes, snap.version, snap.name_tokens, changed)

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
                    toks = set(snap.tokens(node_id))
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
        """One BM25 and one dense ranking per term (the dense side scans the matrix once for all
        terms), the name ranking of the query, and the dense feedback ranking.

        BM25 and the name ranking search a misspelt word's `corrections` in its place. Quoted
        `phrases` are evidence, not a filter: the shards containing them all form one more
        ranking (retriever `phrase`, in BM25 order), and the phrase's words are searched anyway,
        so a passage worded slightly differently still ranks. `threshold` is the dense rankings'
        cosine floor (default `experimental.dense_threshold`); `feedback` False leaves the feedback ranking out.
        `dialog` reads conversation turns in their dialog: a turn's BM25 document also holds its
        adjacent turns' words at `experimental.dialog_words`, and its cosine is the better of its own
        vector's and its dialog-context vector's (explorer.index.dialog).
        """
        s = self.settings.experimental
        floor = s.dense_threshold if threshold is None else threshold
        depth = max(depth or 0, s.candidates)
        fetch = self._shard_depth(snap, depth)
        rankings: list[Ranking] = []
        t0 = time.perf_counter()
        restriction = snap.restrict(allowed) if allowed is not None else None
        pairs = (
            self._dialog_pairs(snap, s.dialog_words, DIALOG_REACH) if dialog and s.dialog_words > 0 else None
        )
        lexical: list[tuple[str, float, list[str]]] = []
        for i, term in enumerate(terms.all_terms):
            if i and s.term_retrievers == "dense":
                continue
            toks = tokenize(term)
            if corrections:
                toks = corrected_tokens(toks, corrections)
            lexical.append((term, s.query_weight if i == 0 else s.term_weight, toks))
        spread = pairs is not None and pairs.pairs
        # Every term's first fetch in one call (an engine backend answers them in one round trip).
        firsts = iter(
            () if spread else snap.bm25_top_many([t for _, _, t in lexical if t], fetch, restriction)
        )
        for term, tw, toks in lexical:
            if not toks:
                rankings.append(Ranking(term, "bm25", s.bm25_weight, tw, ()))
                continue
            if spread:
                assert pairs is not None
                items = self._note_depth(
                    snap, partial(snap.bm25_top_spread, toks, spread=pairs, allowed=restriction), fetch, depth
                )
            else:
                items = self._note_depth(
                    snap, partial(snap.bm25_top, toks, allowed=restriction), fetch, depth, next(firsts)
                )
            rankings.append(Ranking(term, "bm25", s.bm25_weight, tw, tuple(items)))
        timings[prefix + "bm25"] = timings.get(prefix + "bm25", 0.0) + (time.perf_counter() - t0) * 1000
        if qvecs is not None:
            t0 = time.perf_counter()
            embedded = [
                t
                for i, t in enumerate(terms.all_terms)
                if t in qvecs and (i == 0 or s.term_retrievers != "bm25")
            ]
            if embedded:
                matrix = np.stack([qvecs[t] for t in embedded])
                hits = snap.vector_top(matrix, fetch, floor, restriction)
                in_context = (
                    snap.vector_top(matrix, fetch, floor, restriction, context=True)
                    if dialog and snap.has_vectors(context=True)
                    else None
                )
                for j, (term, items) in enumerate(zip(embedded, hits)):
                    tw = s.query_weight if term == terms.all_terms[0] else s.term_weight
                    row = matrix[j : j + 1]
                    items = self._note_depth(
                        snap,
                        lambda n: snap.vector_top(row, n, floor, restriction)[0],  # noqa: B023 - called at once
                        fetch,
                        depth,
                        items,
                    )
                    if in_context is not None:
                        items = _better_of(items, in_context[j])
                    rankings.append(Ranking(term, "dense", s.dense_weight, tw, tuple(items)))
            timings[prefix + "dense"] = timings.get(prefix + "dense", 0.0) + (time.perf_counter() - t0) * 1000
        if phrases:
            t0 = time.perf_counter()
            rankings.append(self._phrase_ranking(snap, terms.all_terms[0], phrases, rankings, allowed, depth))
            timings[prefix + "phrases"] = (time.perf_counter() - t0) * 1000
        if s.name_weight > 0:
            t0 = time.perf_counter()
            named = self._name_ranking(snap, terms.all_terms[0], rankings, allowed, depth, corrections or [])
            if named is not None:
                rankings.append(named)
            timings[prefix + "names"] = timings.get(prefix + "names", 0.0) + (time.perf_counter() - t0) * 1000
        if qvecs is not None:
            query = terms.all_terms[0]
            if feedback and s.feedback_shards > 0 and query in qvecs:
                t0 = time.perf_counter()
                fb = self._feedback(snap, query, qvecs[query], rankings, fetch, depth, restriction, floor)
                if fb is not None:
                    rankings.append(fb)
                timings[prefix + "feedback"] = (time.perf_counter() - t0) * 1000
        return rankings

    def _feedback(
        self,
        snap: Snapshot,
        query: str,
        qvec: np.ndarray,
        rankings: list[Ranking],
        fetch: int,
        depth: int,
        restriction: Restriction | None,
        floor: float,
    ) -> Ranking | None:
        """The dense feedback ranking: the query vector moved toward the best fused passages.

        Rocchio feedback on the embeddings: the vectors of the top `feedback_shards` fused shards
        that are semantic matches of the query (in its dense ranking, so above the cosine floor;
        one per note) are averaged, added to the query vector with weight `FEEDBACK_BETA`, and
        the normalised sum searches the matrix like a query (same cosine floor, same depth). The
        ranking's `sources` name the shards it was built from.
        """
        s = self.settings.experimental
        semantic = {nid for r in rankings if r.retriever == "dense" and r.term == query for nid, _ in r.items}
        seen: set[str] = set()
        used: list[str] = []
        vecs: list[np.ndarray] = []
        # Chosen by retrieval evidence alone: a source weight (knowledge 1.5) must not make a
        # passage barely over the cosine floor a feedback passage, whose own vector would then
        # rank it again near the top of the feedback list (weighted again).
        # Fused over every ranking, but only the semantic matches are read: the others are left out of the sum.
        for f in rrf(rankings, s.rrf_k, only=semantic):
            shard = snap.shards.get(f.node_id)
            if shard is None or shard.path in seen:
                continue
            vec = snap.vector(f.node_id)
            if vec is None:
                continue
            seen.add(shard.path)
            used.append(f.node_id)
            vecs.append(vec)
            if len(vecs) == s.feedback_shards:
                break
        if not vecs:
            return None
        moved = np.asarray(qvec, dtype=np.float32) + FEEDBACK_BETA * np.mean(vecs, axis=0)
        norm = float(np.linalg.norm(moved))
        if norm == 0.0:
            return None
        row = (moved / norm).reshape(1, -1).astype(np.float32)
        items = self._note_depth(snap, lambda n: snap.vector_top(row, n, floor, restriction)[0], fetch, depth)
        return Ranking(query, "feedback", FEEDBACK_WEIGHT, s.query_weight, tuple(items), tuple(used))

    def _phrase_ranking(
        self,
        snap: Snapshot,
        query: str,
        phrases: tuple[str, ...],
        rankings: list[Ranking],
        allowed: set[str] | None,
        depth: int,
    ) -> Ranking:
        """Shards containing every phrase (case and spacing ignored), in the query's BM25 order."""
        wanted = [" ".join(p.lower().split()) for p in phrases if p.strip()]
        hits = [
            nid
            for nid, sh in snap.shards.items()
            if (allowed is None or nid in allowed)
            and all(w in " ".join(sh.text.lower().split()) for w in wanted)
        ]
        order = {nid: i for r in rankings[:1] if r.retriever == "bm25" for i, (nid, _) in enumerate(r.items)}
        hits.sort(key=lambda nid: (order.get(nid, len(order)), nid))
        s = self.settings.experimental
        return Ranking(
            query, "phrase", PHRASE_WEIGHT, s.query_weight, tuple((nid, 1.0) for nid in hits[:depth])
        )

    def corrections(self, snap: Snapshot, text: str) -> list[Correction]:
        """Typo corrections of `text`'s words against the BM25 vocabulary (explorer.search.core.typos)."""
        if not self.settings.search.typo_tolerance or not text:
            return []
        idf = snap.idf()
        with self._tables:
            return self._speller.corrections(text, idf, snap.doc_freq)

    def _name_ranking(
        self,
        snap: Snapshot,
        query: str,
        rankings: list[Ranking],
        allowed: set[str] | None,
        depth: int,
        corrections: list[Correction],
    ) -> Ranking | None:
        """The name ranking (explorer.search.core.names): notes whose names the query names.

        Each named note is credited through one of its shards: the part of the note the query's
        other words name (`namedpart.named_part`: "Docker setup troubleshooting" credits the section on
        troubleshooting), else the best one in the fused BM25 and dense rankings so far, else its
        first shard.
        """
        s = self.settings.experimental
        toks = tokenize(query)
        if corrections:
            toks = corrected_tokens(toks, corrections)
        if not toks:
            return None

        def first_shard(path: str) -> str | None:
            for node_id in snap.shard_ids(path):
                if allowed is None or node_id in allowed:
                    return node_id
            return None

        idf = snap.idf()
        with self._tables:
            self._refresh_names(snap)
            found = self._names.search(
                toks,
                lambda t: idf.get(t, 0.0),
                depth,
                allowed=None if allowed is None else lambda p: first_shard(p) is not None,
                part_words=lambda path: self._heading_words(snap, path),
            )
        if not found:
            return None
        best: dict[str, str] = {}
        # The best fused shard of each named note: the fusion of the named notes' shards alone.
        theirs = {node_id for path, _ in found for node_id in snap.shard_ids(path)}
        for f in rrf(rankings, s.rrf_k, source_weights(snap, self.weights), only=theirs):
            shard = snap.shards.get(f.node_id)
            if shard is not None:
                best.setdefault(shard.path, f.node_id)
        items = []
        for path, score in found:
            part = named_part(
                snap, path, toks, allowed, self._names.words(path), self._heading_words(snap, path)
            )
            node_id = part or best.get(path) or first_shard(path)
            if node_id is not None:
                items.append((node_id, score))
        return Ranking(query, "name", s.name_weight, s.query_weight, tuple(items)) if items else None

    def _shard_depth(self, snap: Snapshot, notes: int) -> int:
        """Shards to fetch so that a ranking usually reaches `notes` distinct notes in one go."""
        n_notes = max(1, len(snap.notes))
        per_note = len(snap.shards) / n_notes
        return max(notes, int(notes * per_note * 2) + 16)

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
            self._note_depth(
                snap,
                lambda n: snap.bm25_top(toks, n, restriction),
                self._shard_depth(snap, s.candidates),
                s.candidates,
            )
            if toks
            else []
        )
        return Ranking(term, "bm25", s.bm25_weight, s.query_weight, tuple(items))

    def _dialog_pairs(self, snap: Snapshot, share: float, reach: int) -> Spread:
        """BM25 (dst, src, weight): every shard of a turn note with every shard of the turns up to
        `reach` steps away in its session, at `share` per step (share ** steps); per index version."""
        key = (snap.version, share, reach)
        cached = self._pairs_cache
        if cached[0] != key or cached[1] is None:
            neighbours = snap.neighbours
            shard_ids = snap.shard_ids
            triples: list[tuple[str, str, float]] = []
            for path in neighbours:
                seen, frontier = {path}, [path]
                for step in range(1, reach + 1):
                    frontier = [q for p in frontier for q in neighbours.get(p, ()) if q not in seen]
                    seen.update(frontier)
                    w = share**step
                    triples += [
                        (dst, src, w) for q in frontier for dst in shard_ids(path) for src in shard_ids(q)
                    ]
            cached = self._pairs_cache = (key, snap.spread(triples))
        assert cached[1] is not None
        return cached[1]

    def _note_depth(
        self,
        snap: Snapshot,
        fetch: Callable[[int], list[tuple[str, float]]],
        n: int,
        notes: int,
        first: list[tuple[str, float]] | None = None,
    ) -> list[tuple[str, float]]:
        """A shard ranking cut after the shards of its first `notes` distinct notes.

        The candidate depth counts notes, not shards: a note cut into many shards must not crowd
        other notes out of a ranking. `fetch(n)` returns the n best shards; it is called again
        with a larger n when the first n shards cover too few notes and more exist.
        """
        items = first if first is not None else fetch(n)
        shards = snap.shards
        while True:
            seen: set[str] = set()
            for i, (node_id, _score) in enumerate(items):
                shard = shards.get(node_id)
                path = shard.path if shard is not None else node_id
                if path not in seen:
                    if len(seen) == notes:
                        return items[:i]
                    seen.add(path)
            if len(items) < n:
                return items
            n *= 4
            items = fetch(n)


def _has_tag(tags: tuple[str, ...], wanted: str) -> bool:
    return any(t == wanted or t.startswith(wanted + "/") for t in tags)


def _better_of(own: list[tuple[str, float]], context: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """One dense ranking from a turn's own cosines and its dialog-context cosines: each shard's better one."""
    best = dict(own)
    for node_id, cos in context:
        if cos > best.get(node_id, -2.0):
            best[node_id] = cos
    return sorted(best.items(), key=lambda item: (-item[1], item[0]))
