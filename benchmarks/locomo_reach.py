r"""Where the missed LoCoMo evidence sits, and candidate-generation ideas tried on every turn of a conversation.

Run with ``nice -n 10 python -m benchmarks.locomo_reach dump`` after ``benchmarks.locomo`` built
the vaults (kept work folder; nothing is embedded again unless a cache misses). ``dump`` runs every
question through the default pipeline with every turn as a candidate (`experimental.candidates`
deep enough for the whole conversation), and records per question the fused score of each turn it
found, with the signals the ideas below read, computed over *all* turns of the conversation:

    own        each turn's own cosine with the query (the index's vector)
    ctx        each turn's dialog-context cosine (the turn read with its neighbours)
    session    per session: BM25 of the session's words (all its turns as one document) and the
               cosine of the query with the session's mean turn vector
    prf        the cosine (better of own and context) with the query moved toward the mean of the
               first `PRF_K` results' own vectors (Rocchio in dense space)
    parts      a question split into parts ("X and Y", "X or Y", a list): each part's BM25 (turn's
               own words) and own cosine
    enriched   the cosine with a second vector of each turn, embedded from the turn enriched with
               its context: the turn before it (the question it answers), the speaker's name and
               the session's date
    expansion  words of the conversation near each of the question's words (MiniLM on single
               words: "pets" -> dog, turtle, pup), with their cosine, for a BM25 search of them

``analyse`` prints, for missed multi-hop and open-domain questions, each evidence turn with its rank
and what matches it; ``ideas`` re-scores the recorded lists with each idea on a grid and chooses
its value leaving one conversation out (benchmarks.locomo_recall.choose), in-sample beside left out
per category. Beside the additive ideas, ``rescore`` re-weighs the first 100 by their session's
BM25, their length and whether they ask, and ``linear`` is a logistic regression over all of these
signals (trained on four conversations, scored on the fifth).
"""

from __future__ import annotations

import argparse
import json
import math
import re
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
from benchmarks.locomo_recall import choose

CATS = (1, 2, 3, 4)
COS_FLOOR = 0.25
DEPTH = 2000
PRF_K = 5
_PART_SPLIT = re.compile(r",\s*|\s+(?:and|or|as well as|besides|apart from|other than)\s+", re.I)


def _tok(text: str) -> list[str]:
    from explorer.text.tokenize import tokenize

    return tokenize(text)


class BM25:
    """Okapi BM25 (k1 1.5, b 0.75) over small token lists (sessions, turns' own words)."""

    def __init__(self, docs: list[list[str]]) -> None:
        self.docs = docs
        self.n = len(docs)
        self.avg = statistics.fmean(len(d) for d in docs) if docs else 1.0
        df: dict[str, int] = {}
        self.tf: list[dict[str, int]] = []
        for d in docs:
            tf: dict[str, int] = {}
            for t in d:
                tf[t] = tf.get(t, 0) + 1
            self.tf.append(tf)
            for t in tf:
                df[t] = df.get(t, 0) + 1
        self.idf = {t: max(0.0, math.log((self.n - f + 0.5) / (f + 0.5) + 1.0)) for t, f in df.items()}

    def scores(self, toks: Sequence[str]) -> list[float]:
        out = []
        for d, tf in zip(self.docs, self.tf):
            s = 0.0
            norm = 1.5 * (1 - 0.75 + 0.75 * len(d) / self.avg)
            for t in set(toks):
                f = tf.get(t, 0)
                if f:
                    s += self.idf.get(t, 0.0) * f * 2.5 / (f + norm)
            out.append(s)
        return out


def parts_of(question: str, names: set[str]) -> list[str]:
    """A question's parts when it lists things ("X and Y"): each with two content words or more, else []."""
    body = question.rstrip("?").strip()
    pieces = [p.strip() for p in _PART_SPLIT.split(body) if p.strip()]
    if len(pieces) < 2:
        return []
    out = []
    for p in pieces:
        words = [t for t in _tok(p) if t not in names]
        if words:
            out.append(p)
    return out if len(out) >= 2 else []


