"""Conversation turns re-ordered: the first fused turns re-scored by a linear model over what the fusion does not weigh.

In a vault of conversation turns a question's evidence is often not the best-scored turn: lists
("What activities does Ana do?") are answered by several turns of the named person that resemble
each other more than they resemble the question, long statements answer more often than short
replies, and a turn of someone the question does not name or a turn that asks rarely does. After
the fusion (and its date and reply lifts), `rescore_turns` scores each of the first
`RESCORE_DEPTH` fused shards with a logistic model over TURN_FEATURES and re-orders them by it.
The scores themselves are kept: the shard placed i-th takes the i-th best of the fused scores
(one more contribution, retriever `rescore`, the difference), so the first result's score, the
explanation's sums and everything past the first `RESCORE_DEPTH` stay as the fusion made them.
Questions asking when something happened keep the fused order (their date lift already orders
them; re-scoring them cost temporal recall). The weights are data (TURN_MODEL_FILE), fitted on
LoCoMo dev (all five conversations) by the command the file records, with their left-out figures.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from explorer.index.backend import Snapshot
from explorer.search.fusion import Fused
from explorer.search.memory.fitted import LinearModel, load_model
from explorer.search.memory.signals import Dialog, Owners, asks
from explorer.search.memory.turn_vectors import turn_text
from explorer.search.schema import Contribution

__all__ = [
    "RESCORE_DEPTH",
    "TURN_FEATURES",
    "TURN_MODEL",
    "TURN_MODEL_FILE",
    "WordMatches",
    "load_turn_model",
    "rescore_turns",
    "skips_rescore",
    "turn_features",
]

WordMatches = Callable[[Sequence[str]], "np.ndarray | None"]
"""The `word matches` of turn texts (explorer.search.memory.turn_vectors.word_matches with the query bound)."""

#: Fused shards re-ordered (the rest keep their place after them).
RESCORE_DEPTH = 100
#: Words of a turn at which its length stops counting.
LENGTH_WORDS = 40

TURN_FEATURES = (
    "fused / best",
    "bm25 share",
    "date share",
    "answer share",
    "asks share",
    "own cosine",
    "best cosine to first 3",
    "mean cosine to first 10",
    "same speaker as first",
    "speaker named",
    "other speaker named",
    "words",
    "asks",
    "session rank",
    "word matches",
    "words present",
)
"""Per shard: its fused score over the best; the `bm25`, `date`, `answer` and `asks` contributions over
the best fused score; its own vector's cosine with the query; its best cosine with the first three
shards and its mean cosine with the first ten (itself left out); whether its speaker is the first
shard's; its speaker named by the query, or someone else when the query names someone; its words
(min(1, n / LENGTH_WORDS)); whether it asks; 1 / log2(1 + the place of its session among the
sessions of the list, in order of first appearance); how well its words match the query's one by one beyond
the query's own words, and the share of the query's words it writes, each between the lowest (0) and the
highest (1) of the shards (explorer.search.memory.turn_vectors.word_matches; 0 for all without a model that gives token
vectors)."""

#: The turn model's file: per feature of TURN_FEATURES its mean, standard deviation and weight (a logistic
#: model), with the command that fits it (`python -m benchmarks.locomo_ltr study ... --write-model`), the
#: data (LoCoMo dev, all five conversations), weighting, L2 and figures (explorer.search.memory.fitted).
TURN_MODEL_FILE = Path(__file__).parent / "models" / "turn_model.json"


def load_turn_model(path: Path = TURN_MODEL_FILE) -> LinearModel:
    """The turn model in `path`, checked against TURN_FEATURES (ModelFileError naming the file if not)."""
    return load_model(path, TURN_FEATURES)


#: The turn model, read once at import.
TURN_MODEL = load_turn_model()
_MEAN, _SCALE, _WEIGHTS = TURN_MODEL.arrays()

_WHEN = re.compile(r"^\s*when\b|\bwhat (?:year|month|date|day)\b|\bhow long\b", re.I)


def skips_rescore(query: str) -> bool:
    """Whether a query asks when something happened ("When did ...", "what year", "how long"): left as fused."""
    return bool(_WHEN.search(query))


def _said(text: str, owner: str | None) -> str:
    """A turn's first paragraph without a leading `<speaker>:`."""
    return turn_text(text.strip().split("\n\n", 1)[0], owner)


