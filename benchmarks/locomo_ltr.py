r"""Learning to re-rank the first 100 LoCoMo results, and speaker-MMR for list questions, left out by conversation.

Run with ``nice -n 10 python -m benchmarks.locomo_ltr dump`` after ``benchmarks.locomo`` built the
vaults (kept work folder; nothing is embedded again), then ``python -m benchmarks.locomo_ltr study``
on its records (no pipeline run). ``dump`` runs every question through the default pipeline without the
turn model (`experimental.turn_rescore` off, the lists it re-orders)
(first 100 results) and records, per result, its fused score and each ranking's share of it
(the explanation's contributions summed per retriever, with the retriever's best rank and raw
score), and per conversation every turn's own vector, session, speaker and day; ``study`` builds
per candidate features from them:

    fused score / best, 1 / log2(rank + 1); per retriever (bm25, dense, name, date, answer, asks)
    its share of the best fused score and 1 / log2(best rank + 1)
    own cosine with the question; cosine with the first 1 / best of the first 3 results (chaining)
    same session as the first result, share of the first 3 in its session; same speaker as the first
    the speaker named in the question, another speaker named; a date in the question and the turn
    near it (the `date` share)
    words, asks (ends with "?"), the turn before it asks, the best own cosine of its neighbours
    word matches: each query word's best cosine among the turn's token vectors other than the word
    itself, and the share of the query's words the turn writes, idf-weighted, each between the lowest
    and the highest of the first 100 (explorer.search.memory.turn_vectors, recorded by `dump`)
    question kind from its wording: when, would / likely, "what ... like", list-like ("what
    activities / things / ...", plural "what X does"), both / in common, how many

and a re-scorer of the first 100 trained on four conversations and scored on the fifth (each of
the five folds), in three forms: pointwise logistic regression, pairwise logistic regression
(evidence above non-evidence of the same question), and gradient-boosted trees (scikit-learn's
HistGradientBoostingClassifier, here only: the benchmark's tool, not a dependency of the
package). Each learned form also with the question-kind x candidate interactions. Separately, for
list-like questions, `mmr`: the first places filled greedily with the named speaker's turns that
resemble the first results but not each other. Every value is chosen leaving one conversation
out; each row prints the in-sample figure (trained or chosen on all five) beside the left-out one,
per category.

``study --write-model PATH`` writes the fit on all conversations of the adopted row (``--adopt``, default
``weighted l2=1.0``) as the turn model's data file (explorer.search.memory.fitted; the product's is
explorer/search/memory/models/turn_model.json): its numbers, the command, the records and data it read, the
split, learner, weighting and L2, and its left-out and in-sample figures. The turn model is refitted by
that command, never edited by hand; the file's own `fit.command` says how it was made.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import DEFAULT_OUT, log, offline_environment
from benchmarks.locomo import (
    CATEGORIES,
    DEFAULT_DATA,
    _folder_name,
    load_conversations,
    question_metrics,
    write_vault,
)
from explorer.search.memory.fitted import LinearModel
from explorer.search.memory.fitted import write_model as write_fitted

CATS = (1, 2, 3, 4)
DEPTH = 100
RETRIEVERS = ("bm25", "dense", "name", "date", "answer", "asks")


# -- dump ------------------------------------------------------------------------------------------
def dump(args: argparse.Namespace) -> None:
    """Every question's first DEPTH results with their per-retriever shares; every turn's vector."""
    from benchmarks.locomo import open_vault_index
    from benchmarks.quality import parse_overrides
    from explorer.engine import make_pipeline
    from explorer.search.memory.signals import name_words
    from explorer.search.memory.turn_vectors import TokenVectors, turn_text, word_matches

    convs = load_conversations(args.data)[: args.conversations]
    out = args.out / f"locomo-ltr{args.tag}.jsonl"
    fh = out.open("w", encoding="utf-8")
    for conv in convs:
        vault = args.work_dir / _folder_name(conv.sample_id)
        mapping = write_vault(conv, vault)
        # the lists the turn model re-orders: the pipeline without it (unless --set says otherwise)
        overrides = {"experimental.turn_rescore": False, **parse_overrides(args.set)}
        index, settings, _ = open_vault_index(vault, overrides, True)
        pipe = make_pipeline(index, settings)
        pipe.search("warm up the model", k=5, record=False)
        turn_of = {t.dia_id: t for t in conv.turns}
        with index.snapshot() as snap:
            paths = [p for p in mapping if snap.shard_ids(p)]
            dias = [mapping[p] for p in paths]
            own = np.stack([snap.vector(snap.shard_ids(p)[0]) for p in paths]).astype(np.float32)
        np.save(args.out / f"locomo-ltr{args.tag}-{conv.sample_id}.npy", own)
        turns_rec = {
            "conv": conv.sample_id,
            "dias": dias,
            "session": [turn_of[d].session for d in dias],
            "speaker": [turn_of[d].speaker for d in dias],
            "number": [turn_of[d].number for d in dias],
            "day": [turn_of[d].when.date().isoformat() if turn_of[d].when else None for d in dias],
            "text": [turn_of[d].text for d in dias],
        }
        fh.write(json.dumps({"turns": turns_rec}) + "\n")
        people = sorted({t.speaker for t in conv.turns})
        with index.snapshot() as snap:
            shard_text = {mapping[p]: snap.shards[snap.shard_ids(p)[0]].text for p in paths}
        names = {w for sp in people for w in name_words(sp)}
        encode = index.embedder().encode_tokens
        kept = TokenVectors()
        for q in conv.questions[: args.limit_questions]:
            t = time.perf_counter()
            res = pipe.search(q.text, k=DEPTH, record=False)
            ms = (time.perf_counter() - t) * 1000
            cands = []
            for r in res.results:
                if r.source != "search" or r.document_path not in mapping:
                    continue
                shares: dict[str, list[float]] = {}
                for c in r.explanation.contributions if r.explanation else ():
                    s = shares.setdefault(c.retriever, [0.0, 10_000.0, 0.0])
                    s[0] += c.contribution
                    s[1] = min(s[1], c.rank)
                    s[2] = max(s[2], c.raw_score)
                cands.append(
                    [
                        mapping[r.document_path],
                        round(r.score, 6),
                        {k: [round(v[0], 6), int(v[1]), round(v[2], 4)] for k, v in shares.items()},
                    ]
                )
            qv = index.encode_query(q.text)
            # the turn model's `word matches` of these candidates, as the pipeline computes them
            texts = [turn_text(shard_text[d], turn_of[d].speaker.casefold()) for d, _, _ in cands]
            words = word_matches(q.text, texts, names, encode, kept)
            rec = {
                "qid": q.qid,
                "conv": conv.sample_id,
                "question": q.text,
                "category": q.category,
                "evidence": list(q.evidence),
                "named": [p for p in people if re.search(r"\b" + re.escape(p) + r"\b", q.text)],
                "ms": round(ms, 2),
                "candidates": cands,
                "qvec": [round(float(x), 5) for x in qv] if qv is not None else None,
                "words": [[round(float(x), 5) for x in row] for row in words]
                if words is not None
                else [[0.0, 0.0]] * len(cands),
            }
            fh.write(json.dumps(rec) + "\n")
        fh.flush()
        index.close()
        log(f"{conv.sample_id}: {len(conv.questions)} questions")
    fh.close()
    log(f"wrote {out}")


def speed(args: argparse.Namespace) -> dict[str, Any]:
    """Per-search time with the turn model on and off, paired: the same question through both pipelines
    one after the other (order alternating), caches cleared; medians and p95 of each and of the ratio."""
    from benchmarks.locomo import open_vault_index
    from benchmarks.quality import parse_overrides
    from explorer.engine import make_pipeline

    convs = load_conversations(args.data)[: args.conversations]
    on_ms: list[float] = []
    off_ms: list[float] = []
    stage: list[float] = []
    first_on: list[float] = []
    first_off: list[float] = []
    for conv in convs:
        vault = args.work_dir / _folder_name(conv.sample_id)
        write_vault(conv, vault)
        index, settings, _ = open_vault_index(vault, parse_overrides(args.set), True)
        pipes = {
            True: make_pipeline(index, settings),
            False: make_pipeline(index, settings.with_overrides({"experimental.turn_rescore": False})),
        }
        # the first question of the session: with the model it also runs the first turns through the model
        # once for their token vectors (explorer.search.memory.turn_vectors), which later searches find kept
        first = conv.questions[0].text
        index.encode_query("warm up the model")
        for on in (False, True):
            t = time.perf_counter()
            pipes[on].search(first, k=10, record=False)
            (first_on if on else first_off).append((time.perf_counter() - t) * 1000)
        for n, q in enumerate(conv.questions[: args.limit_questions]):
            for on in (True, False) if n % 2 == 0 else (False, True):
                pipes[on].clear_cache()
                t = time.perf_counter()
                res = pipes[on].search(q.text, k=10, record=False)
                ms = (time.perf_counter() - t) * 1000
                (on_ms if on else off_ms).append(ms)
                if on:
                    stage.append(res.timings_ms.get("fusion", 0.0))
        index.close()
        log(f"{conv.sample_id}: {len(conv.questions)} questions")
    ratio = [a / b for a, b in zip(on_ms, off_ms)]

    def q(xs: list[float], p: float) -> float:
        return round(float(np.quantile(xs, p)), 2)

    out = {
        "searches": len(on_ms),
        "on p50 / p95 ms": [q(on_ms, 0.5), q(on_ms, 0.95)],
        "off p50 / p95 ms": [q(off_ms, 0.5), q(off_ms, 0.95)],
        "ratio on / off p50 / p95": [q(ratio, 0.5), q(ratio, 0.95)],
        "fusion stage with the model p50 / p95 ms": [q(stage, 0.5), q(stage, 0.95)],
        "first search of a session, on / off ms (per conversation)": [
            [round(a), round(b)] for a, b in zip(first_on, first_off)
        ],
    }
    print(json.dumps(out, indent=1))
    return out


# -- features --------------------------------------------------------------------------------------
_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("when", re.compile(r"^\s*when\b|\bwhat (year|month|date|day)\b|\bhow long\b", re.I)),
    ("would", re.compile(r"\b(would|likely|could|might|probably)\b", re.I)),
    ("like", re.compile(r"^\s*what\b.*\blike\b", re.I)),
    (
        "list",
        re.compile(
            r"^\s*(what|which)\s+(\w+\s+)?(activities|things|hobbies|books|events|kinds?|types?|ways|places|"
            r"items|pets|instruments|sports|games|cities|countries|artists|bands|songs|movies|foods|"
            r"subjects|paintings|symbols|gifts|classes|workshops|projects|causes|names)\b"
            r"|\b(what|which)\b.*\b(has|have)\b.*\b(done|made|painted|visited|bought|read|tried|attended|"
            r"participated|taken)\b",
            re.I,
        ),
    ),
    ("both", re.compile(r"\bboth\b|\bin common\b|\btogether\b", re.I)),
    ("how_many", re.compile(r"\bhow many\b|\bhow often\b", re.I)),
    ("why", re.compile(r"^\s*(why|how)\b", re.I)),
)
KIND_NAMES = tuple(k for k, _ in _KINDS)


def kinds(question: str) -> np.ndarray:
    """The question's kind from its words (several may hold): one 0/1 per KIND_NAMES."""
    return np.array([1.0 if p.search(question) else 0.0 for _, p in _KINDS])