def dump(args: argparse.Namespace) -> None:
    from benchmarks.locomo import open_vault_index
    from benchmarks.quality import parse_overrides
    from explorer.config import load_settings
    from explorer.engine import make_pipeline

    convs = load_conversations(args.data)[: args.conversations]
    out = args.out / "locomo-reach.jsonl"
    fh = out.open("w", encoding="utf-8")
    for conv in convs:
        vault = args.work_dir / _folder_name(conv.sample_id)
        mapping = write_vault(conv, vault)
        index, _settings, _ = open_vault_index(vault, parse_overrides(args.set), True)
        deep = load_settings(vault, {**parse_overrides(args.set), "experimental.candidates": DEPTH})
        pipe = make_pipeline(index, deep)
        turn_of = {t.dia_id: t for t in conv.turns}
        dia_of_path = mapping
        people = {t.speaker for t in conv.turns}
        name_toks = {w for p in people for w in _tok(p)}
        with index.snapshot() as snap:
            paths = list(mapping)
            nid_of = {p: snap.shard_ids(p)[0] for p in paths if snap.shard_ids(p)}
            dias = [dia_of_path[p] for p in paths if p in nid_of]
            own = np.stack([snap.vector(nid_of[p]) for p in paths if p in nid_of]).astype(np.float32)
            sessions = sorted({turn_of[d].session for d in dias})
            sess_idx = {s: i for i, s in enumerate(sessions)}
            turn_sess = np.array([sess_idx[turn_of[d].session] for d in dias])
            sess_vec = np.stack([own[turn_sess == i].mean(axis=0) for i in range(len(sessions))])
            sess_vec /= np.linalg.norm(sess_vec, axis=1, keepdims=True)
            sess_docs: list[list[str]] = [[] for _ in sessions]
            own_docs = []
            for d in dias:
                toks = [t for t in _tok(turn_of[d].text) if t not in name_toks]
                sess_docs[sess_idx[turn_of[d].session]].extend(toks)
                own_docs.append(toks)
            sess_bm25 = BM25(sess_docs)
            own_bm25 = BM25(own_docs)
            row_of = {nid_of[p]: i for i, p in enumerate(p for p in paths if p in nid_of)}
            enc = index.embedder()
            enriched = np.asarray(enc.encode(enriched_texts(conv, dias)), dtype=np.float32)
            vocab = sorted({w for d in dias for w in content_words(turn_of[d].text)})
            vocab_vecs = np.asarray(enc.encode(vocab), dtype=np.float32)
            vocab_stems = [(_tok(w) or [w])[0] for w in vocab]
            for q in conv.questions[: args.limit_questions]:
                t = time.perf_counter()
                res = pipe.search(q.text, k=DEPTH, record=False)
                ms = (time.perf_counter() - t) * 1000
                cands = [
                    [dia_of_path[r.document_path], round(r.score, 6)]
                    for r in res.results
                    if r.source == "search" and r.document_path in dia_of_path
                ]
                qv = enc.encode([q.text])[0].astype(np.float32)
                ctx_hits = snap.vector_top(qv.reshape(1, -1), DEPTH, -1.0, None, context=True)[0]
                ctx = np.full(len(dias), -1.0, dtype=np.float32)
                for nid, cos in ctx_hits:
                    if nid in row_of:
                        ctx[row_of[nid]] = cos
                own_cos = own @ qv
                qtoks = [t for t in _tok(q.text) if t not in name_toks]
                s_bm = sess_bm25.scores(qtoks)
                s_cos = sess_vec @ qv
                top = [dias.index(d) for d, _ in cands[:PRF_K]]
                prf_q = qv + own[top].mean(axis=0) if top else qv
                prf_q /= np.linalg.norm(prf_q)
                prf = np.maximum(own @ prf_q, _ctx_cos(snap, prf_q, row_of, len(dias)))
                parts = parts_of(q.text, name_toks)
                part_rows = []
                if parts:
                    pv = enc.encode(parts).astype(np.float32)
                    for ptext, v in zip(parts, pv):
                        ptoks = [t for t in _tok(ptext) if t not in name_toks]
                        part_rows.append(
                            {
                                "text": ptext,
                                "bm25": [round(x, 4) for x in own_bm25.scores(ptoks)],
                                "cos": [round(float(x), 4) for x in (own @ v)],
                            }
                        )
                rec = {
                    "qid": q.qid,
                    "conv": conv.sample_id,
                    "question": q.text,
                    "category": q.category,
                    "evidence": list(q.evidence),
                    "named": sorted(p for p in people if re.search(r"\b" + re.escape(p) + r"\b", q.text)),
                    "ms": round(ms, 1),
                    "candidates": cands,
                    "dias": dias,
                    "own": [round(float(x), 4) for x in own_cos],
                    "ctx": [round(float(x), 4) for x in ctx],
                    "prf": [round(float(x), 4) for x in prf],
                    "turn_session": turn_sess.tolist(),
                    "session_bm25": [round(x, 4) for x in s_bm],
                    "session_cos": [round(float(x), 4) for x in s_cos],
                    "parts": part_rows,
                    "enriched": [round(float(x), 4) for x in (enriched @ qv)],
                    "expansion": expansion(enc, q.text, vocab_vecs, vocab_stems, name_toks),
                }
                fh.write(json.dumps(rec) + "\n")
            fh.flush()
        index.close()
        log(f"{conv.sample_id}: {len(conv.questions)} questions")
    fh.close()
    log(f"wrote {out}")


