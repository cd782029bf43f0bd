"""SearchPipeline: the one entry point that answers a query, stage by stage, with timings and explanations."""

from __future__ import annotations

import inspect
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Callable, Protocol

import numpy as np

from explorer.config import Settings
from explorer.index.context import highlight_spans, query_words, snippet
from explorer.text.tokenize import tokenize
from explorer.index.vault_index import VaultIndex
from explorer.search.fusion import Fused, Ranking, rrf
from explorer.search.llm import Budget
from explorer.search.names import NameIndex
from explorer.search.query import ParsedQuery, parse_query
from explorer.search.quality import coverage, relevance, token_idf
from explorer.search.schema import ContextShard, Explanation, PassInfo, SearchResult, SearchResults
from explorer.search.terms import SearchTerms, clamp_terms, keyword_terms
from explorer.search.twopass import Analysis, merge_passes, repeats_query
from explorer.search.typos import Correction, Speller, corrected_tokens
from explorer.vault.model import Shard

MAX_QUERY_CHARS = 2000
_TURN = re.compile(r"turn_(\d+)")


class QueryError(ValueError):
    """The query cannot be searched; the message says why and what to do."""


class SearchCancelled(Exception):
    """A newer search replaced this one."""


class Analyser(Protocol):
    """Decides after pass 1 whether a second pass is needed."""

    def __call__(self, query: str, results: SearchResults) -> "Analysis": ...


class Reranker(Protocol):
    """Reorders fused results (see explorer.search.rerank)."""

    def rerank(
        self, query: str, results: list[SearchResult], query_vector: np.ndarray | None = None
    ) -> tuple[list[SearchResult], dict[str, Any]]: ...


@dataclass
class _Entry:
    path: str
    fused: list[Fused]
    pass_: int = 1
    source: str = "search"
    reason: str = ""