def said(text: str) -> str:
    """A turn's words without the speaker and an image's caption."""
    return text.split("\n\n", 1)[0].split(":", 1)[-1].strip()


CAND_FEATURES = (
    "fused / best",
    "1 / log2(rank + 1)",
    *(f"{r} share" for r in RETRIEVERS),
    *(f"{r} rank" for r in RETRIEVERS),
    "own cosine",
    "cosine to first",
    "best cosine to first 3",
    "mean cosine to first 10",
    "same session as first",
    "first 3 in its session",
    "same speaker as first",
    "speaker named",
    "other speaker named",
    "words",
    "asks",
    "previous asks",
    "neighbour cosine",
    "session rank",
    "own coverage",
    "statement coverage",
    "word matches",
    "words present",
)
#: The features the study reads unless `--features` names others (the two coverages and the word matches came later).
DEFAULT_FEATURES = CAND_FEATURES[:-4]


class Conv:
    """One conversation's turns (from the dump): position of each dialog id, vectors, sessions, speakers."""

    def __init__(self, rec: dict[str, Any], vecs: np.ndarray) -> None:
        self.dias: list[str] = rec["dias"]
        self.pos = {d: i for i, d in enumerate(self.dias)}
        self.vecs = vecs
        self.session = np.array(rec["session"])
        self.speaker: list[str] = rec["speaker"]
        self.number = np.array(rec["number"])
        texts = [said(t) for t in rec["text"]]
        from explorer.search.memory.stated import stated_tokens
        from explorer.text.tokenize import tokenize

        self.toks = [set(tokenize(t)) for t in texts]
        self.stated = [stated_tokens(t) for t in texts]
        df: dict[str, int] = {}
        for ts in self.toks:
            for t in ts:
                df[t] = df.get(t, 0) + 1
        self.df = df
        self.names = {w for sp in set(rec["speaker"]) for w in tokenize(sp)}
        self.words = np.array([len(t.split()) for t in texts], dtype=float)
        self.asks = np.array([t.endswith("?") for t in texts], dtype=float)
        order = np.argsort(self.number)
        self.prev = np.full(len(self.dias), -1)
        self.next = np.full(len(self.dias), -1)
        for a, b in itertools.pairwise(order):
            if self.session[a] == self.session[b]:
                self.prev[b] = a
                self.next[a] = b