_WORDS = re.compile(r"[a-z]+")
#: Vocabulary neighbours kept per question word, and the least cosine recorded.
EXPANSION_NEIGHBOURS = 20
EXPANSION_FLOOR = 0.4


def content_words(text: str) -> list[str]:
    """Lower-case words of three letters or more that are not stop words."""
    from explorer.text.tokenize import STOPWORDS

    return [w for w in _WORDS.findall(text.lower()) if len(w) > 2 and w not in STOPWORDS]


def expansion(
    enc: Any, question: str, vecs: np.ndarray, stems: list[str], names: set[str]
) -> list[list[Any]]:
    """[stem, cosine] of the conversation's words nearest each content word of the question (not its own stem,
    not a name), the best cosine per stem, at least EXPANSION_FLOOR."""
    words = [w for w in content_words(question) if (_tok(w) or [w])[0] not in names]
    if not words or not len(vecs):
        return []
    sims = np.asarray(enc.encode(words), dtype=np.float32) @ vecs.T
    best: dict[str, float] = {}
    for i, w in enumerate(words):
        own = set(_tok(w))
        for j in np.argsort(-sims[i])[:EXPANSION_NEIGHBOURS]:
            stem = stems[j]
            if stem in own or stem in names or sims[i, j] < EXPANSION_FLOOR:
                continue
            best[stem] = max(best.get(stem, 0.0), float(sims[i, j]))
    return [[t, round(c, 4)] for t, c in sorted(best.items(), key=lambda kv: -kv[1])]


def enriched_texts(conv: Any, dias: list[str]) -> list[str]:
    """Each turn with its context: the turn before it in its session, then `Speaker, <date>. <text>`."""
    turns = conv.turns
    at = {t.dia_id: i for i, t in enumerate(turns)}
    out = []
    for d in dias:
        i = at[d]
        t = turns[i]
        prev = turns[i - 1] if i and turns[i - 1].session == t.session else None
        day = t.when.strftime("%d %B %Y") if t.when is not None else ""
        text = f"{t.speaker}, {day}. " + t.text.split(":", 1)[-1].strip()
        out.append(f"{prev.text}\n{text}" if prev is not None else text)
    return out


def _ctx_cos(snap: Any, qv: np.ndarray, row_of: dict[str, int], n: int) -> np.ndarray:
    hits = snap.vector_top(qv.reshape(1, -1), DEPTH, -1.0, None, context=True)[0]
    out = np.full(n, -1.0, dtype=np.float32)
    for nid, cos in hits:
        if nid in row_of:
            out[row_of[nid]] = cos
    return out


# -- offline ---------------------------------------------------------------------------------------
def load(path: Path) -> list[dict[str, Any]]:
    recs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in recs if r["category"] in CATS and r["evidence"]]


def _norm_cos(x: np.ndarray) -> np.ndarray:
    best = float(x.max()) if len(x) else 0.0
    span = best - COS_FLOOR
    return np.clip((x - COS_FLOOR) / span, 0, 1) if span > 0 else np.zeros_like(x)


def _norm_lex(x: np.ndarray) -> np.ndarray:
    best = float(x.max()) if len(x) else 0.0
    return x / best if best > 0 else np.zeros_like(x)


def base_scores(r: dict[str, Any], cut: int) -> np.ndarray:
    """The pipeline's fused score of each turn among its first `cut` results (0 below)."""
    pos = {d: i for i, d in enumerate(r["dias"])}
    out = np.zeros(len(r["dias"]), dtype=np.float64)
    for d, s in r["candidates"][:cut]:
        if d in pos:
            out[pos[d]] = s
    return out


