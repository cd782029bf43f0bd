"""Related notes for a link, ranked by what predicts a link in this vault (a scorer fitted on its own links).

The writer's related search ranks notes by how well they match the paragraph. Whether a note is
the one a person links to also depends on the vault: in a hand-written vault the notes the rest of
the open note links to, and their neighbours, are likely; in another the words of the sentence at
the cursor say more. `candidate_features` describes every candidate note of one call by a few
numbers (`FEATURES`), and `LinkScorer` is a logistic regression over them, fitted on the vault's
own paragraphs that carry links (their links removed, the linked notes the positives), so each
vault gets its own mix.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from explorer.text.tokenize import tokenize

if TYPE_CHECKING:
    from explorer.index.backend import Snapshot

#: What describes a candidate note (one column each, in this order).
FEATURES = (
    "related",  # its place in the related search (10 / (10 + rank)); 0 when it did not rank
    "bm25_rank",  # best BM25 place of its shards in that search (5 / (5 + rank)); 0 when none
    "dense_rank",  # best embedding place (5 / (5 + rank)); 0 when none
    "bm_sentence",  # BM25 of the sentence at the cursor on its best shard, over the best such score
    "cos_sentence",  # the sentence's vector against the note's (the mean of its shard vectors)
    "cos_paragraph",  # the paragraph's vector against the note's
    "name_sentence",  # share of the words of its best-covered name that stand in the sentence
    "name_paragraph",  # the same in the paragraph
    "linked_here",  # the rest of the open note links to it
    "links_back",  # it links to the open note
    "two_steps",  # log(1 + paths open note -> linked or linking note -> it)
    "popularity",  # log(1 + notes linking to it, the open note aside)
)
_COL = {name: i for i, name in enumerate(FEATURES)}
#: Candidates read from BM25 and from the graph (the related search gives the list's worth).
SOURCE_DEPTH = 20
#: Notes linked from or linking to the open note whose own links are followed (a hub's thousands of
#: backlinks are not walked at every call).
GRAPH_SOURCES = 200
#: L2 penalty of the fit (on standardised features).
L2 = 1.0
#: Shards of a note averaged into its vector.
NOTE_SHARDS = 16


@dataclass(frozen=True, slots=True)
class Candidates:
    """The candidate notes of one call and their features."""

    paths: tuple[str, ...]
    """Candidate notes, in the related search's order first, then the others'."""
    x: np.ndarray
    """One row per path, one column per FEATURES entry (float32)."""


def note_vector(
    snap: Snapshot, path: str, cache: dict[str, np.ndarray | None] | None = None
) -> np.ndarray | None:
    """The normalised mean of a note's shard vectors (None without any)."""
    if cache is not None and path in cache:
        return cache[path]
    vecs = [v for v in (snap.vector(n) for n in list(snap.shard_ids(path))[:NOTE_SHARDS]) if v is not None]
    out = None
    if vecs:
        m = np.mean(np.asarray(vecs, dtype=np.float32), axis=0)
        out = m / max(float(np.linalg.norm(m)), 1e-9)
    if cache is not None:
        cache[path] = out
    return out


def _bm25_notes(snap: Snapshot, tokens: Sequence[str], own: str | None, depth: int) -> dict[str, float]:
    """Notes by the BM25 score of their best shard for `tokens` (at most `depth` notes)."""
    got: dict[str, float] = {}
    if not tokens:
        return got
    for node_id, score in snap.bm25_top(list(dict.fromkeys(tokens)), depth * 5):
        shard = snap.shards.get(node_id)
        if shard is None or shard.path == own or shard.path in got:
            continue
        got[shard.path] = float(score)
        if len(got) >= depth:
            break
    return got