def features(r: dict[str, Any], conv: Conv, cut: int = DEPTH) -> tuple[np.ndarray, list[str]]:
    """One row of CAND_FEATURES per result among the first `cut`."""
    cands = r["candidates"][:cut]
    if not cands:
        return np.zeros((0, len(CAND_FEATURES))), []
    rows_i = [conv.pos[d] for d, _, _ in cands]
    top = cands[0][1] or 1.0
    qv = np.array(r["qvec"], dtype=np.float32)
    vecs = conv.vecs[rows_i]
    own = vecs @ qv
    all_cos = conv.vecs @ qv
    sims = vecs @ vecs[: min(10, len(vecs))].T  # candidate x first 10
    first_session = conv.session[rows_i[0]]
    first_speaker = conv.speaker[rows_i[0]]
    top3_sessions = [conv.session[i] for i in rows_i[:3]]
    named = set(r["named"])
    from explorer.search.quality import coverage, token_idf
    from explorer.vault.windows import query_words

    asked = [w for w in query_words(r["question"]) if w not in conv.names]
    n_docs = len(conv.dias)

    def idf(w: str) -> float:
        return token_idf(n_docs, conv.df.get(w, 0))

    sess_rank: dict[int, int] = {}
    for i in rows_i:
        sess_rank.setdefault(int(conv.session[i]), len(sess_rank) + 1)
    out = []
    for k, ((_d, s, shares), i) in enumerate(zip(cands, rows_i)):
        row = [s / top, 1 / math.log2(k + 2)]
        row += [shares.get(ret, [0.0])[0] / top for ret in RETRIEVERS]
        row += [1 / math.log2(shares[ret][1] + 1) if ret in shares else 0.0 for ret in RETRIEVERS]
        others = [j for j in range(min(3, len(cands))) if j != k]
        row += [
            float(own[k]),
            float(sims[k, 0]) if k else 1.0,
            max((float(sims[k, j]) for j in others), default=0.0),
            float(np.mean([sims[k, j] for j in range(sims.shape[1]) if j != k]))
            if sims.shape[1] > 1
            else 0.0,
            float(conv.session[i] == first_session),
            sum(1 for x in top3_sessions if x == conv.session[i]) / 3,
            float(conv.speaker[i] == first_speaker),
            float(bool(named) and conv.speaker[i] in named),
            float(bool(named) and conv.speaker[i] not in named),
            min(1.0, conv.words[i] / 40),
            conv.asks[i],
            conv.asks[conv.prev[i]] if conv.prev[i] >= 0 else 0.0,
            max(
                float(all_cos[conv.prev[i]]) if conv.prev[i] >= 0 else 0.0,
                float(all_cos[conv.next[i]]) if conv.next[i] >= 0 else 0.0,
            ),
            1 / math.log2(sess_rank[int(conv.session[i])] + 1),
            coverage(asked, conv.toks[i], idf) if asked else 0.0,
            coverage(asked, conv.stated[i], idf) if asked else 0.0,
            *(r["words"][k] if "words" in r else (0.0, 0.0)),
        ]
        out.append(row)
    return np.array(out, dtype=np.float64), [d for d, _, _ in cands]