def turn_features(
    fused: Sequence[Fused],
    index: Snapshot,
    dialog: Dialog,
    owners: Owners,
    named: Sequence[str],
    qvec: np.ndarray,
    words: WordMatches | None = None,
) -> np.ndarray:
    """One row of TURN_FEATURES per shard of `fused` (best first); `words` gives the word matches."""
    n = len(fused)
    if not n:
        return np.zeros((0, len(TURN_FEATURES)))
    top = fused[0].score or 1.0
    shards = index.shards
    vecs = np.zeros((n, len(qvec)), dtype=np.float32)
    rows = np.zeros((n, len(TURN_FEATURES)))
    wanted = set(named)
    session_place: dict[object, int] = {}
    speakers: list[str | None] = []
    texts: list[str] = []
    for i, f in enumerate(fused):
        v = index.vector(f.node_id)
        if v is not None:
            vecs[i] = v
        shard = shards.get(f.node_id)
        path = shard.path if shard is not None else None
        speaker = owners.owner_of.get(path) if path is not None else None
        speakers.append(speaker)
        bm25 = date = answer = asking = 0.0
        for c in f.contributions:
            r = c.retriever
            if r == "bm25":
                bm25 += c.contribution
            elif r == "date":
                date += c.contribution
            elif r == "answer":
                answer += c.contribution
            elif r == "asks":
                asking += c.contribution
        said = _said(shard.text, speaker) if shard is not None else ""
        texts.append(turn_text(shard.text, speaker) if shard is not None else "")
        session = dialog.sessions.get(path) if path is not None else None
        place = session_place.setdefault(
            session if session is not None else ("note", path), len(session_place) + 1
        )
        rows[i, 0] = f.score / top
        rows[i, 1:5] = (bm25 / top, date / top, answer / top, asking / top)
        rows[i, 9] = float(bool(wanted) and speaker in wanted)
        rows[i, 10] = float(bool(wanted) and speaker not in wanted)
        rows[i, 11] = min(1.0, len(said.split()) / LENGTH_WORDS)
        rows[i, 12] = float(asks(said))
        rows[i, 13] = 1.0 / math.log2(place + 1)
    rows[:, 5] = vecs @ qvec.astype(np.float32)
    m = min(10, n)
    sims = (vecs @ vecs[:m].T).astype(np.float64)  # each shard x the first ten
    own = np.full((n, m), False)
    own[np.arange(m), np.arange(m)] = True  # a shard's cosine with itself is left out
    firsts = np.where(own[:, :3], -np.inf, sims[:, :3])
    rows[:, 6] = np.where(np.isfinite(firsts.max(axis=1)), firsts.max(axis=1), 0.0) if n > 1 else 0.0
    counted = m - own.sum(axis=1)
    total = np.where(own, 0.0, sims).sum(axis=1)
    rows[:, 7] = np.divide(total, counted, out=np.zeros(n), where=counted > 0)
    rows[:, 8] = [float(sp is not None and sp == speakers[0]) for sp in speakers]
    matched = words(texts) if words is not None else None
    if matched is not None:
        rows[:, 14:16] = matched
    return rows


def rescore_turns(
    fused: list[Fused],
    index: Snapshot,
    dialog: Dialog,
    owners: Owners,
    named: Sequence[str],
    qvec: np.ndarray | None,
    depth: int = RESCORE_DEPTH,
    words: WordMatches | None = None,
) -> list[Fused]:
    """The first `depth` shards of `fused` re-ordered by the model, each taking the fused score of its new place.

    Unchanged without a query vector or with fewer than two shards. Each moved shard gains one
    contribution (retriever `rescore`, raw score = the model's logit, rank = its place before), so
    its contributions still sum to its score.
    """
    head = fused[:depth]
    if qvec is None or len(head) < 2:
        return fused
    x = turn_features(head, index, dialog, owners, named, qvec, words)
    logit = ((x - _MEAN) / _SCALE) @ _WEIGHTS
    order = sorted(range(len(head)), key=lambda i: (-logit[i], i))
    scores = [f.score for f in head]
    out: list[Fused] = []
    for place, i in enumerate(order):
        f = head[i]
        gain = scores[place] - f.score
        if place == i or gain == 0.0:
            out.append(f)
            continue
        extra = Contribution(
            term="turn model",
            retriever="rescore",
            rank=i + 1,
            raw_score=round(float(logit[i]), 4),
            retriever_weight=1.0,
            term_weight=1.0,
            source_weight=1.0,
            contribution=gain,
        )
        out.append(Fused(f.node_id, scores[place], (*f.contributions, extra), f.best_rank))
    return out + fused[depth:]