class SearchPipeline:
    """Answers queries against one VaultIndex.

    Steps (each timed in `timings_ms`, cancellation checked between them):
      1. parse the query (filters) and write search terms (query + 3-5 terms);
      2. per term, a BM25 ranking and an embedding ranking (cosine >= threshold);
      3. weighted RRF over all rankings, built with its explanation;
      4. shards aggregate to notes (best shard wins), always-include rules append notes;
      5. two-pass: analysis of pass 1, then pass 2 on a refined query, merged;
      6. rerank (multi-pass, early exit);
      7. quality score, diminishing-returns advisory; results with context shards.
    """

    def __init__(
        self,
        index: VaultIndex,
        settings: Settings | None = None,
        term_writer: Callable[[str], SearchTerms] | None = None,
        analyser: Analyser | None = None,
        reranker: Reranker | None = None,
    ) -> None:
        self.index = index
        self.settings = settings or index.settings
        self.term_writer = term_writer
        self.analyser = analyser
        self.reranker = reranker
        self.history: list[dict[str, Any]] = []
        self._cache: OrderedDict[tuple, SearchResults] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._weights = dict(self.settings.search.source_weights)
        self._facts_cache: tuple[int, set[str]] = (-1, set())
        self._names = NameIndex()
        self._speller = Speller()

    # -- public -----------------------------------------------------------------------------
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
    ) -> SearchResults:
        """Answer `query`. Raises QueryError for an empty query, SearchCancelled when `cancelled()`."""
        s = self.settings.search
        k = k or s.top_k
        two_pass = s.two_pass if two_pass is None else two_pass
        rerank = (self.settings.rerank.enabled and self.reranker is not None) if rerank is None else (rerank and self.reranker is not None)
        t_start = time.perf_counter()
        timings: dict[str, float] = {}
        warnings: list[str] = []

        def check() -> None:
            if cancelled is not None and cancelled():
                raise SearchCancelled()

        if not query or not query.strip():
            raise QueryError("empty query: type words to search, or a filter such as tag:name")
        if len(query) > MAX_QUERY_CHARS:
            warnings.append(f"query of {len(query)} characters cut to {MAX_QUERY_CHARS}")
            query = query[:MAX_QUERY_CHARS]
        parsed = parse_query(query)
        warnings.extend(parsed.warnings)
        use_dense = dense and self.index.model_state != "off"
        key = (parsed.raw, k, use_dense, two_pass, rerank, self.index.version, self.index.model_state)
        with self._cache_lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
        if hit is not None:
            out = replace(hit, timings_ms={"cache": (time.perf_counter() - t_start) * 1000, "total": (time.perf_counter() - t_start) * 1000})
            out.mode = dict(out.mode, cached=True)
            if record:
                self._record(out)
            return out

        # 1. terms
        t = time.perf_counter()
        if not parsed.text:
            results = self._browse(parsed, k)
            results.warnings = warnings
            results.timings_ms = {"total": (time.perf_counter() - t_start) * 1000}
            return results
        budget = Budget(self.settings.llm.token_budget)
        terms = self._write_terms(parsed.text, budget)
        warnings.extend(terms.warnings)
        timings["terms"] = (time.perf_counter() - t) * 1000
        check()

        # model: the query vectors are needed by pass 1
        qvecs: dict[str, np.ndarray] | None = None
        if use_dense:
            t = time.perf_counter()
            qvecs = self._encode(terms.all_terms)
            timings["embed_query"] = (time.perf_counter() - t) * 1000
            if qvecs is None:
                warnings.append(f"embedding model {self.index.model_state}: BM25 only")
        check()

        with self.index.lock:
            allowed = self._allowed(parsed)
            version = self.index.version
            corrections = self._corrections(parsed.text)
            stats = self._stats(qvecs is not None)
            searched = ["all"]
            early = False
            qvec0 = qvecs.get(terms.all_terms[0]) if qvecs is not None else None
            # Knowledge first: when knowledge notes alone answer well, stop there.
            entries: list[_Entry] | None = None
            rankings_all: list[Ranking] = []
            if s.knowledge_first:
                t = time.perf_counter()
                facts = self._facts() if allowed is None else self._facts() & allowed
                if facts:
                    # One retrieval serves both: the knowledge rankings are the full rankings
                    # restricted to knowledge shards (ranks counted among those alone).
                    rankings_all = self._retrieve(terms, qvecs, allowed, timings, "", corrections=corrections)
                    kb_rankings = [replace(r, items=tuple(it for it in r.items if it[0] in facts)) for r in rankings_all]
                    kb_entries = self._entries(rrf(kb_rankings, s.rrf_k, self._source_weight), parsed, 1)
                    kb_results = [self._result(e, parsed, kc=s.pass1_shards, qvec=qvec0) for e in kb_entries[:k]]
                    kb_quality = assess_quality(kb_results, qvecs is not None)
                    # The page is full when as many relevant knowledge notes as pass 1 would show were found.
                    page = min(k, s.pass1_entries)
                    # A query that names a note outside the knowledge notes searches everything.
                    named_elsewhere = any(r.retriever == "name" and any(nid not in facts for nid, _ in r.items)
                                          for r in rankings_all)
                    if kb_quality.level == "high" and kb_quality.factors["relevant_count"] >= page and not named_elsewhere:
                        entries, rankings_all, early = kb_entries, kb_rankings, True
                        searched = ["fact"]
                    else:
                        searched = ["fact", "all"]
                timings["knowledge_first"] = (time.perf_counter() - t) * 1000
            check()

            # 2-4. pass 1
            t = time.perf_counter()
            if entries is None:
                if not rankings_all:
                    rankings_all = self._retrieve(terms, qvecs, allowed, timings, "", corrections=corrections)
                t_f = time.perf_counter()
                fused = rrf(rankings_all, s.rrf_k, self._source_weight)
                timings["fusion"] = (time.perf_counter() - t_f) * 1000
                entries = self._entries(fused, parsed, 1)
            ke1 = max(s.pass1_entries, k) if two_pass else k
            if rerank:  # the reranker's gate pass looks past the page; the list is cut to k after it
                ke1 = max(ke1, self.settings.rerank.pass1_candidates)
            pass1 = entries[:ke1]
            results = [self._result(e, parsed, kc=s.pass1_shards, qvec=qvec0) for e in pass1]
            passes = [PassInfo(1, parsed.text, tuple(terms.all_terms), ke1, s.pass1_shards, len(entries), len(pass1), (time.perf_counter() - t) * 1000)]
            timings["pass1"] = passes[0].ms
        check()

        out = SearchResults(
            query=parsed.raw,
            search_terms_used=terms.all_terms,
            results=results,
            stats=stats,
            warnings=warnings,
            filters=parsed.filters_dict() if parsed.has_filters else {},
            early_return=early,
            searched_sources=searched,
            include_preferences=terms.include_preferences,
            include_n_minus_1=terms.include_n_minus_1,
            corrections=[{"word": c.word, "searched": list(c.candidates), "edits": c.distance} for c in corrections],
        )
        out.trace = {"rankings": rankings_all, "version": version}
        feedback = next((r for r in rankings_all if r.retriever == "feedback"), None)
        out.stats["feedback_from"] = list(feedback.sources) if feedback is not None else []

        # 5. two-pass
        analysis = None
        if two_pass and early:
            out.analysis = {"decision": "SUFFICIENT", "refined_query": "", "analyser": None, "tokens_used": 0,
                            "reason": "knowledge notes answered with high quality (early return)",
                            "skipped": "pass 2 skipped: knowledge-first early return"}
        elif two_pass:
            t = time.perf_counter()
            analysis = self._analyse(parsed.text, out, budget)
            timings["analysis"] = (time.perf_counter() - t) * 1000
            out.analysis = {"decision": analysis.decision, "refined_query": analysis.refined_query,
                            "reason": analysis.reason, "analyser": analysis.analyser, "tokens_used": analysis.tokens_used}
            check()
            refined = analysis.refined_query.strip() if analysis.decision == "REFINE" else ""
            if analysis.decision == "REFINE" and not refined:
                out.analysis["skipped"] = "pass 2 skipped: REFINE without a query"
            elif refined and repeats_query(refined, parsed.text):
                out.analysis["skipped"] = "pass 2 skipped: the refined query repeats the original (it would repeat pass 1)"
            elif refined:
                t = time.perf_counter()
                terms2 = self._write_terms(refined, budget)
                out.warnings.extend(f"pass 2: {w}" for w in terms2.warnings)
                qvecs2 = self._encode(terms2.all_terms) if qvecs is not None else None
                check()
                with self.index.lock:
                    rankings2 = self._retrieve(terms2, qvecs2, allowed, timings, "pass2_",
                                               corrections=self._corrections(refined))
                    entries2 = self._entries(rrf(rankings2, s.rrf_k, self._source_weight), parsed, 2)
                    found2 = [self._result(e, parsed, kc=s.pass2_shards, qvec=qvec0) for e in entries2[: s.pass2_entries]]
                top1 = max((r.rrf_score for r in out.results), default=0.0)
                top2 = max((r.rrf_score for r in found2), default=0.0)
                out.results, added = merge_passes(out.results, found2, top1 / top2 if top1 > 0 and top2 > 0 else 1.0)
                out.trace["rankings_pass2"] = rankings2
                passes.append(PassInfo(2, refined, tuple(terms2.all_terms), s.pass2_entries, s.pass2_shards, len(found2), added, (time.perf_counter() - t) * 1000))
                timings["pass2"] = passes[-1].ms
                if not added:
                    out.analysis["pass2"] = "pass 2 found no entry pass 1 had not"
        out.passes = passes
        check()

        # always include (after the passes, so appended entries stay at the end)
        if s.always_include:
            t = time.perf_counter()
            out.results = out.results[: max(k, 0)] if not rerank else out.results
            self._always_include(out, parsed, terms)
            timings["always_include"] = (time.perf_counter() - t) * 1000

        # 6. rerank
        if rerank and self.reranker is not None:
            t = time.perf_counter()
            searched_part = [r for r in out.results if r.source == "search"]
            appended = [r for r in out.results if r.source != "search"]
            reranked, meta = self.reranker.rerank(parsed.text, searched_part, query_vector=qvec0)
            out.results = reranked + appended
            out.rerank = meta
            timings["rerank"] = (time.perf_counter() - t) * 1000
        else:
            out.rerank = {"applied": False}
        check()

        searched_results = [r for r in out.results if r.source == "search"][:k]
        out.results = searched_results + [r for r in out.results if r.source != "search"]

        # 7. quality and advisory
        t = time.perf_counter()
        out.quality = assess_quality(searched_results, qvecs is not None)
        timings["quality"] = (time.perf_counter() - t) * 1000
        out.stats["final_results"] = len(out.results)
        out.mode = {
            "dense": qvecs is not None,
            "model_state": self.index.model_state,
            "runtime": self.index.runtime,
            "terms": terms.source,
            "analyser": analysis.analyser if analysis else None,
            "llm_tokens": budget.used,
            "two_pass": two_pass,
            "rerank": bool(rerank),
            "cached": False,
        }
        timings["total"] = (time.perf_counter() - t_start) * 1000
        out.timings_ms = timings
        if record:
            self._record(out)
        # A search that fell back from the LLM is not kept: the next one may reach it again.
        fell_back = "->" in terms.source or (analysis is not None and "->" in analysis.analyser) or \
            any(w.startswith("pass 2: LLM") for w in out.warnings)
        if not fell_back:
            with self._cache_lock:
                self._cache[key] = out
                while len(self._cache) > self.settings.search.cache_size:
                    self._cache.popitem(last=False)
        return out

    # -- stages ------------------------------------------------------------------------------
    def _write_terms(self, text: str, budget: Budget | None = None) -> SearchTerms:
        if self.term_writer is not None:
            try:
                terms = _call_with_budget(self.term_writer, budget, text)
            except Exception as exc:  # noqa: BLE001 - any writer failure falls back to keywords
                terms = replace(keyword_terms(text, self._idf, self.settings.search.keyword_terms),
                                warnings=(f"term writer failed ({exc}); keyword terms used",))
        else:
            terms = keyword_terms(text, self._idf, self.settings.search.keyword_terms)
        cleaned, warns = clamp_terms(list(terms.terms))
        return replace(terms, terms=tuple(cleaned[: self.settings.search.max_terms]), warnings=tuple(terms.warnings) + tuple(warns))

    def _idf(self, token: str) -> float:
        return self.index.bm25.idf().get(token, 0.0)

    def _encode(self, texts: list[str]) -> dict[str, np.ndarray] | None:
        emb = self.index.embedder()
        if emb is None:
            return None
        vecs = emb.encode(texts)
        return dict(zip(texts, vecs))

    def _retrieve(
        self,
        terms: SearchTerms,
        qvecs: dict[str, np.ndarray] | None,
        allowed: set[str] | None,
        timings: dict[str, float],
        prefix: str,
        depth: int | None = None,
        corrections: list[Correction] | None = None,
    ) -> list[Ranking]:
        """One BM25 and one dense ranking per term (the dense side scans the matrix once for all
        terms), the name ranking of the query, and the dense feedback ranking.

        BM25 and the name ranking search a misspelt word's `corrections` in its place.
        """
        s = self.settings.search
        depth = max(depth or 0, s.candidates)
        fetch = self._shard_depth(depth)
        rankings: list[Ranking] = []
        t0 = time.perf_counter()
        bm_mask = self.index.bm25.mask(allowed) if allowed is not None else None
        for i, term in enumerate(terms.all_terms):
            tw = s.query_weight if i == 0 else s.term_weight
            if i and s.term_retrievers == "dense":
                continue
            toks = tokenize(term)
            if corrections:
                toks = corrected_tokens(toks, corrections)
            items = self._note_depth(lambda n: self.index.bm25.top(toks, n, bm_mask), fetch, depth) if toks else []
            rankings.append(Ranking(term, "bm25", s.bm25_weight, tw, tuple(items)))
        timings[prefix + "bm25"] = timings.get(prefix + "bm25", 0.0) + (time.perf_counter() - t0) * 1000
        if qvecs is not None:
            t0 = time.perf_counter()
            embedded = [t for i, t in enumerate(terms.all_terms)
                        if t in qvecs and (i == 0 or s.term_retrievers != "bm25")]
            de_mask = self.index.dense.mask(allowed) if allowed is not None else None
            if embedded:
                matrix = np.stack([qvecs[t] for t in embedded])
                hits = self.index.dense.search_many(matrix, fetch, s.dense_threshold, de_mask)
                for j, (term, items) in enumerate(zip(embedded, hits)):
                    tw = s.query_weight if term == terms.all_terms[0] else s.term_weight
                    row = matrix[j : j + 1]
                    items = self._note_depth(
                        lambda n: self.index.dense.search_many(row, n, s.dense_threshold, de_mask)[0], fetch, depth, items)
                    rankings.append(Ranking(term, "dense", s.dense_weight, tw, tuple(items)))
            timings[prefix + "dense"] = timings.get(prefix + "dense", 0.0) + (time.perf_counter() - t0) * 1000
        if s.name_weight > 0:
            t0 = time.perf_counter()
            named = self._name_ranking(terms.all_terms[0], rankings, allowed, depth, corrections or [])
            if named is not None:
                rankings.append(named)
            timings[prefix + "names"] = timings.get(prefix + "names", 0.0) + (time.perf_counter() - t0) * 1000
        if qvecs is not None:
            query = terms.all_terms[0]
            if s.feedback_shards > 0 and query in qvecs:
                t0 = time.perf_counter()
                fb = self._feedback(query, qvecs[query], rankings, fetch, depth, de_mask)
                if fb is not None:
                    rankings.append(fb)
                timings[prefix + "feedback"] = (time.perf_counter() - t0) * 1000
        return rankings

    def _feedback(
        self, query: str, qvec: np.ndarray, rankings: list[Ranking], fetch: int, depth: int, mask: np.ndarray | None
    ) -> Ranking | None:
        """The dense feedback ranking: the query vector moved toward the best fused passages.

        Rocchio feedback on the embeddings: the vectors of the top `feedback_shards` fused shards
        that are semantic matches of the query (in its dense ranking, so above the cosine floor;
        one per note) are averaged, added to the query vector with weight `feedback_beta`, and
        the normalised sum searches the matrix like a query (same cosine floor, same depth). The
        ranking's `sources` name the shards it was built from.
        """
        s = self.settings.search
        semantic = {nid for r in rankings if r.retriever == "dense" and r.term == query for nid, _ in r.items}
        seen: set[str] = set()
        used: list[str] = []
        vecs: list[np.ndarray] = []
        for f in rrf(rankings, s.rrf_k, self._source_weight):
            shard = self.index.shards.get(f.node_id)
            if shard is None or shard.path in seen or f.node_id not in semantic:
                continue
            vec = self.index.dense.vector(f.node_id)
            if vec is None:
                continue
            seen.add(shard.path)
            used.append(f.node_id)
            vecs.append(vec)
            if len(vecs) == s.feedback_shards:
                break
        if not vecs:
            return None
        moved = np.asarray(qvec, dtype=np.float32) + s.feedback_beta * np.mean(vecs, axis=0)
        norm = float(np.linalg.norm(moved))
        if norm == 0.0:
            return None
        row = (moved / norm).reshape(1, -1).astype(np.float32)
        items = self._note_depth(lambda n: self.index.dense.search_many(row, n, s.dense_threshold, mask)[0], fetch, depth)
        return Ranking(query, "feedback", s.feedback_weight, s.query_weight, tuple(items), tuple(used))

    def _corrections(self, text: str) -> list[Correction]:
        """Typo corrections of `text`'s words against the BM25 vocabulary (call under the index lock)."""
        if not self.settings.search.typo_tolerance or not text:
            return []
        return self._speller.corrections(text, self.index.bm25.idf(), self.index.bm25.doc_freq)

    def _name_ranking(
        self, query: str, rankings: list[Ranking], allowed: set[str] | None, depth: int, corrections: list[Correction]
    ) -> Ranking | None:
        """The name ranking (explorer.search.names): notes whose names the query names.

        Each named note is credited through one of its shards: the best one in the fused BM25 and
        dense rankings so far, or its first shard when they did not find it.
        """
        s = self.settings.search
        toks = tokenize(query)
        if corrections:
            toks = corrected_tokens(toks, corrections)
        if not toks:
            return None
        self._names.refresh(self.index.notes, self.index.version)
        by_path = self.index.shards_by_path

        def first_shard(path: str) -> str | None:
            for node_id in by_path.get(path, ()):
                if allowed is None or node_id in allowed:
                    return node_id
            return None

        idf = self.index.bm25.idf()
        found = self._names.search(toks, lambda t: idf.get(t, 0.0), depth,
                                   allowed=None if allowed is None else lambda p: first_shard(p) is not None)
        if not found:
            return None
        best: dict[str, str] = {}
        for f in rrf(rankings, s.rrf_k, self._source_weight):
            shard = self.index.shards.get(f.node_id)
            if shard is not None:
                best.setdefault(shard.path, f.node_id)
        items = []
        for path, score in found:
            node_id = best.get(path) or first_shard(path)
            if node_id is not None:
                items.append((node_id, score))
        return Ranking(query, "name", s.name_weight, s.query_weight, tuple(items)) if items else None

    def _shard_depth(self, notes: int) -> int:
        """Shards to fetch so that a ranking usually reaches `notes` distinct notes in one go."""
        n_notes = max(1, len(self.index.notes))
        per_note = len(self.index.shards) / n_notes
        return max(notes, int(notes * per_note * 2) + 16)

    def _note_depth(
        self,
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
        while True:
            seen: set[str] = set()
            for i, (node_id, _score) in enumerate(items):
                shard = self.index.shards.get(node_id)
                path = shard.path if shard is not None else node_id
                if path not in seen:
                    if len(seen) == notes:
                        return items[:i]
                    seen.add(path)
            if len(items) < n:
                return items
            n *= 4
            items = fetch(n)

    def _source_weight(self, node_id: str) -> float:
        shard = self.index.shards.get(node_id)
        if shard is None:
            return 1.0
        return self._weights.get(shard.source_type, 1.0)

    def _facts(self) -> set[str]:
        """node_ids of knowledge shards, cached per index version."""
        if self._facts_cache[0] != self.index.version:
            facts = {nid for nid, sh in self.index.shards.items() if sh.source_type == "fact"}
            self._facts_cache = (self.index.version, facts)
        return self._facts_cache[1]

    def _allowed(self, parsed: ParsedQuery) -> set[str] | None:
        if not (parsed.tags or parsed.paths or parsed.files or parsed.sections or parsed.phrases or parsed.excluded):
            return None
        out = set()
        excluded_tokens = [tokenize(x) for x in parsed.excluded]
        for node_id, shard in self.index.shards.items():
            note = self.index.notes.get(shard.path)
            if note is None:
                continue
            if parsed.tags and not all(_has_tag(note.tag_names, t) for t in parsed.tags):
                continue
            low_path = shard.path.lower()
            if parsed.paths and not all(p.lower() in low_path for p in parsed.paths):
                continue
            if parsed.files and not all(f.lower() in low_path.rsplit("/", 1)[-1] for f in parsed.files):
                continue
            if parsed.sections and not all(any(sec.lower() in h.lower() for h in shard.heading_path) for sec in parsed.sections):
                continue
            low_text = shard.text.lower()
            if parsed.phrases and not all(" ".join(p.lower().split()) in " ".join(low_text.split()) for p in parsed.phrases):
                continue
            if excluded_tokens:
                toks = set(self.index.tokens(node_id))
                if any(ex and all(t in toks for t in ex) for ex in excluded_tokens):
                    continue
            out.add(node_id)
        return out

    def _entries(self, fused: list[Fused], parsed: ParsedQuery, pass_: int) -> list[_Entry]:
        by_path: dict[str, _Entry] = {}
        order: list[_Entry] = []
        for f in fused:
            shard = self.index.shards.get(f.node_id)
            if shard is None:
                continue
            entry = by_path.get(shard.path)
            if entry is None:
                entry = _Entry(shard.path, [f], pass_)
                by_path[shard.path] = entry
                order.append(entry)
            else:
                entry.fused.append(f)
        return order

    def _result(self, entry: _Entry, parsed: ParsedQuery, kc: int, qvec: np.ndarray | None = None) -> SearchResult:
        best = entry.fused[0] if entry.fused else None
        note = self.index.notes[entry.path]
        words = query_words(parsed.text) if parsed.text else []
        shards: list[ContextShard] = []
        for f in entry.fused[:kc]:
            sh = self.index.shards.get(f.node_id)
            if sh is None:
                continue
            shards.append(make_context_shard(sh, words, parsed.phrases, f.score, entry.pass_))
        if not shards:
            first = self.index.shards_by_path.get(entry.path, [])
            if first:
                shards.append(make_context_shard(self.index.shards[first[0]], words, parsed.phrases, 0.0, entry.pass_))
        bm25_rank = min((c.rank for f in entry.fused for c in f.contributions if c.retriever == "bm25"), default=None)
        dense_rank = min((c.rank for f in entry.fused for c in f.contributions if c.retriever == "dense"), default=None)
        explanation = None
        if best is not None:
            explanation = Explanation(
                rrf_k=self.settings.search.rrf_k,
                best_node_id=best.node_id,
                contributions=best.contributions,
                fused_score=best.score,
                source_weight=best.contributions[0].source_weight if best.contributions else 1.0,
                pass_=entry.pass_,
                shards_matched=len(entry.fused),
            )
        top = shards[0] if shards else None
        rel = self._relevance(entry, words, qvec, kc) if best is not None else 0.0
        return SearchResult(
            document_path=entry.path,
            title=note.title,
            source_type=note.source_type,
            node_id=best.node_id if best else (top.node_id if top else entry.path),
            rrf_score=best.score if best else 0.0,
            score=best.score if best else 0.0,
            bm25_rank=bm25_rank,
            embedding_rank=dense_rank,
            snippet=snippet(top.text, top.highlights, top.start) if top else "",
            source=entry.source,
            pass_=entry.pass_,
            reason=entry.reason,
            relevance=rel,
            context_shards=tuple(shards),
            explanation=explanation,
        )

    def _relevance(self, entry: _Entry, words: list[str], qvec: np.ndarray | None, kc: int) -> float:
        """0-1 (explorer.search.quality.relevance): the entry's best cosine to the query vector and
        the IDF-weighted coverage of the query's words by its top `kc` retrieved shards."""
        ids = [f.node_id for f in entry.fused[: max(kc, 1)]]
        toks: set[str] = set()
        for node_id in ids:
            toks.update(self.index.tokens(node_id))
        n_docs = len(self.index.bm25)
        cover = coverage(words, toks, lambda w: token_idf(n_docs, self.index.bm25.doc_freq(w)))
        cos: float | None = None
        if qvec is not None:
            sims = [float(np.dot(v, qvec)) for v in (self.index.dense.vector(n) for n in ids) if v is not None]
            cos = max(sims) if sims else None
        return relevance(cos, cover)

    def _analyse(self, query: str, results: SearchResults, budget: Budget | None = None) -> Analysis:
        from explorer.search.twopass import heuristic_analysis

        if self.analyser is not None and self.settings.search.analyser != "heuristic":
            try:
                return _call_with_budget(self.analyser, budget, query, results)
            except Exception as exc:  # noqa: BLE001 - any analyser failure falls back to the heuristic
                fallback = heuristic_analysis(query, results, self.index)
                name = getattr(self.analyser, "name", "analyser")
                return replace(fallback, analyser=f"{name}->heuristic", reason=f"analyser failed ({exc}); {fallback.reason}")
        return heuristic_analysis(query, results, self.index)

    def _always_include(self, out: SearchResults, parsed: ParsedQuery, terms: SearchTerms) -> None:
        have = {r.document_path for r in out.results}
        add: list[tuple[str, str]] = []
        notes = self.index.notes
        if terms.include_preferences:
            prefs = sorted((p for p, n in notes.items() if n.source_type == "preference"), key=lambda p: p)
            add.extend((p, "preferences") for p in prefs)
        if terms.include_n_minus_1:
            latest = latest_turn(notes)
            if latest:
                add.append((latest, "most recent turn (N-1)"))
        for ref in parsed.references:
            target = self.index.links().resolve(ref)
            if target:
                add.append((target, f"referenced as [[{ref}]]"))
        for m in _TURN.finditer(parsed.raw):
            num = int(m.group(1))
            for p, n in notes.items():
                tm = _TURN.search(p)
                if n.source_type == "turn_summary" and tm and int(tm.group(1)) == num:
                    add.append((p, f"referenced turn {num}"))
        for path, why in add:
            if path in have or path not in notes:
                continue
            have.add(path)
            entry = _Entry(path, [], pass_=1, source="always_include", reason=why)
            out.results.append(self._result(entry, parsed, kc=1))

    def _browse(self, parsed: ParsedQuery, k: int) -> SearchResults:
        with self.index.lock:
            allowed = self._allowed(parsed) or set()
            paths = sorted({self.index.shards[n].path for n in allowed})
            results = []
            for path in paths[:k]:
                ids = [n for n in self.index.shards_by_path.get(path, []) if n in allowed]
                fused = [Fused(n, 0.0, (), 0) for n in ids]
                results.append(self._result(_Entry(path, fused, 1), parsed, kc=self.settings.search.shards_per_entry))
            stats = self._stats(False)
        out = SearchResults(
            query=parsed.raw, search_terms_used=[], results=results, stats=stats,
            filters=parsed.filters_dict(), mode={"browse": True, "dense": False}, searched_sources=["all"],
        )
        self._always_include(out, parsed, SearchTerms(query="", terms=(), source="keywords"))
        stats["final_results"] = len(out.results)
        return out

    def _stats(self, dense: bool) -> dict[str, Any]:
        st = self.index.stats()
        return {
            "total_documents_searched": st.notes,
            "total_shards_searched": st.shards,
            "bm25_matches": 0,
            "embedding_matches": 0,
            "final_results": 0,
            "shards_without_vectors": st.pending,
            "dense_available": dense,
            "index_version": st.version,
        }

    def _record(self, out: SearchResults) -> None:
        from explorer.search.quality import diminishing_returns

        rankings = out.trace.get("rankings", [])
        out.stats["bm25_matches"] = len({n for r in rankings if r.retriever == "bm25" for n, _ in r.items})
        out.stats["embedding_matches"] = len({n for r in rankings if r.retriever == "dense" for n, _ in r.items})
        searched = [r for r in out.results if r.source == "search"]
        ids = [r.document_path for r in searched]
        top = max((r.relevance for r in searched[:3]), default=0.0)
        out.advisory = diminishing_returns(self.history, out.query, ids, top)
        self.history.append({"query": out.query, "ids": ids, "top": top, "time": time.time()})
        del self.history[:-50]


def make_context_shard(shard: Shard, words: list[str], phrases: tuple[str, ...] | list[str], score: float, pass_: int) -> ContextShard:
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


def latest_turn(notes: dict) -> str | None:
    """Path of the most recent turn summary (highest turn number)."""
    best: tuple[int, str] | None = None
    for path, note in notes.items():
        if note.source_type != "turn_summary":
            continue
        m = _TURN.search(path)
        num = int(m.group(1)) if m else -1
        if best is None or (num, path) > best:
            best = (num, path)
    return best[1] if best else None


def assess_quality(results: list[SearchResult], dense: bool):
    """Quality of a result list (see explorer.search.quality)."""
    from explorer.search.quality import assess

    return assess(results, dense)


def _has_tag(tags: tuple[str, ...], wanted: str) -> bool:
    return any(t == wanted or t.startswith(wanted + "/") for t in tags)


def _call_with_budget(fn: Callable[..., Any], budget: Budget | None, *args: Any) -> Any:
    """Call a term writer or analyser, handing it the search's token budget when it takes one."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    if budget is not None and ("budget" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())):
        return fn(*args, budget=budget)
    return fn(*args)