def ranked(r: dict[str, Any], scores: np.ndarray) -> list[str]:
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    return [r["dias"][i] for i in order if scores[i] > 0]


def said(text: str) -> str:
    """A turn's words without the speaker and an image's caption."""
    return text.split("\n\n", 1)[0].split(":", 1)[-1].strip()


def idea_grids(
    turns: dict[tuple[str, str], Any],
) -> dict[str, tuple[list[Any], Callable[[dict[str, Any], Any, int], np.ndarray]]]:
    """Each idea: (grid, scores(record, value, cut)); the grid's first value is 'off'."""

    def top_of(r: dict[str, Any], cut: int) -> float:
        return r["candidates"][0][1] if r["candidates"] else 1.0

    def session(r: dict[str, Any], v: tuple[float, float, int], cut: int) -> np.ndarray:
        w, mix, m = v
        base = base_scores(r, cut)
        if not w:
            return base
        s = mix * _norm_lex(np.array(r["session_bm25"])) + (1 - mix) * _norm_cos(np.array(r["session_cos"]))
        order = np.argsort(-s)[:m]
        keep = np.zeros_like(s)
        keep[order] = s[order]
        ts = np.array(r["turn_session"])
        # A turn of a top session gains w x its session's score x the best fused score, when the turn
        # matches on its own at all (own or context cosine over the floor).
        own = np.maximum(np.array(r["own"]), np.array(r["ctx"]))
        match = _norm_cos(own)
        return base + w * top_of(r, cut) * keep[ts] * match

    def prf(r: dict[str, Any], w: float, cut: int) -> np.ndarray:
        base = base_scores(r, cut)
        if not w:
            return base
        return base + w * top_of(r, cut) * _norm_cos(np.array(r["prf"]))

    def parts(r: dict[str, Any], v: tuple[float, float], cut: int) -> np.ndarray:
        w, mix = v
        base = base_scores(r, cut)
        if not w or not r["parts"]:
            return base
        add = np.zeros_like(base)
        for p in r["parts"]:
            add = np.maximum(
                add,
                mix * _norm_lex(np.array(p["bm25"])) + (1 - mix) * _norm_cos(np.array(p["cos"])),
            )
        return base + w * top_of(r, cut) * add

    def deeper(r: dict[str, Any], c: int, cut: int) -> np.ndarray:
        return base_scores(r, c)

    def enriched(r: dict[str, Any], w: float, cut: int) -> np.ndarray:
        base = base_scores(r, cut)
        return base + w * top_of(r, cut) * _norm_cos(np.array(r["enriched"])) if w else base

    shapes: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    lexicons: dict[str, BM25] = {}
    expanded: dict[tuple[str, float, int], np.ndarray] = {}

    def expand(r: dict[str, Any], v: tuple[float, float, int], cut: int) -> np.ndarray:
        w, floor, k = v
        base = base_scores(r, cut)
        if not w:
            return base
        key = (r["qid"], floor, k)
        if key not in expanded:
            if r["conv"] not in lexicons:
                names = {t for (c, _), turn in turns.items() if c == r["conv"] for t in _tok(turn.speaker)}
                lexicons[r["conv"]] = BM25(
                    [[t for t in _tok(turns[(r["conv"], d)].text) if t not in names] for d in r["dias"]]
                )
            lex = lexicons[r["conv"]]
            score = np.zeros(len(r["dias"]))
            for stem, cos in [e for e in r["expansion"] if e[1] >= floor][:k]:
                score += cos * np.array(lex.scores([stem]))
            expanded[key] = _norm_lex(score)
        return base + w * top_of(r, cut) * expanded[key]

    def shape(r: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """Each turn's word count and whether it asks (once per conversation: its turns are in one order)."""
        if r["conv"] not in shapes:
            texts = [said(turns[(r["conv"], d)].text) for d in r["dias"]]
            shapes[r["conv"]] = (
                np.array([len(t.split()) for t in texts]),
                np.array([t.endswith("?") for t in texts], dtype=float),
            )
        return shapes[r["conv"]]

    def rescore(r: dict[str, Any], v: tuple[float, float, float], cut: int) -> np.ndarray:
        w, length, p = v
        base = base_scores(r, cut)
        if not any(v):
            return base
        sess = _norm_lex(np.array(r["session_bm25"]))[np.array(r["turn_session"])]
        words, asking = shape(r)
        lifted = (base + w * top_of(r, cut) * sess) * (1 + length * np.minimum(1.0, words / 40))
        return np.where(base > 0, lifted * (1 - p * asking), 0.0)

    return {
        "depth": ([100, 200, 400, DEPTH], deeper),
        "session": (
            [(0.0, 0.5, 0)]
            + [(w, mix, m) for w in (0.1, 0.2, 0.3, 0.5) for mix in (0.0, 0.5, 1.0) for m in (1, 2, 3, 5)],
            session,
        ),
        "prf": ([0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0], prf),
        "parts": ([(0.0, 0.5)] + [(w, mix) for w in (0.1, 0.2, 0.3, 0.5) for mix in (0.0, 0.5, 1.0)], parts),
        "enriched": ([0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0], enriched),
        "expand": (
            [(0.0, 0.0, 0)]
            + [(w, f, k) for w in (0.05, 0.1, 0.2, 0.3, 0.5) for f in (0.45, 0.55, 0.65) for k in (5, 10)],
            expand,
        ),
        "rescore": (
            [
                (w, length, p)
                for w in (0, 0.05, 0.1, 0.2, 0.3)
                for length in (0, 0.1, 0.2, 0.3)
                for p in (0, 0.1, 0.2)
            ],
            rescore,
        ),
    }


FEATURES = (
    "fused / best",
    "1 / log2(rank + 1)",
    "own cosine",
    "context cosine",
    "prf cosine",
    "session BM25",
    "session cosine",
    "named speaker",
    "other speaker",
    "asks",
    "length",
    "image",
    "enriched cosine",
)


def features(r: dict[str, Any], turns: dict[tuple[str, str], Any], cut: int) -> tuple[np.ndarray, list[str]]:
    """One row of FEATURES per turn of the first `cut` results."""
    pos = {d: i for i, d in enumerate(r["dias"])}
    top = r["candidates"][0][1] if r["candidates"] else 1.0
    sbm = _norm_lex(np.array(r["session_bm25"]))
    scos = _norm_cos(np.array(r["session_cos"]))
    rows, ids = [], []
    for rank, (d, s) in enumerate(r["candidates"][:cut], start=1):
        i = pos[d]
        t = turns[(r["conv"], d)]
        words = said(t.text)
        ses = r["turn_session"][i]
        named = r["named"]
        rows.append(
            [
                s / top,
                1 / math.log2(rank + 1),
                r["own"][i],
                r["ctx"][i],
                r["prf"][i],
                sbm[ses],
                scos[ses],
                float(bool(named) and t.speaker in named),
                float(bool(named) and t.speaker not in named),
                float(words.endswith("?")),
                min(1.0, len(words.split()) / 40),
                float("(shared an image" in t.text),
                r["enriched"][i],
            ]
        )
        ids.append(d)
    return np.array(rows, dtype=np.float64), ids


def logistic(x: np.ndarray, y: np.ndarray, l2: float = 1.0, steps: int = 25) -> np.ndarray:
    """L2-regularised logistic regression by Newton steps (weights over standardised columns, then a bias)."""
    xb = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(xb.shape[1])
    reg = l2 * np.eye(xb.shape[1])
    reg[-1, -1] = 0.0
    for _ in range(steps):
        p = 1 / (1 + np.exp(-(xb @ w)))
        grad = xb.T @ (p - y) + reg @ w
        hess = (xb * (p * (1 - p))[:, None]).T @ xb + reg
        w -= np.linalg.solve(hess, grad)
    return w


def linear(
    recs: list[dict[str, Any]], turns: dict[tuple[str, str], Any], cut: int, gated: set[str] | None = None
) -> dict[str, Any]:
    """The logistic re-scorer of the first `cut` results: trained on four conversations, scored on the fifth.

    With `gated`, only those questions are re-scored (and trained on); the others keep the pipeline's order.
    """
    data = {}
    for r in recs:
        if gated is not None and r["qid"] not in gated:
            continue
        x, ids = features(r, turns, cut)
        data[r["qid"]] = (x, ids, np.array([float(d in r["evidence"]) for d in ids]))

    def fit(qids: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x = np.vstack([data[q][0] for q in qids])
        mu, sd = x.mean(axis=0), x.std(axis=0) + 1e-9
        return logistic((x - mu) / sd, np.concatenate([data[q][2] for q in qids])), mu, sd

    def recall(q: str, model: tuple[np.ndarray, np.ndarray, np.ndarray]) -> float:
        w, mu, sd = model
        x, ids, _ = data[q]
        score = ((x - mu) / sd) @ w[:-1]
        order = [ids[i] for i in np.argsort(-score, kind="stable")]
        return question_metrics(by[q]["evidence"], order)["recall@10"]

    by = {r["qid"]: r for r in recs}
    convs = sorted({r["conv"] for r in recs})
    kept = {
        r["qid"]: question_metrics(r["evidence"], [d for d, _ in r["candidates"][:cut]])["recall@10"]
        for r in recs
    }
    left = dict(kept)
    for g in convs:
        model = fit([q for q in data if by[q]["conv"] != g])
        left.update({q: recall(q, model) for q in data if by[q]["conv"] == g})
    model = fit(list(data))
    inside = dict(kept)
    inside.update({q: recall(q, model) for q in data})
    return {
        "left": left,
        "in_sample": inside,
        "weights (standardised)": dict(zip(FEATURES, (round(float(v), 3) for v in model[0][:-1]))),
    }


def ideas(args: argparse.Namespace) -> dict[str, Any]:
    recs = load(args.records)
    turns = {(c.sample_id, t.dia_id): t for c in load_conversations(args.data) for t in c.turns}
    by = {r["qid"]: r for r in recs}
    qids = sorted(by)
    gate = re.compile(args.gate, re.I) if args.gate else None
    gated = {q for q in qids if gate.search(by[q]["question"])} if gate is not None else None
    out: dict[str, Any] = {}
    if gated is not None:
        out["gated"] = {CATEGORIES[c]: sum(1 for q in gated if by[q]["category"] == c) for c in CATS}
        print("gated", json.dumps(out["gated"]), flush=True)

    def cats(values: dict[str, float]) -> dict[str, float | None]:
        res: dict[str, float | None] = {"all": round(statistics.fmean(values.values()), 4)}
        for c in CATS:
            xs = [v for q, v in values.items() if by[q]["category"] == c]
            res[CATEGORIES[c]] = round(statistics.fmean(xs), 4) if xs else None
        return res

    for name, (grid, fn) in idea_grids(turns).items():
        if args.only and name not in args.only:
            continue

        def pick(v: Any, q: str, off: Any = grid[0]) -> Any:
            return v if gated is None or q in gated else off

        recall = {
            v: {
                q: question_metrics(
                    by[q]["evidence"],
                    ranked(by[q], fn(by[q], pick(v, q), args.cut)),
                )["recall@10"]
                for q in qids
            }
            for v in grid
        }
        chosen = choose(qids, lambda q: by[q]["conv"], recall)
        bound = {
            q: len(
                set(by[q]["evidence"])
                & set(ranked(by[q], fn(by[q], pick(chosen["in_sample"], q), args.cut))[:100])
            )
            / len(by[q]["evidence"])
            for q in qids
        }
        out[name] = {
            "off": cats(recall[grid[0]]),
            "in_sample": {"chosen": chosen["in_sample"], **cats(recall[chosen["in_sample"]])},
            "left_out": cats(chosen["left"]),
            "per_fold": chosen["pick"],
            "in_top100_in_sample": cats(bound),
        }
        print(name, json.dumps(out[name], default=str), flush=True)
    if not args.only or "linear" in args.only:
        fitted = linear(recs, turns, args.cut, gated)
        out["linear"] = {
            "in_sample": cats(fitted["in_sample"]),
            "left_out": cats(fitted["left"]),
            "weights": fitted["weights (standardised)"],
        }
        print("linear", json.dumps(out["linear"]), flush=True)
    if args.report:
        args.report.write_text(json.dumps(out, indent=1, default=str) + "\n", encoding="utf-8")
    return out


def analyse(args: argparse.Namespace) -> dict[str, Any]:
    """Missed evidence of multi-hop and open-domain questions (past the first 100): what it shares with the question."""
    from benchmarks.locomo import load_conversations as lc
    from explorer.text.tokenize import STOPWORDS

    convs = lc(args.data)
    turns = {(c.sample_id, t.dia_id): t for c in convs for t in c.turns}
    order = {c.sample_id: [t.dia_id for t in c.turns] for c in convs}
    recs = load(args.records)
    counts: dict[str, int] = {}
    shown = 0

    def words(text: str) -> set[str]:
        return {t for t in _tok(text) if t not in STOPWORDS}

    for r in recs:
        if r["category"] not in (1, 3):
            continue
        rank = {d: i + 1 for i, (d, _) in enumerate(r["candidates"])}
        people = {w for (c, _), t in turns.items() if c == r["conv"] for w in _tok(t.speaker)}
        asked = words(r["question"]) - people
        pos = {d: i for i, d in enumerate(r["dias"])}
        seq = order[r["conv"]]
        missed = [e for e in r["evidence"] if rank.get(e, 10_000) > 100]
        for e in missed:
            t = turns[(r["conv"], e)]
            said, _, caption = t.text.partition("\n\n(shared an image:")
            own = words(said) - people
            cap = words(caption)
            k = seq.index(e)
            near = set()
            for j in (k - 1, k + 1):
                if 0 <= j < len(seq) and turns[(r["conv"], seq[j])].session == t.session:
                    near |= words(turns[(r["conv"], seq[j])].text) - people
            i = pos[e]
            kind = (
                "shares a word"
                if asked & own
                else "word in its image caption only"
                if asked & cap
                else "word in a neighbouring turn only"
                if asked & near
                else "no shared word, cosine >= 0.35"
                if max(r["own"][i], r["ctx"][i]) >= 0.35
                else "no shared word, cosine < 0.35"
            )
            named_other = bool(r["named"]) and t.speaker not in r["named"]
            counts[kind] = counts.get(kind, 0) + 1
            counts["all"] = counts.get("all", 0) + 1
            if named_other:
                counts["said by someone the question does not name"] = (
                    counts.get("said by someone the question does not name", 0) + 1
                )
        if missed and shown < args.limit:
            shown += 1
            print(f"\n## {r['qid']} [{CATEGORIES[r['category']]}] {r['question']}")
            for e in r["evidence"]:
                t = turns[(r["conv"], e)]
                i = pos[e]
                print(
                    f"  {e} rank {rank.get(e, '-')} own {r['own'][i]:.2f} ctx {r['ctx'][i]:.2f}: "
                    f"{t.text[:160]!r}"
                )
    print(json.dumps(counts, indent=1))
    if args.base is not None:
        print(json.dumps(evidence_depth(args.base), indent=1))
    return counts


def evidence_depth(path: Path) -> dict[str, Any]:
    """Share of the evidence turns in the first k results of a `benchmarks.locomo --candidates 100` run, per
    multi-hop and open-domain question (as recall@k) and pooled over the evidence turns."""
    recs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    out: dict[str, Any] = {}
    for c in (1, 3):
        sub = [r for r in recs if r.get("row") == "explorer" and r["category"] == c and r["evidence"]]
        turns = sum(len(r["evidence"]) for r in sub)
        row: dict[str, Any] = {"questions": len(sub), "evidence turns": turns}
        out[CATEGORIES[c]] = row
        if not sub:
            continue
        for k in (10, 20, 50, 100):
            found = [len(set(r["evidence"]) & {d for d, *_ in r["candidates"][:k]}) for r in sub]
            row[f"first {k}"] = {
                "per question": round(
                    statistics.fmean(f / len(r["evidence"]) for f, r in zip(found, sub)), 3
                ),
                "pooled": round(sum(found) / turns, 3),
            }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    offline_environment()
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.locomo_reach", description=__doc__.splitlines()[0]
    )
    parser.add_argument("action", choices=("dump", "analyse", "ideas"))
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_OUT / "locomo-work")
    parser.add_argument("--records", type=Path, default=DEFAULT_OUT / "locomo-reach.jsonl")
    parser.add_argument("--conversations", type=int, default=None)
    parser.add_argument("--limit-questions", type=int, default=None)
    parser.add_argument("--limit", type=int, default=50, help="analyse: questions shown")
    parser.add_argument(
        "--base",
        type=Path,
        default=None,
        help="analyse: records of `benchmarks.locomo --candidates 100` whose evidence depth to print",
    )
    parser.add_argument(
        "--cut", type=int, default=100, help="ideas: base candidates kept (the pipeline's depth)"
    )
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--report", type=Path, default=None, help="ideas: write the figures here as JSON")
    parser.add_argument(
        "--gate",
        default="",
        metavar="REGEX",
        help="ideas: act only on questions whose wording matches (case ignored); the others keep their list",
    )
    parser.add_argument("--set", action="append", default=[])
    args = parser.parse_args(argv)
    if args.action == "dump":
        dump(args)
    elif args.action == "analyse":
        analyse(args)
    else:
        ideas(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