def candidate_features(
    snap: Snapshot,
    *,
    path: str | None,
    sentence: str,
    paragraph: str,
    note_links: Iterable[str],
    results: Sequence[Any],
    vectors: tuple[np.ndarray | None, np.ndarray | None] = (None, None),
    exclude: Iterable[str] = (),
    vector_cache: dict[str, np.ndarray | None] | None = None,
    depth: int = SOURCE_DEPTH,
) -> Candidates:
    """The candidates of one call and their `FEATURES`.

    Args:
        snap: the index snapshot the related search read.
        path: the open note (never a candidate; its own links are `note_links`).
        sentence: the sentence at the cursor, as written.
        paragraph: its paragraph, as written.
        note_links: the notes the open note links to outside the paragraph (resolved paths).
        results: the related search's results, in order (`document_path`, `bm25_rank`, `embedding_rank`).
        vectors: the sentence's and the paragraph's vectors (None: no vector features).
        exclude: notes never offered here (named notes, the paragraph's links).
        vector_cache: note vectors kept between calls (by path).
        depth: candidates read from BM25 and from the graph.
    """
    skip = set(exclude)
    if path is not None:
        skip.add(path)
    graph = snap.links()
    s_tok = tokenize(sentence)
    p_tok = tokenize(paragraph)
    bm_s = _bm25_notes(snap, s_tok, path, depth)
    linked_here = [p for p in dict.fromkeys(note_links) if p != path]
    links_back = sorted({b.source for b in graph.backlinks(path)} - {path}) if path else []
    two: dict[str, int] = {}
    for src in list(dict.fromkeys([*linked_here, *links_back]))[:GRAPH_SOURCES]:
        for _link, target in graph.outgoing(src):
            if target and target not in (path, src):
                two[target] = two.get(target, 0) + 1
    order: dict[str, None] = {}
    for r in results:
        order.setdefault(r.document_path)
    for group in (
        bm_s,
        linked_here,
        links_back,
        sorted(two, key=lambda p: (-two[p], p))[:depth],
    ):
        for p in group:
            order.setdefault(p)
    paths = tuple(p for p in order if p not in skip and p in snap.notes)
    x = np.zeros((len(paths), len(FEATURES)), dtype=np.float32)
    if not paths:
        return Candidates(paths, x)
    rank = {r.document_path: (i, r) for i, r in reversed(list(enumerate(results)))}
    top_s = max(bm_s.values(), default=0.0) or 1.0
    s_set, p_set = set(s_tok), set(p_tok)
    here, back = set(linked_here), set(links_back)
    sv, pv = vectors
    for i, p in enumerate(paths):
        row = x[i]
        if p in rank:
            r_i, r = rank[p]
            row[_COL["related"]] = 10.0 / (10.0 + r_i)
            if r.bm25_rank is not None:
                row[_COL["bm25_rank"]] = 5.0 / (5.0 + r.bm25_rank)
            if r.embedding_rank is not None:
                row[_COL["dense_rank"]] = 5.0 / (5.0 + r.embedding_rank)
        row[_COL["bm_sentence"]] = bm_s.get(p, 0.0) / top_s
        if sv is not None or pv is not None:
            nv = note_vector(snap, p, vector_cache)
            if nv is not None:
                row[_COL["cos_sentence"]] = float(nv @ sv) if sv is not None else 0.0
                row[_COL["cos_paragraph"]] = float(nv @ pv) if pv is not None else 0.0
        names = snap.name_tokens(snap.notes[p])
        if names:
            row[_COL["name_sentence"]] = (
                max(len(n & s_set) / len(n) for n in names if n) if any(names) else 0.0
            )
            row[_COL["name_paragraph"]] = (
                max(len(n & p_set) / len(n) for n in names if n) if any(names) else 0.0
            )
        row[_COL["linked_here"]] = float(p in here)
        row[_COL["links_back"]] = float(p in back)
        row[_COL["two_steps"]] = math.log1p(two.get(p, 0))
        row[_COL["popularity"]] = math.log1p(len({b.source for b in graph.backlinks(p)} - {path}))
    return Candidates(paths, x)


@dataclass(frozen=True, slots=True)
class LinkScorer:
    """A logistic regression over `FEATURES` (standardised), fitted on one vault's links."""

    mean: np.ndarray
    """Feature means of the training rows."""
    scale: np.ndarray
    """Feature standard deviations (1 where a feature is constant)."""
    weights: np.ndarray
    """One weight per feature (on the standardised features)."""
    bias: float
    """Intercept."""
    rows: int = 0
    """Candidate rows it was fitted on."""
    positives: int = 0
    """Of which linked notes."""

    def scores(self, x: np.ndarray) -> np.ndarray:
        """The scorer's log-odds for each row of `x`."""
        return np.asarray(((x - self.mean) / self.scale) @ self.weights + self.bias, dtype=np.float64)

    def order(self, cands: Candidates) -> list[str]:
        """The candidates best first (ties keep the related search's order)."""
        if not cands.paths:
            return []
        s = self.scores(cands.x)
        return [cands.paths[i] for i in sorted(range(len(s)), key=lambda i: (-s[i], i))]

    def as_dict(self) -> dict[str, Any]:
        """Weights by feature name (standardised), for reports."""
        return {f: round(float(w), 3) for f, w in zip(FEATURES, self.weights)} | {"bias": round(self.bias, 3)}


def fit(
    groups: Sequence[tuple[Candidates, str]],
    l2: float = L2,
    iterations: int = 25,
    columns: Sequence[int] | None = None,
) -> LinkScorer | None:
    """A `LinkScorer` fitted on (candidates, linked note) pairs; None without a positive or a negative.

    Newton's method on the L2-penalised logistic loss; the rows of a group whose linked note is not
    among its candidates still teach which notes are not linked.
    """
    xs, ys = [], []
    for cands, target in groups:
        if not cands.paths:
            continue
        xs.append(cands.x)
        ys.append(np.array([p == target for p in cands.paths], dtype=np.float64))
    if not xs:
        return None
    x = np.concatenate(xs).astype(np.float64)
    y = np.concatenate(ys)
    if y.sum() == 0 or y.sum() == len(y):
        return None
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = (x - mean) / scale
    if columns is not None:
        keep = np.zeros(z.shape[1], dtype=bool)
        keep[list(columns)] = True
        z[:, ~keep] = 0.0
    z1 = np.hstack([z, np.ones((len(z), 1))])
    w = np.zeros(z1.shape[1])
    penalty = np.full(z1.shape[1], l2)
    penalty[-1] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(z1 @ w, -30, 30)))
        grad = z1.T @ (p - y) + penalty * w
        hess = (z1 * (p * (1 - p))[:, None]).T @ z1 + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-6:
            break
    return LinkScorer(mean, scale, w[:-1].copy(), float(w[-1]), len(y), int(y.sum()))


def rerank(
    named: Sequence[str], related: Sequence[str], scorer: LinkScorer | None, cands: Candidates
) -> list[str]:
    """The list's order: named notes first, then the candidates by `scorer` (the related order without one)."""
    rest = scorer.order(cands) if scorer is not None else list(related)
    seen = set(named)
    return [*named, *(p for p in rest if p not in seen)]


def by_name(x: Mapping[str, float]) -> np.ndarray:
    """A feature row from a mapping by feature name (tests, reports)."""
    return np.array([[x.get(f, 0.0) for f in FEATURES]], dtype=np.float32)