def with_kinds(x: np.ndarray, q: np.ndarray, cols: Sequence[int]) -> np.ndarray:
    """`x` with the question's kinds and each kind x each of `cols` appended."""
    n = len(x)
    extra = [np.repeat(q[None, :], n, axis=0)]
    for j in range(len(q)):
        extra.append(x[:, cols] * q[j])
    return np.hstack([x, *extra])


# -- learners --------------------------------------------------------------------------------------
def logistic(
    x: np.ndarray, y: np.ndarray, l2: float = 1.0, steps: int = 30, weight: np.ndarray | None = None
) -> np.ndarray:
    """L2-regularised logistic regression by Newton steps (weights, then a bias); rows weighted by `weight`."""
    xb = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(xb.shape[1])
    sw = np.ones(len(x)) if weight is None else weight
    reg = l2 * np.eye(xb.shape[1])
    reg[-1, -1] = 1e-6
    for _ in range(steps):
        p = 1 / (1 + np.exp(-np.clip(xb @ w, -30, 30)))
        grad = xb.T @ (sw * (p - y)) + reg @ w
        hess = (xb * (sw * p * (1 - p))[:, None]).T @ xb + reg
        w -= np.linalg.solve(hess, grad)
    return w


def pair_rows(x: np.ndarray, y: np.ndarray, rng: np.random.Generator, per_pos: int = 30) -> np.ndarray:
    """Differences (evidence - other) for pairs within one question; up to `per_pos` others per evidence."""
    pos = np.flatnonzero(y > 0)
    neg = np.flatnonzero(y == 0)
    if not len(pos) or not len(neg):
        return np.zeros((0, x.shape[1]))
    out = []
    for p in pos:
        # the others ranked best first are the ones the order must beat: take the first ones, then a sample
        first = neg[: per_pos // 2]
        rest = neg[per_pos // 2 :]
        pick = np.concatenate([first, rng.choice(rest, min(len(rest), per_pos - len(first)), replace=False)])
        out.append(x[p] - x[pick])
    return np.vstack(out)


class Learner:
    """A re-scorer trained on some questions' candidate rows: `fit(xs, ys)` then `score(x)`."""

    def __init__(self, kind: str, l2: float = 1.0, seed: int = 0, **params: Any) -> None:
        self.kind, self.l2, self.seed, self.params = kind, l2, seed, params

    def fit(self, xs: list[np.ndarray], ys: list[np.ndarray]) -> Learner:
        x = np.vstack(xs)
        self.mu, self.sd = x.mean(axis=0), x.std(axis=0) + 1e-9
        z = [(a - self.mu) / self.sd for a in xs]
        if self.kind == "pointwise":
            self.w = logistic(np.vstack(z), np.concatenate(ys), self.l2)[:-1]
        elif self.kind == "weighted":
            # each question weighs the same, and within it each evidence turn 1 / its number (as recall counts it)
            sw = np.concatenate(
                [np.where(y > 0, 1.0 / max(1.0, y.sum()), 1.0 / max(1.0, len(y) - y.sum())) for y in ys]
            )
            self.w = logistic(
                np.vstack(z), np.concatenate(ys), self.l2, weight=sw * sum(len(y) for y in ys) / (2 * len(ys))
            )[:-1]
        elif self.kind == "pairwise":
            rng = np.random.default_rng(self.seed)
            d = np.vstack([pair_rows(a, y, rng) for a, y in zip(z, ys)])
            # a pair and its mirror: the logistic model of "first beats second" with no bias
            dd = np.vstack([d, -d])
            yy = np.concatenate([np.ones(len(d)), np.zeros(len(d))])
            self.w = logistic(dd, yy, self.l2)[:-1]
        else:
            from sklearn.ensemble import HistGradientBoostingClassifier

            self.model = HistGradientBoostingClassifier(random_state=self.seed, **self.params)
            self.model.fit(np.vstack(z), np.concatenate(ys))
        return self

    def score(self, x: np.ndarray) -> np.ndarray:
        z = (x - self.mu) / self.sd
        if self.kind in ("pointwise", "pairwise", "weighted"):
            return z @ self.w
        return self.model.predict_proba(z)[:, 1]


# -- study -----------------------------------------------------------------------------------------
def load(path: Path, tag: str) -> tuple[list[dict[str, Any]], dict[str, Conv]]:
    recs, convs = [], {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        if "turns" in r:
            t = r["turns"]
            convs[t["conv"]] = Conv(t, np.load(path.parent / f"locomo-ltr{tag}-{t['conv']}.npy"))
        elif r["category"] in CATS and r["evidence"] and r["qvec"] is not None:
            recs.append(r)
    return recs, convs


def recall10(r: dict[str, Any], order: Sequence[str]) -> float:
    return question_metrics(r["evidence"], order)["recall@10"]


def cats(by: dict[str, dict[str, Any]], values: dict[str, float]) -> dict[str, float]:
    res = {"all": round(statistics.fmean(values.values()), 4)}
    for c in CATS:
        xs = [v for q, v in values.items() if by[q]["category"] == c]
        res[CATEGORIES[c]] = round(statistics.fmean(xs), 4) if xs else float("nan")
    return res


def rerank_order(ids: list[str], score: np.ndarray, base: list[str], top: int) -> list[str]:
    """The first `top` of the list re-ordered by `score`, the rest after in their order."""
    head = [ids[i] for i in np.argsort(-score, kind="stable")]
    return head + [d for d in base if d not in set(head)]


def learned(
    recs: list[dict[str, Any]],
    data: dict[str, tuple[np.ndarray, list[str], np.ndarray]],
    make: Callable[[], Learner],
    gate: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[str, dict[str, float]]:
    """Left out (train on four conversations, score the fifth) and in-sample (train and score on all)."""
    by = {r["qid"]: r for r in recs}
    base = {q: recall10(by[q], [d for d, _, _ in by[q]["candidates"]]) for q in by}
    act = [q for q in by if gate is None or gate(by[q])]
    convs = sorted({r["conv"] for r in recs})

    def train(qs: list[str]) -> Learner:
        return make().fit([data[q][0] for q in qs], [data[q][2] for q in qs])

    def apply(model: Learner, q: str) -> float:
        x, ids, _ = data[q]
        order = rerank_order(ids, model.score(x), [d for d, _, _ in by[q]["candidates"]], len(ids))
        return recall10(by[q], order)

    left = dict(base)
    for g in convs:
        model = train([q for q in act if by[q]["conv"] != g])
        left.update({q: apply(model, q) for q in act if by[q]["conv"] == g})
    model = train(act)
    inside = dict(base)
    inside.update({q: apply(model, q) for q in act})
    return {"left": left, "in_sample": inside, "model": model}  # type: ignore[dict-item]


def choose(
    qids: Sequence[str], conv_of: Callable[[str], str], recall: dict[Any, dict[str, float]]
) -> dict[str, Any]:
    """Leave one conversation out over `recall` (value -> qid -> recall@10): per-fold picks, the in-sample
    pick and the left-out figure per question."""
    cands = list(recall)
    convs = sorted({conv_of(q) for q in qids})

    def mean_on(c: Any, qs: Sequence[str]) -> float:
        return statistics.fmean(recall[c][q] for q in qs)

    pick = {}
    for g in convs:
        train = [q for q in qids if conv_of(q) != g]
        pick[g] = max(cands, key=lambda c: mean_on(c, train))  # first best on a tie (grid order)
    inside = max(cands, key=lambda c: mean_on(c, qids))
    left = {q: recall[pick[conv_of(q)]][q] for q in qids}
    return {"pick": pick, "in_sample": inside, "left": left}


def mmr_order(r: dict[str, Any], conv: Conv, lam: float, depth: int, keep: int) -> list[str]:
    """List questions: the first `keep` places as they are, the rest of the first 10 filled greedily from
    the first `depth` results by lam x (the turn's resemblance to the first 3: best cosine) + (1 - lam) x
    its fused score share - (1 - lam) x its best cosine to a turn already placed; the named speaker's
    turns only when someone is named."""
    cands = r["candidates"][:depth]
    ids = [d for d, _, _ in cands]
    if len(ids) <= keep:
        return ids
    rows = [conv.pos[d] for d in ids]
    v = conv.vecs[rows]
    top = cands[0][1] or 1.0
    fused = np.array([s / top for _, s, _ in cands])
    seed = v[:3]
    like = (v @ seed.T).max(axis=1)
    named = set(r["named"])
    ok = np.array([not named or conv.speaker[i] in named for i in rows])
    chosen = list(range(keep))
    left = [i for i in range(keep, len(ids)) if ok[i]]
    while len(chosen) < 10 and left:
        placed = v[chosen]
        red = (v[left] @ placed.T).max(axis=1)
        val = lam * like[left] + (1 - lam) * fused[left] - (1 - lam) * red
        j = left[int(np.argmax(val))]
        chosen.append(j)
        left.remove(j)
    head = [ids[i] for i in chosen]
    return head + [d for d in ids if d not in set(head)]


def paired(new: dict[str, float], old: dict[str, float], n: int = 10_000) -> dict[str, float]:
    """Mean per-question difference with a 95 % bootstrap interval and a sign-flip p-value."""
    d = np.array([new[q] - old[q] for q in sorted(new)])
    rng = np.random.default_rng(0)
    boots = d[rng.integers(0, len(d), (n, len(d)))].mean(axis=1)
    flips = (d[None, :] * rng.choice([-1.0, 1.0], (n, len(d)))).mean(axis=1)
    return {
        "diff": round(float(d.mean()), 4),
        "lo": round(float(np.quantile(boots, 0.025)), 4),
        "hi": round(float(np.quantile(boots, 0.975)), 4),
        "p": round(float((np.abs(flips) >= abs(d.mean()) - 1e-12).mean()), 4),
    }


#: The study's row the product adopts (explorer.search.memory.rescore's turn model), written by `--write-model`.
ADOPTED = "weighted l2=1.0"


def model_file(
    model: Learner,
    names: Sequence[str],
    fit: dict[str, Any],
    figures: dict[str, Any],
) -> LinearModel:
    """A fitted logistic learner as a model file's contents, its numbers rounded as the study prints them
    (mean and standard deviation to 5 places, weights to 3; a feature constant in training keeps a standard
    deviation of 1e-5, its weight being 0)."""
    if model.kind not in ("pointwise", "weighted", "pairwise"):
        raise ValueError(f"a {model.kind} learner is not a linear model")
    return LinearModel(
        tuple(names),
        tuple(float(v) for v in model.mu.round(5)),
        tuple(max(float(v), 1e-5) for v in model.sd.round(5)),
        tuple(round(float(w), 3) for w in model.w),
        fit=fit,
        figures=figures,
    )


def write_model(
    path: Path,
    model: Learner,
    names: Sequence[str],
    fit: dict[str, Any],
    figures: dict[str, Any],
) -> LinearModel:
    """Write the adopted fit as the turn model's file (explorer.search.memory.fitted), checked against
    explorer.search.memory.rescore.TURN_FEATURES: the file the product loads, replaced by command."""
    from explorer.search.memory.rescore import TURN_FEATURES

    if tuple(names) != TURN_FEATURES:
        raise SystemExit(
            f"--write-model: the features must be the turn model's {list(TURN_FEATURES)}, not {names}"
        )
    out = model_file(model, names, fit, figures)
    write_fitted(path, out)
    return out


def _fit_record(args: argparse.Namespace, learner: Learner, recs: list[dict[str, Any]]) -> dict[str, Any]:
    """What a fit was made of: the command, the records and data it read, the split, learner and L2."""
    model = LEARNER_RECORD[learner.kind]
    data: dict[str, Any] = {"records": Path(args.records).name, "records_sha256": _sha256(args.records)}
    if Path(args.data).is_file():
        data.update(file=Path(args.data).name, sha256=_sha256(Path(args.data)))
    return {
        "command": args.command,
        "data": data,
        "conversations": sorted({r["conv"] for r in recs}),
        "questions_dumped": len(recs),
        "split": "fitted on all conversations; left out: fitted on all but one, scored on it, each in turn, pooled",
        "learner": model["learner"],
        "weighting": model["weighting"],
        "l2": float(learner.l2),
        "skipped": [f"questions of kind {k!r} left as fused" for k in args.skip_kind],
        "date": time.strftime("%Y-%m-%d"),
    }


LEARNER_RECORD = {
    "pointwise": {
        "learner": "logistic regression (Newton steps), standardised features",
        "weighting": "every row one",
    },
    "weighted": {
        "learner": "logistic regression (Newton steps), standardised features",
        "weighting": "each question weighs one; within it the evidence turns 1 / their number, the others 1 / theirs",
    },
    "pairwise": {
        "learner": "logistic regression on pair differences (evidence - other, both orders), standardised features",
        "weighting": "every pair one",
    },
}


def _figure(value: float) -> float | None:
    """A figure as recorded: None for a category without questions (nan)."""
    return None if math.isnan(value) else value


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def study(args: argparse.Namespace) -> dict[str, Any]:
    recs, convs = load(args.records, args.tag)
    by = {r["qid"]: r for r in recs}
    qids = sorted(by)
    conv_of = lambda q: by[q]["conv"]  # noqa: E731
    data: dict[str, tuple[np.ndarray, list[str], np.ndarray]] = {}
    kindq: dict[str, np.ndarray] = {}
    for r in recs:
        x, ids = features(r, convs[r["conv"]])
        kindq[r["qid"]] = kinds(r["question"])
        data[r["qid"]] = (x, ids, np.array([float(d in r["evidence"]) for d in ids]))
    names = list(args.features or DEFAULT_FEATURES)
    cols = [CAND_FEATURES.index(n) for n in names]
    data = {q: (x[:, cols], ids, y) for q, (x, ids, y) in data.items()}
    inter_cols = [
        names.index(n)
        for n in (
            "fused / best",
            "bm25 share",
            "dense share",
            "own cosine",
            "best cosine to first 3",
            "same session as first",
            "speaker named",
            "words",
            "asks",
            "session rank",
        )
        if n in names
    ]
    data_k = {q: (with_kinds(x, kindq[q], inter_cols), ids, y) for q, (x, ids, y) in data.items()}
    out: dict[str, Any] = {}
    base = {q: recall10(by[q], [d for d, _, _ in by[q]["candidates"]]) for q in qids}
    out["off"] = cats(by, base)
    print("off", json.dumps(out["off"]), flush=True)
    print(
        "kinds",
        json.dumps(
            {
                k: {
                    CATEGORIES[c]: int(sum(kindq[q][i] for q in qids if by[q]["category"] == c)) for c in CATS
                }
                for i, k in enumerate(KIND_NAMES)
            }
        ),
        flush=True,
    )
    variants: dict[
        str, tuple[dict[str, tuple[np.ndarray, list[str], np.ndarray]], Callable[[], Learner]]
    ] = {}
    gate = None
    if args.skip_kind:
        skip = [KIND_NAMES.index(k) for k in args.skip_kind]
        gate = lambda r: not any(kindq[r["qid"]][i] for i in skip)  # noqa: E731
    for l2 in args.l2:
        variants[f"pointwise l2={l2}"] = (data, lambda l2=l2: Learner("pointwise", l2))
        variants[f"pointwise+kinds l2={l2}"] = (data_k, lambda l2=l2: Learner("pointwise", l2))
        variants[f"weighted l2={l2}"] = (data, lambda l2=l2: Learner("weighted", l2))
        variants[f"pairwise l2={l2}"] = (data, lambda l2=l2: Learner("pairwise", l2))
        variants[f"pairwise+kinds l2={l2}"] = (data_k, lambda l2=l2: Learner("pairwise", l2))
    if args.trees:
        for depth, it in ((3, 100), (4, 200)):
            params = {"max_depth": depth, "max_iter": it, "learning_rate": 0.05, "min_samples_leaf": 40}
            variants[f"trees d{depth} n{it}"] = (data, lambda p=params: Learner("trees", **p))
            variants[f"trees+kinds d{depth} n{it}"] = (data_k, lambda p=params: Learner("trees", **p))
    for name, (dset, make) in variants.items():
        if args.only and not any(name.startswith(o) for o in args.only):
            continue
        t = time.perf_counter()
        res = learned(recs, dset, make, gate)
        out[name] = {"in_sample": cats(by, res["in_sample"]), "left_out": cats(by, res["left"])}
        print(name, json.dumps(out[name]), f"({time.perf_counter() - t:.0f} s)", flush=True)
        model = res["model"]
        if isinstance(model, Learner) and model.kind != "trees" and dset is data:
            out[name]["weights"] = dict(zip(names, (round(float(w), 3) for w in model.w)))
            out[name]["scale"] = {"mean": model.mu.round(5).tolist(), "sd": model.sd.round(5).tolist()}
        left, _inside = res["left"], res["in_sample"]
        out[name]["paired_left_out"] = paired(left, base)
        if args.write_model is not None and name == args.adopt:
            if dset is not data or not isinstance(model, Learner) or model.kind not in LEARNER_RECORD:
                raise SystemExit(f"--write-model: {name!r} is not a linear model over the features")
            figures = {
                "metric": "recall@10 of the evidence turns (the study's re-ordering of the dumped first 100)",
                "left_out": out[name]["left_out"]["all"],
                "in_sample": out[name]["in_sample"]["all"],
                "per_category": {
                    c: {k: _figure(out[name][k][c]) for k in ("in_sample", "left_out")}
                    for c in out[name]["left_out"]
                    if c != "all"
                },
            }
            write_model(args.write_model, model, names, _fit_record(args, model, recs), figures)
            print("model written to", args.write_model, flush=True)
    # speaker MMR for list questions (chosen left out among lam x depth x keep)
    if not args.only or "mmr" in args.only:
        li = KIND_NAMES.index("list")
        grid = [None] + [
            (lam, depth, keep) for lam in (0.3, 0.5, 0.7) for depth in (30, 50, 100) for keep in (3, 5)
        ]
        recall = {}
        for v in grid:
            recall[v] = {}
            for q in qids:
                r = by[q]
                if v is None or not kindq[q][li]:
                    recall[v][q] = base[q]
                else:
                    recall[v][q] = recall10(r, mmr_order(r, convs[r["conv"]], *v))
        chosen = choose(qids, conv_of, recall)
        out["mmr (list questions)"] = {
            "in_sample": {"chosen": chosen["in_sample"], **cats(by, recall[chosen["in_sample"]])},
            "left_out": cats(by, chosen["left"]),
            "per_fold": dict(chosen["pick"].items()),
        }
        print("mmr", json.dumps(out["mmr (list questions)"], default=str), flush=True)
    if args.nested:
        forms = args.learners or ["pointwise"]
        makers = {
            (f"{form} {l2}" if len(forms) > 1 else l2): (lambda form=form, l2=l2: Learner(form, l2))
            for form in forms
            for l2 in args.l2
        }
        res = nested(recs, data, makers, gate)
        out["nested"] = {
            "left_out": cats(by, res["left"]),
            "per_fold": res["pick"],
            "paired_left_out": paired(res["left"], base),
            **{
                f"paired {CATEGORIES[c]}": paired(
                    {q: v for q, v in res["left"].items() if by[q]["category"] == c},
                    {q: v for q, v in base.items() if by[q]["category"] == c},
                )
                for c in CATS
            },
        }
        print("nested", json.dumps(out["nested"], default=str), flush=True)
    if args.report:
        args.report.write_text(json.dumps(out, indent=1, default=str) + "\n", encoding="utf-8")
    return out


def nested(
    recs: list[dict[str, Any]],
    data: dict[str, tuple[np.ndarray, list[str], np.ndarray]],
    makers: dict[Any, Callable[[], Learner]],
    gate: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[str, Any]:
    """The regularisation too chosen leaving one out: for each left-out conversation, the value whose
    left-out recall over the other four (each of them left out in turn) is best, trained on the four."""
    by = {r["qid"]: r for r in recs}
    convs = sorted({r["conv"] for r in recs})
    base = {q: recall10(by[q], [d for d, _, _ in by[q]["candidates"]]) for q in by}
    act = [q for q in by if gate is None or gate(by[q])]

    def apply(model: Learner, q: str) -> float:
        x, ids, _ = data[q]
        return recall10(
            by[q], rerank_order(ids, model.score(x), [d for d, _, _ in by[q]["candidates"]], len(ids))
        )

    def fit(make: Callable[[], Learner], qs: list[str]) -> Learner:
        return make().fit([data[q][0] for q in qs], [data[q][2] for q in qs])

    left = dict(base)
    pick = {}
    for g in convs:
        train_convs = [c for c in convs if c != g]
        best, best_v = None, -1.0
        for key, make in makers.items():
            vals = {q: base[q] for q in by if by[q]["conv"] != g}
            for h in train_convs:
                m = fit(make, [q for q in act if by[q]["conv"] not in (g, h)])
                vals.update({q: apply(m, q) for q in act if by[q]["conv"] == h})
            v = statistics.fmean(vals.values())
            if v > best_v:
                best, best_v = key, v
        pick[g] = best
        m = fit(makers[best], [q for q in act if by[q]["conv"] != g])
        left.update({q: apply(m, q) for q in act if by[q]["conv"] == g})
    return {"left": left, "pick": pick}


def main(argv: Sequence[str] | None = None) -> int:
    offline_environment()
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.locomo_ltr", description=__doc__.splitlines()[0]
    )
    parser.add_argument("action", choices=("dump", "study", "speed"))
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_OUT / "locomo-work")
    parser.add_argument("--tag", default="", help="suffix of the record files (dump writes, study reads)")
    parser.add_argument("--records", type=Path, default=None)
    parser.add_argument("--conversations", type=int, default=None)
    parser.add_argument("--limit-questions", type=int, default=None)
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--l2", type=float, nargs="*", default=[1.0, 10.0, 100.0])
    parser.add_argument(
        "--trees", action="store_true", help="study: also gradient-boosted trees (scikit-learn)"
    )
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument(
        "--nested", action="store_true", help="study: choose l2 too, leaving one conversation out"
    )
    parser.add_argument("--features", nargs="*", default=[], help="study: only these candidate features")
    parser.add_argument(
        "--learners",
        nargs="*",
        default=[],
        choices=("pointwise", "weighted", "pairwise"),
        help="study --nested: the learner forms chosen among, with l2, leaving one conversation out (default pointwise)",
    )
    parser.add_argument(
        "--skip-kind", nargs="*", default=[], help="study: leave questions of these kinds as they are"
    )
    parser.add_argument("--report", type=Path, default=None)
    parser.add_argument(
        "--write-model",
        type=Path,
        default=None,
        help="study: write the --adopt row's fit on all conversations as the turn model's file "
        "(explorer/search/memory/models/turn_model.json)",
    )
    parser.add_argument(
        "--adopt", default=ADOPTED, help=f"study --write-model: the row written (default {ADOPTED!r})"
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.command = "python -m benchmarks.locomo_ltr " + shlex.join(argv)
    if args.records is None:
        args.records = args.out / f"locomo-ltr{args.tag}.jsonl"
    if args.action == "dump":
        dump(args)
    elif args.action == "speed":
        speed(args)
    else:
        out = study(args)
        if args.write_model is not None and args.adopt not in out:
            raise SystemExit(f"--write-model: the row {args.adopt!r} was not fitted (see --only, --l2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
