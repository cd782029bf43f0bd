"""“Why not?”: where a note the user expected ranked at each stage of a search, where it dropped out,
and what would bring it into the top k — each such claim run before it is stated (`prove`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from explorer.index.backend import IndexBackend, ModelState, Snapshot
from explorer.search.core.query import MAX_QUERY_FILTERS, parse_query
from explorer.search.quality import COS_FLOOR
from explorer.search.schema import Ranking, SearchResults
from explorer.text.tokenize import is_stopword, tokenize

if TYPE_CHECKING:
    import numpy as np

    from explorer.config import Settings
    from explorer.search.core.pipeline import SearchPipeline


@dataclass(frozen=True, slots=True)
class StageRow:
    """One stage of the search as the expected note lived through it."""

    stage: str
    """The stage: `bm25 “term”`, `dense “term”`, `fusion`, `final list`, …"""
    outcome: str
    """What happened to the note there, e.g. `#7 (8.436)` or `not retrieved`."""
    found: bool
    """True when the note was present at this stage."""


@dataclass(frozen=True, slots=True)
class WhyNotReport:
    """The answer to “why is this note not (higher) in the results?”."""

    name: str
    """What the user typed."""
    path: str | None
    """The note it resolved to (None: no such note)."""
    rows: tuple[StageRow, ...]
    """Stage by stage."""
    verdict: str
    """Where it dropped out, in a sentence."""


def resolve_note(index: IndexBackend, name: str, snap: Snapshot | None = None) -> str | None:
    """The indexed note a user means by `name`: a path or link target (the index's `resolve_note`),
    else a title, else a unique part of a path or title (the titles of `snap`, else of a snapshot
    taken now)."""
    name = name.strip().strip("[]").strip()
    if not name:
        return None
    target = index.resolve_note(name)
    if target is not None:
        return target
    if snap is None:
        with index.snapshot() as now:
            return resolve_note(index, name, now)
    titles = {p: n.title for p, n in snap.notes.items()}
    low = name.lower()
    by_title = [p for p, title in titles.items() if title.lower() == low]
    if by_title:
        return sorted(by_title)[0]
    parts = [p for p in titles if low in p.lower()] or [
        p for p, title in titles.items() if low in title.lower()
    ]
    if len(parts) == 1:
        return parts[0]
    return None


def why_not(index: IndexBackend, results: SearchResults, name: str) -> WhyNotReport:
    """Trace note `name` through the rankings, the fusion and the final list of `results`
    (the note and its shards read from one snapshot of the index)."""
    with index.snapshot() as snap:
        return _why_not(index, snap, results, name)


def _why_not(index: IndexBackend, snap: Snapshot, results: SearchResults, name: str) -> WhyNotReport:
    path = resolve_note(index, name, snap)
    if path is None:
        reason = ""
        for skipped, why in index.skipped_files().items():
            if name.strip().lower() in skipped.lower():
                reason = f" ({skipped} is not indexed: {why})"
                break
        return WhyNotReport(name, None, (), f"No indexed note matches “{name}”{reason}.")
    settings = index.settings.experimental
    shard_ids = set(snap.shard_ids(path))
    rows: list[StageRow] = []
    rankings: list[Ranking] = results.trace.rankings
    rankings2: list[Ranking] = results.trace.rankings_pass2
    final_pos = next((i for i, r in enumerate(results.results, 1) if r.document_path == path), None)
    if not rankings and not rankings2:
        mode = results.mode
        what = (
            "a classic tool search"
            if mode.classic
            else "a filter-only listing"
            if mode.browse
            else "this search"
        )
        verdict = (
            f"Ranked #{final_pos}." if final_pos else "Not in the results."
        ) + f" No ranking trace for {what}."
        return WhyNotReport(name, path, (), verdict)

    def trace(ranks: list[Ranking], label: str) -> bool:
        any_hit = False
        for r in ranks:
            hit = next(((i, nid, s) for i, (nid, s) in enumerate(r.items, 1) if nid in shard_ids), None)
            stage = f"{label}{r.retriever} “{r.term}”"
            if hit is None:
                why = f"not in its {len(r.items)} results"
                if r.retriever in ("dense", "feedback"):
                    why += (
                        f" (cosine below {settings.dense_threshold:.2f} or deeper than {settings.candidates})"
                    )
                rows.append(StageRow(stage, why, False))
            else:
                any_hit = True
                rank, nid, score = hit
                rows.append(StageRow(stage, f"#{rank} ({score:.4g}) {nid}", True))
        return any_hit

    in_rankings = trace(rankings, "")
    if rankings2:
        in_rankings = trace(rankings2, "pass 2 ") or in_rankings

    # Pass 1's fused notes, as the fusion stage recorded them.
    entries = results.trace.entries
    entry_count = len(entries)
    entry_rank, fused_score = next(
        ((i, score) for i, (p, score) in enumerate(entries, 1) if p == path), (None, 0.0)
    )
    if entry_rank is not None:
        rows.append(
            StageRow(
                "fusion (pass 1)", f"entry #{entry_rank} of {entry_count} (fused {fused_score:.5f})", True
            )
        )
    else:
        rows.append(StageRow("fusion (pass 1)", f"absent from {entry_count} fused entries", False))
    k = len([r for r in results.results if r.source == "search"])
    if final_pos is not None:
        res = results.results[final_pos - 1]
        how = f"#{final_pos} of {len(results.results)}, pass {res.pass_}"
        if res.source != "search":
            how += f", always-include ({res.reason})"
        rows.append(StageRow("final list", how, True))
    else:
        rows.append(StageRow("final list", f"absent (list of {len(results.results)})", False))

    note = snap.notes.get(path)
    if final_pos is not None:
        moved = ""
        res = results.results[final_pos - 1]
        if res.explanation and res.explanation.rerank:
            moved = f"; rerank {res.explanation.rerank.to_dict()}"
        verdict = f"It is in the results at #{final_pos}{moved}."
    elif (
        results.early_return
        and "fact" in results.searched_sources
        and note is not None
        and note.source_type != "fact"
    ):
        verdict = (
            "Knowledge-first returned early: only knowledge notes were searched, and this note is not one."
        )
    elif not in_rankings:
        verdict = (
            "No shard of it matched any search term: not in any BM25 list, and not similar enough "
            f"(cosine ≥ {settings.dense_threshold:.2f}) in any embedding list."
        )
        if not results.mode.dense:
            verdict += " Embeddings were not used for this search."
        if results.filters:
            verdict += f" The filters {results.filters} may exclude it."
    elif entry_rank is not None and entry_rank > k:
        verdict = f"Retrieved, but fused to entry #{entry_rank}: the list keeps the top {k}."
    elif results.rerank is not None and results.rerank.applied:
        verdict = f"Fused to entry #{entry_rank}, then pushed out of the top {k} by reranking."
    else:
        verdict = (
            "Retrieved only in the second pass, where it did not make the cut."
            if rankings2
            else f"Fused to entry #{entry_rank} but not kept."
        )
    return WhyNotReport(name, path, tuple(rows), verdict)


# -- a why-not that proves itself ---------------------------------------------------------------
#: How deep the list that says where a note ranks today goes (“ranks #27”).
DEEP_K = 50
#: Largest vault (notes) whose copy may be indexed to rehearse an edit (“if it contained …”).
REHEARSE_MAX_NOTES = 3000
#: Largest vault plus index (bytes) copied for that rehearsal.
REHEARSE_MAX_BYTES = 200 * 1024 * 1024
#: Content words of the query tried as additions to the note, one at a time (the rarest first),
#: then the two that moved it most together, then all of them together.
MAX_WORDS_TRIED = 4


@dataclass(frozen=True, slots=True)
class Change:
    """One counterfactual, run: the search again with one thing changed, and where the note landed."""

    kind: str
    """`floor` (dense cosine floor), `filter` (a filter of the query left out), `depth` (candidate
    depth), `rerank` (reranking off) or `word` (the note with query words added)."""
    value: str
    """The changed value as it was run: `0.35`, `-draft`, `150`, `off`, `proofing`, `cage clean`."""
    query: str
    """The query that was run (the filter claim runs the query without its filter)."""
    k: int
    """The list length it was run with."""
    rank: int | None
    """Where the note ranked in that run (None: not in its top k)."""
    claim: str
    """The sentence shown: what changes and what it would do, as the run found."""
    at: int | None = None
    """`word` only: the offset in the note's raw text where the words were written (a line of their own)."""
    deep: int | None = None
    """When the run left it out of the top k: where it ranked in the same run `DEEP_K` long (None: not there either)."""

    @property
    def holds(self) -> bool:
        """True when the change brings the note into the top k."""
        return self.rank is not None and self.rank <= self.k

    def to_dict(self) -> dict[str, Any]:
        """The change as JSON."""
        return {
            "kind": self.kind,
            "value": self.value,
            "query": self.query,
            "k": self.k,
            "rank": self.rank,
            "holds": self.holds,
            "claim": self.claim,
            **({"at": self.at} if self.at is not None else {}),
            **({"deep_rank": self.deep} if self.deep is not None else {}),
        }


@dataclass(frozen=True, slots=True)
class Proof:
    """A why-not answer whose every counterfactual was run before it is stated."""

    query: str
    """The query."""
    note: str
    """What the user named."""
    path: str | None
    """The note it resolved to (None: no such note)."""
    k: int
    """The list length asked for."""
    rank: int | None
    """Where the note ranks today, in a list `DEEP_K` long (None: not in it)."""
    facts: tuple[str, ...]
    """What holds today and explains the rank (read from the index and the search's trace)."""
    changes: tuple[Change, ...]
    """Counterfactuals run: those that hold first, then those stated as not enough."""
    unchecked: tuple[str, ...]
    """Counterfactuals not tried, with the reason (nothing unchecked is claimed)."""
    trace: WhyNotReport
    """The stage-by-stage trace of today's search."""
    advice: tuple[str, ...] = ()
    """In plain words: whether a word change can help, and if not what would."""

    @property
    def summary(self) -> str:
        """One line: the rank and the first change that holds, or the trace's verdict."""
        if self.path is None:
            return self.trace.verdict
        if self.rank is not None and self.rank <= self.k:
            return f"It ranks #{self.rank} (in the top {self.k})."
        where = f"ranks #{self.rank}" if self.rank is not None else f"is not in the first {DEEP_K}"
        good = [c for c in self.changes if c.holds]
        if good:
            return f"It {where}; {good[0].claim}"
        return f"It {where}; no change tried brings it into the top {self.k}."

    def to_dict(self) -> dict[str, Any]:
        """The proof as JSON."""
        return {
            "query": self.query,
            "note": self.path,
            "asked": self.note,
            "k": self.k,
            "rank": self.rank,
            "in_top_k": self.rank is not None and self.rank <= self.k,
            "summary": self.summary,
            "facts": list(self.facts),
            "changes": [c.to_dict() for c in self.changes if c.holds],
            "not_enough": [c.to_dict() for c in self.changes if not c.holds],
            "unchecked": list(self.unchecked),
            "advice": list(self.advice),
            "verdict": self.trace.verdict,
            "stages": [{"stage": r.stage, "outcome": r.outcome, "present": r.found} for r in self.trace.rows],
        }


def rank_of(results: SearchResults, path: str) -> int | None:
    """1-based position of note `path` in a result list (None: absent)."""
    return next((i for i, r in enumerate(results.results, 1) if r.document_path == path), None)


def with_tuning(settings: Any, **changes: Any) -> Any:
    """`settings` with `experimental` tuning values changed (frozen dataclasses: a new object)."""
    from dataclasses import replace

    return replace(settings, experimental=replace(settings.experimental, **changes))


def variant(pipeline: SearchPipeline, settings: Settings) -> SearchPipeline:
    """A pipeline like `pipeline` (same index and components) that runs with `settings`."""
    from explorer.search.core.pipeline import SearchPipeline

    return SearchPipeline(
        pipeline.index,
        settings,
        term_writer=pipeline.term_writer,
        analyser=pipeline.analyser,
        reranker=pipeline.reranker,
    )


def check_query(query: str) -> None:
    """Raise QueryError when `query` is longer than a search reads (MAX_QUERY_CHARS) or holds more
    filters than a search takes (MAX_QUERY_FILTERS): a proof runs the query again once per filter
    and per change, so it is bounded before any work; the message is one line."""
    from explorer.search.core.pipeline import MAX_QUERY_CHARS, QueryError, too_many_filters

    if len(query) > MAX_QUERY_CHARS:
        raise QueryError(
            f"the query is {len(query):,} characters; why-not takes at most {MAX_QUERY_CHARS:,} "
            "(a search reads no more)"
        )
    count = parse_query(query).filter_count
    if count > MAX_QUERY_FILTERS:
        raise QueryError(too_many_filters(count))


def prove(
    pipeline: SearchPipeline,
    query: str,
    name: str,
    k: int | None = None,
    make_pipeline: Callable[[Any, Any], Any] | None = None,
    rehearse: bool = True,
) -> Proof:
    """Why note `name` is not in the top `k` for `query`, with each counterfactual run before it is stated.

    Steps:
      1. run the search as asked; if the note is in the top k, say so;
      2. run it `DEEP_K` deep for the note's rank today, and trace it stage by stage (`why_not`);
      3. from the index, the facts: a filter of the query that leaves the note out, its best
         passage's cosine under the dense floor, its place past a retriever's candidate depth,
         the query's content words it lacks (not “how”, “do”, “I”: `content_words`), rarest first;
      4. for each, run the search with that one thing changed — the filter left out, the floor
         lowered under that cosine, the depth past that place, reranking off, a missing word added
         to the note in a private copy of the vault, then the two that moved it most together and
         all of them together (`make_pipeline` builds the pipeline over that copy; without it, or
         for a large vault, that claim is left unchecked) — and keep the rank the note reached (and,
         out of the top k, its rank in a `DEEP_K` list of the same run). The changes are listed
         holding first, then by how high each brought the note; one that does not bring it into
         the top k is stated as not enough;
      5. the advice, in plain words: whether a word change can help (not when a filter leaves the
         note out, or it holds every content word already, or none tried was enough), and if not
         what would — a change of step 4 that holds, else a list as long as its rank (run first).

    The facts of step 3 are read from one snapshot of the index; each run of step 4 is a search
    of its own, on the snapshot it takes.

    Raises:
        QueryError: the query cannot be searched, or is over the bounds of `check_query`.
    """
    check_query(query)
    index: IndexBackend = pipeline.index
    settings = pipeline.settings
    k = k or settings.search.top_k
    today = pipeline.search(query, k=k, record=False)
    trace = why_not(index, today, name)
    if trace.path is None:
        return Proof(query, name, None, k, None, (), (), (), trace)
    path = trace.path
    rank = rank_of(today, path)
    if rank is not None and rank <= k:
        return Proof(query, name, path, k, rank, (), (), (), trace)
    deep = pipeline.search(query, k=max(k, DEEP_K), record=False)
    rank = rank_of(deep, path)
    facts: list[str] = []
    changes: list[Change] = []
    unchecked: list[str] = []

    def run(
        kind: str,
        value: str,
        claim: str,
        *,
        pipe: Any = None,
        q: str | None = None,
        **options: Any,
    ) -> Change:
        res = (pipe or pipeline).search(q or query, k=k, record=False, **options)
        got = rank_of(res, path)
        deep = (
            None
            if got is not None
            else rank_of((pipe or pipeline).search(q or query, k=DEEP_K, record=False, **options), path)
        )
        change = Change(kind, value, q or query, k, got, f"{claim}, {_outcome(got, deep, k)}", deep=deep)
        changes.append(change)
        return change

    with index.snapshot() as snap:
        _facts(pipeline, snap, query, path, k, today, run, make_pipeline, rehearse, facts, changes, unchecked)
    changes.sort(key=_moved)
    advice = _advice(pipeline, query, path, k, rank, facts, changes)
    return Proof(
        query, name, path, k, rank, tuple(facts), tuple(changes), tuple(unchecked), trace, tuple(advice)
    )


def _advice(
    pipeline: SearchPipeline,
    query: str,
    path: str,
    k: int,
    rank: int | None,
    facts: list[str],
    changes: list[Change],
) -> list[str]:
    """In plain words: whether changing the note's words can help, and if not what would (each
    thing it says run: a longer list is searched before it is advised)."""
    out: list[str] = []
    words = [c for c in changes if c.kind == "word"]
    others = [c for c in changes if c.kind != "word" and c.holds]
    filters = [f.removeprefix("left out by ") for f in facts if f.startswith("left out by ")]
    if filters:
        out.append("No word added to the note can help: " + ", ".join(filters) + " leaves it out.")
    elif any(f.startswith("it contains every content word") for f in facts):
        out.append("No word change can help: it already contains every content word of the query.")
    elif any(f.startswith("the query has only common words") for f in facts):
        out.append("No word change can help: the query has no content word to add.")
    elif words and not any(c.holds for c in words):
        best = words[0]
        where = f", at best #{best.deep}" if best.deep is not None else ""
        out.append(
            f"No word change tried brings it into the top {k}: adding the words it lacks is not enough{where}."
        )
    if not out:
        return out
    if others:
        out.append("What would: " + others[0].claim + ".")
    elif filters:
        out.append("What would: searching without " + ", ".join(filters) + ".")
    elif (
        rank is not None and rank > k and (got := rank_of(pipeline.search(query, k=rank, record=False), path))
    ):
        out.append(f"What would: a longer list (-k {rank}), where it shows at #{got}.")
    else:
        out.append(f"No other change tried brings it into the top {k} either.")
    return out


def _facts(
    pipeline: SearchPipeline,
    snap: Snapshot,
    query: str,
    path: str,
    k: int,
    today: SearchResults,
    run: Callable[..., Change],
    make_pipeline: Callable[[Any, Any], Any] | None,
    rehearse: bool,
    facts: list[str],
    changes: list[Change],
    unchecked: list[str],
) -> None:
    """Steps 3 and 4 of `prove`: each fact read from `snap`, and the run that checks it (`run`,
    which adds its `Change`); what cannot be run goes to `unchecked`."""
    index: IndexBackend = pipeline.index
    settings = pipeline.settings
    parsed = parse_query(query)
    shard_ids = tuple(snap.shard_ids(path))

    # Filters of the query that leave the note out.
    if parsed.has_filters:
        for token, start, end in _filter_tokens(query):
            if _allows(index, snap, settings, token, shard_ids):
                continue
            facts.append(f"left out by {token}")
            rest = " ".join((query[:start] + " " + query[end:]).split())
            if rest:
                run(
                    "filter",
                    token,
                    f"left out by {token} — without it",
                    q=rest,
                )
    text = parsed.text
    excluded = any(f.startswith("left out by") for f in facts)

    # The dense floor: the best passage's cosine to the query, under the floor.
    qvec = (
        _query_vector(index, text)
        if text and index.model_state is ModelState.READY and today.mode.dense
        else None
    )
    if qvec is not None and not excluded:
        best = _best_cosine(snap, shard_ids, qvec)
        floor = _dense_floor(snap.neighbours, settings)
        if best is not None and best < floor:
            lowered = _floor_under(best)
            facts.append(f"its best passage's cosine {best:.3f} is under the {floor:.2f} floor")
            if lowered < COS_FLOOR:
                unchecked.append(
                    f"a lower floor: {best:.3f} is where unrelated passages sit (under {COS_FLOOR:.2f})"
                )
            else:
                run(
                    "floor",
                    f"{lowered:.2f}",
                    f"with the floor at {lowered:.2f}",
                    pipe=variant(pipeline, with_tuning(settings, dense_threshold=lowered)),
                )

    # Candidate depth: the note's place in the query's BM25 (and dense) ranking of notes.
    if text and not excluded:
        depth = settings.experimental.candidates
        places = _note_places(snap, path, text, qvec, _dense_floor(snap.neighbours, settings))
        past = {who: place for who, place in places.items() if place > depth}
        for who, place in sorted(past.items()):
            facts.append(
                f"it is note #{place} in {who}'s ranking of “{text}”, past the {depth}-note candidate depth"
            )
        if past:
            deeper = _round_up(max(past.values()))
            run(
                "depth",
                str(deeper),
                f"with a candidate depth of {deeper}",
                pipe=variant(pipeline, with_tuning(settings, candidates=deeper)),
            )

    # Reranking moved it out.
    if today.rerank is not None and today.rerank.applied:
        run("rerank", "off", "without reranking", rerank=False)

    # Query words it lacks.
    if text and not excluded:
        _word_facts(pipeline, snap, query, text, path, k, make_pipeline, rehearse, facts, changes, unchecked)


def content_words(text: str) -> list[str]:
    """The query's content words as typed, once each by their folded form: the words a note can
    lack (common function words such as “how”, “do”, “I” are left out)."""
    seen: set[tuple[str, ...]] = set()
    out: list[str] = []
    for raw in text.split():
        word = raw.strip(".,;:!?\"'()[]{}<>")
        toks = tuple(t for t in tokenize(word) if t)
        if not toks or is_stopword(word) or all(is_stopword(t) for t in toks) or toks in seen:
            continue
        seen.add(toks)
        out.append(word)
    return out


def _word_facts(
    pipeline: SearchPipeline,
    snap: Snapshot,
    query: str,
    text: str,
    path: str,
    k: int,
    make_pipeline: Callable[[Any, Any], Any] | None,
    rehearse: bool,
    facts: list[str],
    changes: list[Change],
    unchecked: list[str],
) -> None:
    """The query's content words the note lacks, rarest first (a rare word moves a ranking most),
    and each rehearsed: alone, then the ones that moved it most together."""
    index: IndexBackend = pipeline.index
    have: set[str] = set()
    for node_id in snap.shard_ids(path):
        have.update(snap.lexical.tokens(node_id))
    words = content_words(text)
    if not words:
        facts.append(
            "the query has only common words (such as “how”, “do”, “the”): no word of it picks a note out"
        )
        return
    missing = [w for w in words if not all(t in have for t in tokenize(w))]
    if not missing:
        facts.append(
            "it contains every content word of the query (" + ", ".join(f"“{w}”" for w in words) + ")"
        )
        return
    missing.sort(key=lambda w: min((snap.lexical.doc_freq(t) for t in tokenize(w)), default=0))
    facts.append("it lacks " + ", ".join(f"“{w}”" for w in missing))
    why_skip = _rehearsal_blocked(index, len(snap.notes), make_pipeline, rehearse)
    if not why_skip and not path.lower().endswith(".md"):
        why_skip = "only a Markdown note's text can be edited as text (this one is read from another format)"
    if why_skip:
        unchecked.append(f"adding a missing word: {why_skip}")
        return
    assert make_pipeline is not None
    at = _passage_end(snap, path, query)
    tried = missing[:MAX_WORDS_TRIED]
    if len(missing) > MAX_WORDS_TRIED:
        unchecked.append(
            "adding "
            + ", ".join(f"“{w}”" for w in missing[MAX_WORDS_TRIED:])
            + f": only the {MAX_WORDS_TRIED} rarest missing words are tried"
        )
    try:
        changes.extend(rehearse_words(index, pipeline.settings, make_pipeline, path, query, tried, k, at))
    except OSError as exc:
        unchecked.append(f"adding a missing word: the vault could not be copied ({_copy_error(exc)})")


def _outcome(got: int | None, deep: int | None, k: int) -> str:
    """What a run found, as the end of a claim."""
    if got is not None:
        return f"it would rank #{got}"
    if deep is not None:
        return f"it would be #{deep} in a list of {DEEP_K}, still outside the top {k} (not enough)"
    return f"it would still be outside the top {k} (not enough)"


def _moved(change: Change) -> tuple[bool, int, int]:
    """Order of changes: those that hold first, then by the rank reached (a longer list's when the
    top k left it out), fewer words first."""
    where = change.rank if change.holds else change.deep
    return (not change.holds, where if where is not None else 10**9, len(change.value.split()))


def rehearse_words(
    index: IndexBackend,
    settings: Any,
    make_pipeline: Callable[[Any, Any], Any],
    path: str,
    query: str,
    words: list[str],
    k: int,
    at: int | None = None,
) -> list[Change]:
    """For each word, the note's rank for `query` if it contained that word, then for the two words
    that moved it most together and for all of them together: the vault copied to a temporary
    folder (with its index, so only the edited note is read and embedded again), the words written
    into the note's best passage (one line), the copy re-indexed and searched (`DEEP_K` deep too
    when the top k leaves it out)."""
    import shutil
    import tempfile
    from dataclasses import replace
    from pathlib import Path

    out: list[Change] = []
    with tempfile.TemporaryDirectory(prefix="explorer-whynot-") as tmp:
        root = Path(tmp) / "vault"
        cache = Path(tmp) / "cache"
        skip = [".explorer"] + ([index.cache_dir.name] if index.cache_dir.parent == index.root else [])
        ignored = shutil.ignore_patterns(*skip)
        shutil.copytree(
            index.root,
            root,
            symlinks=True,
            ignore=lambda folder, names: ignored(folder, names) | _special_files(folder, names),
        )
        if index.cache_dir.is_dir():
            shutil.copytree(index.cache_dir, cache, symlinks=True, ignore=_special_files)
        copy_settings = replace(settings, index=replace(settings.index, cache_dir=str(cache)))
        copy = index.local_copy(root, copy_settings)
        try:
            copy.open()
            copy.embed_pending()
            file = root / path
            original = file.read_bytes()
            text = original.decode("utf-8")
            at = len(text) if at is None else max(0, min(at, len(text)))
            pipe = make_pipeline(copy, copy_settings)

            def attempt(added: tuple[str, ...]) -> Change:
                line = " ".join(added)
                file.write_text(text[:at] + f"\n{line}\n" + text[at:], encoding="utf-8")
                copy.refresh(paths=[path], reread=True)
                copy.embed_pending()
                got = rank_of(pipe.search(query, k=k, record=False), path)
                deep = None if got is not None else rank_of(pipe.search(query, k=DEEP_K, record=False), path)
                file.write_bytes(original)
                quoted = [f"“{w}”" for w in added]
                said = ", ".join(quoted[:-1]) + " and " + quoted[-1] if len(quoted) > 1 else quoted[0]
                return Change(
                    "word", line, query, k, got, f"if it contained {said}, {_outcome(got, deep, k)}", at, deep
                )

            singles = [attempt((word,)) for word in words]
            out.extend(singles)
            # Together: the words that moved it most, two of them, then all that were tried.
            best = [c.value for c in sorted(singles, key=_moved)]
            for size in sorted({min(2, len(best)), len(best)}):
                if size > 1:
                    out.append(attempt(tuple(best[:size])))
            copy.refresh(paths=[path], reread=True)
        finally:
            copy.close()
    return out


def _special_files(folder: str, names: list[str]) -> set[str]:
    """The entries of `folder` that are neither folders, regular files nor links: pipes, sockets and
    devices, left out of a copy as indexing leaves them out (copying a pipe would wait for a writer)."""
    import os
    import stat

    out = set()
    for name in names:
        try:
            mode = os.lstat(os.path.join(folder, name)).st_mode
        except OSError:
            continue
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            out.add(name)
    return out


def _copy_error(exc: OSError) -> str:
    """A failed copy as one plain line: the first file that failed and why, and how many more."""
    import shutil

    errors = exc.args[0] if isinstance(exc, shutil.Error) and exc.args else None
    if isinstance(errors, list) and errors and isinstance(errors[0], tuple) and len(errors[0]) == 3:
        src, _dst, why = errors[0]
        more = f" and {len(errors) - 1} more" if len(errors) > 1 else ""
        return " ".join(f"{src}: {why}{more}".split())
    return " ".join(str(exc.strerror or exc).split())


def _rehearsal_blocked(
    index: IndexBackend,
    notes: int,
    make_pipeline: Callable[[IndexBackend, Settings], SearchPipeline] | None,
    rehearse: bool,
) -> str:
    """Why an edit of the note cannot be rehearsed here ('' when it can); `notes`: the vault's note count."""
    if not rehearse or make_pipeline is None:
        return "not asked for"
    if notes > REHEARSE_MAX_NOTES:
        return f"the vault has more than {REHEARSE_MAX_NOTES} notes to copy"
    size = 0
    for root in (index.root, index.cache_dir):
        for p in root.rglob("*") if root.is_dir() else ():
            try:
                if p.is_file() and not p.is_symlink():
                    size += p.stat().st_size
            except OSError:
                continue
            if size > REHEARSE_MAX_BYTES:
                return f"the vault and its index are over {REHEARSE_MAX_BYTES // (1024 * 1024)} MB to copy"
    return ""


def _passage_end(snap: Snapshot, path: str, query: str) -> int | None:
    """Where a word goes: the end of the note's passage that shares most words with the query
    (its first passage when none does), as an offset in the raw text (None: the note has no passage)."""
    words = set(tokenize(query))
    best, best_hits = None, -1
    for node_id in snap.shard_ids(path):
        shard = snap.shards.get(node_id)
        if shard is None:
            continue
        hits = len(words & set(snap.lexical.tokens(node_id)))
        if hits > best_hits:
            best, best_hits = shard, hits
    return best.end if best is not None else None


def _filter_tokens(query: str) -> list[tuple[str, int, int]]:
    """Each filter of `query` as typed (`tag:pets`, `-draft`, `"..."` is not a filter), with its
    start and end in `query` (the query without it is made only for a filter that is run)."""
    import re

    out = []
    for m in re.finditer(r'-?(?:\w+:)?"[^"]*"|\S+', query):
        token = m.group(0)
        parsed = parse_query(token)
        if parsed.has_filters and not parsed.text and not parsed.references:
            out.append((token, m.start(), m.end()))
    return out


def _allows(
    index: IndexBackend, snap: Snapshot, settings: Settings, token: str, shard_ids: tuple[str, ...]
) -> bool:
    """True when filter `token` keeps at least one shard of the note."""
    from explorer.search.core.retrieve import Retriever

    allowed = Retriever(index, settings, {}).allowed(snap, parse_query(token))
    return allowed is None or any(n in allowed for n in shard_ids)


def _query_vector(index: IndexBackend, text: str) -> Any:
    """The query's vector from the index's model (None: no model)."""
    emb = index.embedder()
    return emb.encode([text])[0] if emb is not None else None


def _best_cosine(snap: Snapshot, shard_ids: tuple[str, ...], qvec: np.ndarray | None) -> float | None:
    """The best cosine between the query vector and the note's passages (None: no vectors)."""
    import numpy as np

    best = None
    q = np.asarray(qvec, dtype=np.float32)
    for node_id in shard_ids:
        vec = snap.vector(node_id)
        if vec is not None:
            cos = float(np.dot(q, vec))
            best = cos if best is None else max(best, cos)
    return best


def _dense_floor(neighbours: Mapping[str, Any], settings: Any) -> float:
    """The cosine floor the dense rankings used: `experimental.dense_threshold`, or under score fusion
    (conversation vaults: `neighbours`, the snapshot's adjacent turns, not empty) the floor of
    unrelated texts when that is lower (as the pipeline does)."""
    s = settings.experimental
    score = s.fusion == "score" or (s.fusion == "auto" and bool(neighbours))
    return min(s.dense_threshold, COS_FLOOR) if score else s.dense_threshold


def _floor_under(cosine: float) -> float:
    """A floor a step under `cosine`: the multiple of 0.05 below it (0.38 -> 0.35)."""
    import math

    return max(-1.0, math.floor(cosine * 20 - 1e-9) / 20)


def _round_up(place: int) -> int:
    """A candidate depth that reaches note #`place`: the next multiple of 50."""
    return ((place + 49) // 50) * 50


def _note_places(
    snap: Snapshot, path: str, text: str, qvec: np.ndarray | None, floor: float
) -> dict[str, int]:
    """The note's place among notes in the query's BM25 ranking and dense ranking (above the floor),
    counting each note once at its best passage; a retriever that does not find it is left out."""
    import numpy as np

    def place(items: list[tuple[str, float]]) -> int | None:
        seen: set[str] = set()
        for node_id, _score in items:
            shard = snap.shards.get(node_id)
            p = shard.path if shard is not None else node_id
            if p not in seen:
                seen.add(p)
                if p == path:
                    return len(seen)
        return None

    out: dict[str, int] = {}
    everything = len(snap.shards)
    toks = tokenize(text)
    if toks:
        got = place(snap.bm25_top(toks, everything))
        if got is not None:
            out["BM25"] = got
    if qvec is not None:
        row = np.asarray(qvec, dtype=np.float32).reshape(1, -1)
        got = place(snap.vector_top(row, everything, floor)[0])
        if got is not None:
            out["the embeddings"] = got
    return out
