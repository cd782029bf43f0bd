r"""Agent-memory retrieval on LoCoMo: every question against the dialog turns that hold its answer.

Run with ``nice -n 10 python -m benchmarks.locomo [--data FILE]``. Each conversation becomes one
agent-memory vault in a persistent work folder (default ``bench-out/locomo-work/<sample_id>``):
one turn note per dialog turn at ``Users/<speaker>/turns/turn_NNNNNN/context.md`` with the turn's
speaker, session, dialog id and the session's date and time in its frontmatter, and the turn
text (``Speaker: text``, plus the caption of a shared image) as its body. The real indexer
indexes each vault; its vectors are cached in the vault's ``.explorer/``, so only the first run
embeds. Every question then runs through each row below, and its ranked turns are compared with
the question's ``evidence`` dialog ids.

Metrics per question (binary relevance: a turn is relevant when its dialog id is evidence):
    recall@5, recall@10  share of the evidence turns among the first 5 / 10 turns (ranx ``recall``)
    hit@5                1 when any evidence turn is among the first 5 (ranx ``hit_rate``)
    ndcg@10              ranx's default ``ndcg`` (Järvelin: gain = relevance, log2(rank + 1))
They are averaged per category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop) and over
categories 1-4. Category 5 (adversarial: the answer is not in the conversation) is measured by
how well each pipeline row's quality score separates answerable questions (categories 1-4,
higher is better) from adversarial ones (AUROC, ties count half), and by how often each group
is flagged "no good match" (the quality factor ``no_good_match``), with a 95 % bootstrap interval
of the AUROC and the AUROC of each recorded part of the score alone (``quality_parts`` per
question). Evidence ids that are not of the form ``D<session>:<turn>``, or that name no turn of
the conversation, are skipped and counted;
answerable questions left without evidence are counted and not scored.

Rows:
    explorer   the default pipeline (make_pipeline: two-pass and rerank as configured), k=10
    hybrid     pipeline pass 1 only: terms, BM25 + dense per term, RRF (no two-pass, no rerank)
    rank_bm25  rank_bm25.BM25Okapi over lower-case \w+ words of each turn's text
    dense      MiniLM alone: the index's vectors, cosine top-k, best shard per turn
    rrf        plain RRF (k=60) of the rank_bm25 and dense rankings

The explorer row's recall@10 over categories 1-4 is compared with each baseline by a paired
sign-flip permutation test on the per-question differences (10 000 permutations, fixed seed).
Per-question records are appended to ``OUT/locomo[-TAG].jsonl`` as they are measured and the
summary ``OUT/locomo[-TAG].json`` is rewritten after every conversation, so a stopped run keeps
what it measured.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.common import (
    DEFAULT_OUT,
    REPO,
    log,
    machine,
    markdown_table,
    offline_environment,
    summary,
    write_json,
)

DEFAULT_DATA = REPO.parent / "shared" / "bench" / "locomo" / "locomo10-dev.json"
ROWS = ("explorer", "hybrid", "rank_bm25", "dense", "rrf")
PIPELINE_ROWS = frozenset({"explorer", "hybrid"})
DENSE_ROWS = frozenset({"dense", "rrf"})
BASELINES = ("rank_bm25", "dense", "rrf")
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
METRICS = ("recall@5", "recall@10", "hit@5", "ndcg@10")
#: Parts of the quality score recorded per question (explorer.search.quality.assess), each judged alone.
QUALITY_PARTS = (
    "matched",
    "named_match",
    "named_coverage",
    "named_evidence",
    "other_coverage",
    "named_lead",
    "top_relevance",
    "agreement",
    "support",
)
K = 10
#: Depth of the baseline rankings fused by the plain RRF row.
RRF_DEPTH = 100
RRF_K = 60
_DIA = re.compile(r"^D(\d+):(\d+)$")
_SESSION = re.compile(r"^session_(\d+)$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


# -- data ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Turn:
    """One dialog turn."""

    dia_id: str
    """`D<session>:<turn>`."""
    number: int
    """Position in the conversation, from 1."""
    session: int
    """Session number."""
    speaker: str
    """Who spoke."""
    text: str
    """What was said (with a shared image's caption)."""
    when: datetime | None
    """The session's date and time, when it parses."""
    when_text: str
    """The session's date and time as written."""


@dataclass(frozen=True, slots=True)
class Question:
    """One question with its usable evidence."""

    qid: str
    """`<sample_id>#<index in qa>`."""
    text: str
    """The question."""
    category: int
    """1-5 (see CATEGORIES)."""
    evidence: tuple[str, ...]
    """Well-formed evidence dialog ids that name a turn of the conversation."""


@dataclass
class Conversation:
    """A conversation's turns and questions, with the annotation defects met while reading it."""

    sample_id: str
    turns: list[Turn]
    questions: list[Question]
    malformed: list[dict[str, Any]] = field(default_factory=list)
    """Evidence entries skipped: {qid, evidence, reason}."""


def parse_when(text: str) -> datetime | None:
    """LoCoMo's session date ("1:56 pm on 8 May, 2023") as a datetime, None when it does not parse."""
    try:
        return datetime.strptime(" ".join(text.split()), "%I:%M %p on %d %B, %Y")
    except ValueError:
        return None


def turn_text(turn: dict[str, Any]) -> str:
    """What a turn says: `Speaker: text`, then the caption of an image it shared."""
    text = f"{turn.get('speaker', '')}: {str(turn.get('text') or '').strip()}"
    caption = str(turn.get("blip_caption") or "").strip()
    if caption:
        text += f"\n\n(shared an image: {caption})"
    return text


def load_conversations(path: Path) -> list[Conversation]:
    """Read a LoCoMo file; evidence ids are checked against the conversation's turns."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    out: list[Conversation] = []
    for conv in raw:
        sample_id = str(conv["sample_id"])
        c = conv["conversation"]
        sessions = sorted(int(m.group(1)) for key in c if (m := _SESSION.match(key)))
        turns: list[Turn] = []
        for s in sessions:
            when_text = str(c.get(f"session_{s}_date_time") or "")
            when = parse_when(when_text)
            for t in c[f"session_{s}"] or []:
                turns.append(
                    Turn(
                        str(t["dia_id"]), len(turns) + 1, s, str(t["speaker"]), turn_text(t), when, when_text
                    )
                )
        known = {t.dia_id for t in turns}
        conversation = Conversation(sample_id, turns, [])
        for i, qa in enumerate(conv.get("qa") or []):
            qid = f"{sample_id}#{i}"
            good: list[str] = []
            for ev in qa.get("evidence") or []:
                ev = str(ev).strip()
                if not _DIA.match(ev):
                    conversation.malformed.append({"qid": qid, "evidence": ev, "reason": "malformed"})
                elif ev not in known:
                    conversation.malformed.append({"qid": qid, "evidence": ev, "reason": "no such turn"})
                elif ev not in good:
                    good.append(ev)
            conversation.questions.append(
                Question(qid, str(qa["question"]), int(qa["category"]), tuple(good))
            )
        out.append(conversation)
    return out


def _folder_name(name: str) -> str:
    return _UNSAFE.sub("_", name).strip("_") or "speaker"


def note_path(turn: Turn) -> str:
    """Vault-relative path of a turn's note."""
    return f"Users/{_folder_name(turn.speaker)}/turns/turn_{turn.number:06d}/context.md"


def note_content(turn: Turn, sample_id: str) -> tuple[str, str]:
    """(context.md, metadata.json) of a turn."""
    front = [
        "---",
        f"turn_id: {turn.number}",
        f'dia_id: "{turn.dia_id}"',
        f"conversation: {sample_id}",
        f"session: {turn.session}",
        f"speaker: {json.dumps(turn.speaker)}",
    ]
    if turn.when is not None:
        front.append(f"date: {turn.when.date().isoformat()}")
        front.append(f'time: "{turn.when.strftime("%H:%M")}"')
    front += ["tags: [agent/turn]", "---", ""]
    meta = {"turn_id": turn.number, "dia_id": turn.dia_id, "session": turn.session, "speaker": turn.speaker}
    if turn.when is not None:
        meta["timestamp"] = turn.when.isoformat()
    return "\n".join(front) + turn.text + "\n", json.dumps(meta, indent=2) + "\n"


def write_vault(conv: Conversation, vault: Path) -> dict[str, str]:
    """Write the conversation's turn notes (only changed files); returns note path -> dialog id."""
    mapping: dict[str, str] = {}
    written = 0
    for turn in conv.turns:
        rel = note_path(turn)
        mapping[rel] = turn.dia_id
        text, meta = note_content(turn, conv.sample_id)
        for path, content in ((vault / rel, text), ((vault / rel).with_name("metadata.json"), meta)):
            try:
                if path.read_text(encoding="utf-8") == content:
                    continue
            except OSError:
                pass
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
            written += 1
    for stale in vault.glob("Users/*/turns/turn_*/context.md"):
        rel = stale.relative_to(vault).as_posix()
        if rel not in mapping:
            stale.unlink()
            (stale.parent / "metadata.json").unlink(missing_ok=True)
    log(f"vault {vault}: {len(mapping)} turn notes ({written} files written)")
    return mapping


# -- metrics -------------------------------------------------------------------------------
def question_metrics(evidence: Sequence[str], ranked: Sequence[str]) -> dict[str, float]:
    """recall@5, recall@10, hit@5 and nDCG@10 (binary gains) of one ranked list of dialog ids."""
    rel = set(evidence)
    if not rel:
        return dict.fromkeys(METRICS, 0.0)
    top = list(ranked[:K])
    dcg = sum(1.0 / math.log2(i + 2) for i, d in enumerate(top) if d in rel)
    idcg = sum(1.0 / math.log2(i + 2) for i in range(min(len(rel), K)))
    return {
        "recall@5": len(rel & set(top[:5])) / len(rel),
        "recall@10": len(rel & set(top)) / len(rel),
        "hit@5": 1.0 if rel & set(top[:5]) else 0.0,
        "ndcg@10": dcg / idcg,
    }


def auroc(positive: Sequence[float], negative: Sequence[float]) -> float:
    """P(a positive scores above a negative), ties counted half (Mann-Whitney U / n+ n-)."""
    if not positive or not negative:
        return float("nan")
    pairs = sorted([(s, 1) for s in positive] + [(s, 0) for s in negative])
    rank_sum = 0.0
    i = 0
    while i < len(pairs):
        j = i
        while j < len(pairs) and pairs[j][0] == pairs[i][0]:
            j += 1
        mid = (i + 1 + j) / 2  # average rank of the tie group, ranks from 1
        rank_sum += mid * sum(1 for _, lab in pairs[i:j] if lab)
        i = j
    n_pos, n_neg = len(positive), len(negative)
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def auroc_interval(
    positive: Sequence[float], negative: Sequence[float], resamples: int = 2000, seed: int = 0
) -> list[float]:
    """A 95 % bootstrap interval of `auroc`: both groups resampled with replacement, fixed seed."""
    if not positive or not negative:
        return [float("nan")] * 2
    rng = random.Random(seed)
    pos, neg = list(positive), list(negative)
    boots = sorted(
        auroc(rng.choices(pos, k=len(pos)), rng.choices(neg, k=len(neg))) for _ in range(resamples)
    )
    return [round(boots[int(0.025 * resamples)], 4), round(boots[int(0.975 * resamples) - 1], 4)]


def paired_test(
    a: Sequence[float], b: Sequence[float], permutations: int = 10_000, seed: int = 0
) -> dict[str, float]:
    """Mean of a - b, a 95 % bootstrap interval of it and a two-sided sign-flip permutation p-value."""
    diffs = [x - y for x, y in zip(a, b)]
    n = len(diffs)
    if not n:
        return {"n": 0, "mean_diff": float("nan"), "ci95": [float("nan")] * 2, "p": float("nan")}
    rng = random.Random(seed)
    observed = abs(sum(diffs))
    extreme = 0
    for _ in range(permutations):
        if abs(sum(d if rng.random() < 0.5 else -d for d in diffs)) >= observed - 1e-12:
            extreme += 1
    boots = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(2000))
    return {
        "n": n,
        "mean_diff": round(sum(diffs) / n, 4),
        "ci95": [round(boots[int(0.025 * len(boots))], 4), round(boots[int(0.975 * len(boots)) - 1], 4)],
        "p": round((extreme + 1) / (permutations + 1), 5),
    }


# -- rows ----------------------------------------------------------------------------------
def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


class Rows:
    """The rows of one conversation: each maps a question to (dialog ids best first, quality or None)."""

    def __init__(
        self, conv: Conversation, index: Any, settings: Any, mapping: dict[str, str], rows: Sequence[str]
    ) -> None:
        self.conv, self.index, self.settings, self.mapping = conv, index, settings, mapping
        self.dia_of_turn = {t.dia_id: t for t in conv.turns}
        self.ids = [t.dia_id for t in conv.turns]
        self.pipeline = None
        self.bm25 = None
        self.depth = 0
        self.candidates: list[list[Any]] = []
        if "rank_bm25" in rows or "rrf" in rows:
            from rank_bm25 import BM25Okapi

            self.bm25 = BM25Okapi([_words(t.text) for t in conv.turns])
        if PIPELINE_ROWS & set(rows):
            self.pipeline = _make_pipeline(index, settings)
            self.pipeline.search("warm up the model", k=5, two_pass=False, rerank=False, record=False)

    def _dias(self, paths: Sequence[str]) -> list[str]:
        out: list[str] = []
        for p in paths:
            d = self.mapping.get(p)
            if d is not None and d not in out:
                out.append(d)
        return out

    def run(self, row: str, question: str) -> tuple[list[str], Any]:
        if row == "explorer":
            res = self.pipeline.search(question, k=max(K, self.depth), record=False)
            searched = [r for r in res.results if r.source == "search"]
            self.candidates = [
                [self.mapping[r.document_path], round(r.score, 6), r.relevance]
                for r in searched
                if r.document_path in self.mapping
            ]
            return self._dias([r.document_path for r in searched])[:K], res.quality
        if row == "hybrid":
            res = self.pipeline.search(question, k=K, two_pass=False, rerank=False, record=False)
            return self._dias([r.document_path for r in res.results if r.source == "search"])[:K], res.quality
        if row == "rank_bm25":
            return self._bm25(question)[:K], None
        if row == "dense":
            return self._dense(question)[:K], None
        if row == "rrf":
            fused: dict[str, float] = {}
            for ranking in (self._bm25(question), self._dense(question)):
                for rank, d in enumerate(ranking[:RRF_DEPTH], start=1):
                    fused[d] = fused.get(d, 0.0) + 1.0 / (RRF_K + rank)
            return [d for d, _ in sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))][:K], None
        raise ValueError(f"unknown row {row!r}")

    def _bm25(self, question: str) -> list[str]:
        import numpy as np

        scores = self.bm25.get_scores(_words(question))
        top = np.argsort(-scores, kind="stable")[:RRF_DEPTH]
        return [self.ids[i] for i in top if scores[i] > 0]

    def _dense(self, question: str) -> list[str]:
        vec = self.index.encode_query(question)
        if vec is None:
            return []
        items = self.index.dense.search(vec, RRF_DEPTH * 4)
        paths = []
        for node_id, _ in items:
            shard = self.index.shards.get(node_id)
            if shard is not None:
                paths.append(shard.path)
        return self._dias(paths)[:RRF_DEPTH]


def _make_pipeline(index: Any, settings: Any) -> Any:
    from explorer.engine import make_pipeline

    return make_pipeline(index, settings)


# -- report --------------------------------------------------------------------------------
def summarise(records: list[dict[str, Any]], rows: Sequence[str]) -> dict[str, Any]:
    """Means per row and category, adversarial separation, latency and the paired tests."""
    out: dict[str, Any] = {}
    for row in rows:
        recs = [r for r in records if r["row"] == row]
        if not recs:
            continue
        scored = [r for r in recs if r["category"] in (1, 2, 3, 4) and r["evidence"]]
        per_cat: dict[str, Any] = {}
        for cat in (1, 2, 3, 4):
            sub = [r for r in scored if r["category"] == cat]
            per_cat[str(cat)] = {"n": len(sub), **{m: _mean(r[m] for r in sub) for m in METRICS}}
        entry: dict[str, Any] = {
            "overall": {"n": len(scored), **{m: _mean(r[m] for r in scored) for m in METRICS}},
            "categories": per_cat,
            "latency_ms": summary([r["ms"] for r in recs]),
        }
        if row in PIPELINE_ROWS:
            answerable = [r for r in recs if r["category"] in (1, 2, 3, 4)]
            adversarial = [r for r in recs if r["category"] == 5]
            entry["adversarial"] = {
                "auroc": _round(
                    auroc([r["quality"] for r in answerable], [r["quality"] for r in adversarial])
                ),
                "auroc_ci95": auroc_interval(
                    [r["quality"] for r in answerable], [r["quality"] for r in adversarial]
                ),
                "auroc_of_parts": {
                    part: _round(
                        auroc(
                            [r["quality_parts"][part] for r in answerable],
                            [r["quality_parts"][part] for r in adversarial],
                        )
                    )
                    for part in QUALITY_PARTS
                    if all(part in r.get("quality_parts", {}) for r in answerable + adversarial)
                },
                "flagged_adversarial": _mean(float(r["no_good_match"]) for r in adversarial),
                "flagged_answerable": _mean(float(r["no_good_match"]) for r in answerable),
                "n_adversarial": len(adversarial),
                "n_answerable": len(answerable),
            }
        out[row] = entry
    if "explorer" in out:
        mine = {
            r["qid"]: r["recall@10"]
            for r in records
            if r["row"] == "explorer" and r["category"] in (1, 2, 3, 4) and r["evidence"]
        }
        tests = {}
        for base in [b for b in (*BASELINES, "hybrid") if b in out]:
            theirs = {r["qid"]: r["recall@10"] for r in records if r["row"] == base and r["qid"] in mine}
            common = sorted(set(mine) & set(theirs))
            tests[base] = paired_test([mine[q] for q in common], [theirs[q] for q in common])
        out["explorer"]["paired_recall@10"] = tests
    return out


def _mean(values: Any) -> float:
    vals = list(values)
    return round(statistics.fmean(vals), 4) if vals else float("nan")


def _round(x: float) -> float:
    return round(x, 4) if x == x else x


def print_tables(rows_summary: dict[str, Any], counts: dict[str, Any]) -> None:
    """Markdown tables on stdout."""
    print(
        f"\nLoCoMo: {counts['conversations']} conversations, {counts['turns']} turns, {counts['questions']} questions "
        f"(by category: {counts['by_category']}); evidence entries skipped: {counts['skipped_evidence']}, "
        f"answerable questions without evidence: {counts['no_evidence']}\n"
    )
    print(
        markdown_table(
            ["row", "R@5", "R@10", "hit@5", "nDCG@10", "p50 ms", "p95 ms"],
            [
                [
                    row,
                    e["overall"]["recall@5"],
                    e["overall"]["recall@10"],
                    e["overall"]["hit@5"],
                    e["overall"]["ndcg@10"],
                    f"{e['latency_ms']['median']:.1f}",
                    f"{e['latency_ms']['p95']:.1f}",
                ]
                for row, e in rows_summary.items()
            ],
        )
    )
    print()
    print(
        markdown_table(
            ["row", *(f"R@10 {CATEGORIES[c]}" for c in (1, 2, 3, 4))],
            [
                [row, *(e["categories"][str(c)]["recall@10"] for c in (1, 2, 3, 4))]
                for row, e in rows_summary.items()
            ],
        )
    )
    adv = [(row, e["adversarial"]) for row, e in rows_summary.items() if "adversarial" in e]
    if adv:
        print()
        print(
            markdown_table(
                ["row", "AUROC (cat 5 vs 1-4)", "95% CI", "flagged: adversarial", "flagged: answerable"],
                [
                    [
                        row,
                        a["auroc"],
                        f"[{a['auroc_ci95'][0]:.3f}, {a['auroc_ci95'][1]:.3f}]",
                        a["flagged_adversarial"],
                        a["flagged_answerable"],
                    ]
                    for row, a in adv
                ],
            )
        )
        parts = [(row, a["auroc_of_parts"]) for row, a in adv if a.get("auroc_of_parts")]
        if parts:
            print()
            names = list(parts[0][1])
            print(
                markdown_table(
                    ["row", *(f"AUROC {n} alone" for n in names)],
                    [[row, *(p.get(n) for n in names)] for row, p in parts],
                )
            )
    tests = rows_summary.get("explorer", {}).get("paired_recall@10")
    if tests:
        print()
        print(
            markdown_table(
                ["explorer R@10 vs", "mean diff", "95% CI", "p (paired)"],
                [
                    [b, t["mean_diff"], f"[{t['ci95'][0]:.3f}, {t['ci95'][1]:.3f}]", t["p"]]
                    for b, t in tests.items()
                ],
            )
        )


# -- orchestration -------------------------------------------------------------------------
def open_vault_index(
    vault: Path, overrides: dict[str, Any], embeddings: bool
) -> tuple[Any, Any, dict[str, Any]]:
    """The real indexer over one vault (embedding what its cache lacks)."""
    from benchmarks.quality import open_vault_index as open_index

    return open_index(vault, overrides, embeddings)


def main(argv: Sequence[str] | None = None) -> int:
    """Build the vaults, run every question through every row, print tables and write JSON."""
    offline_environment()
    parser = argparse.ArgumentParser(prog="python -m benchmarks.locomo", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="LoCoMo JSON file (default ../shared/bench/locomo/locomo10-dev.json)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default bench-out/)")
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="folder of the vaults, one per conversation (default OUT/locomo-work; reused so reruns never re-embed)",
    )
    parser.add_argument("--conversations", type=int, default=None, help="first N conversations only")
    parser.add_argument(
        "--limit-questions", type=int, default=None, help="first N questions of each conversation"
    )
    parser.add_argument(
        "--rows", default=",".join(ROWS), help=f"comma list of rows (default all: {','.join(ROWS)})"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="settings override for the pipeline rows",
    )
    parser.add_argument("--no-embeddings", action="store_true", help="BM25 only (dense rows skipped)")
    parser.add_argument(
        "--candidates",
        type=int,
        default=0,
        metavar="N",
        help="explorer row: record each question's first N results (dialog id, score, relevance) for offline study",
    )
    parser.add_argument("--tag", default="", help="suffix of the output file names")
    args = parser.parse_args(argv)

    from benchmarks.quality import parse_overrides

    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown} (known: {', '.join(ROWS)})")
    if args.no_embeddings:
        for r in [r for r in rows if r in DENSE_ROWS]:
            log(f"row {r}: skipped (embeddings off)")
        rows = [r for r in rows if r not in DENSE_ROWS]
    overrides = parse_overrides(args.set)
    t_all = time.perf_counter()
    convs = load_conversations(args.data)[: args.conversations]
    work = args.work_dir or (args.out / "locomo-work")
    suffix = f"-{args.tag}" if args.tag else ""
    jsonl = args.out / f"locomo{suffix}.jsonl"
    out_file = args.out / f"locomo{suffix}.json"
    jsonl.parent.mkdir(parents=True, exist_ok=True)
    jsonl.write_text("", encoding="utf-8")
    records: list[dict[str, Any]] = []
    skipped = [m for c in convs for m in c.malformed]
    counts: dict[str, Any] = {
        "conversations": 0,
        "turns": 0,
        "questions": 0,
        "by_category": {},
        "skipped_evidence": len(skipped),
        "no_evidence": 0,
    }
    indexes: dict[str, Any] = {}
    summary_rows: dict[str, Any] = {}
    for conv in convs:
        questions = conv.questions[: args.limit_questions]
        vault = work / _folder_name(conv.sample_id)
        mapping = write_vault(conv, vault)
        index, settings, info = open_vault_index(vault, overrides, not args.no_embeddings)
        indexes[conv.sample_id] = info
        runner = Rows(conv, index, settings, mapping, rows)
        runner.depth = args.candidates
        counts["conversations"] += 1
        counts["turns"] += len(conv.turns)
        counts["questions"] += len(questions)
        for q in questions:
            counts["by_category"][q.category] = counts["by_category"].get(q.category, 0) + 1
            if q.category != 5 and not q.evidence:
                counts["no_evidence"] += 1
        with jsonl.open("a", encoding="utf-8") as fh:
            for row in rows:
                t_row = time.perf_counter()
                for q in questions:
                    t = time.perf_counter()
                    ranked, quality = runner.run(row, q.text)
                    ms = (time.perf_counter() - t) * 1000
                    rec = {
                        "qid": q.qid,
                        "row": row,
                        "category": q.category,
                        "evidence": list(q.evidence),
                        "ranked": ranked,
                        "ms": round(ms, 2),
                        **question_metrics(q.evidence, ranked),
                    }
                    if row == "explorer" and runner.depth:
                        rec["question"] = q.text
                        rec["candidates"] = runner.candidates
                    if quality is not None:
                        rec["quality"] = quality.score
                        rec["level"] = quality.level
                        rec["no_good_match"] = bool(
                            quality.factors.get("no_good_match", quality.level == "low")
                        )
                        rec["quality_parts"] = {
                            p: quality.factors[p] for p in QUALITY_PARTS if p in quality.factors
                        }
                        rec["named"] = bool(quality.factors.get("named"))
                    records.append(rec)
                    fh.write(json.dumps(rec) + "\n")
                fh.flush()
                log(
                    f"  {conv.sample_id} {row}: {len(questions)} questions ({time.perf_counter() - t_row:.0f} s)"
                )
        index.close()
        summary_rows = summarise(records, rows)
        write_json(
            out_file,
            _report(args, rows, overrides, counts, skipped, indexes, summary_rows, t_all, complete=False),
        )
        log(f"wrote {out_file} after {conv.sample_id}")
    counts["by_category"] = dict(sorted(counts["by_category"].items()))
    print_tables(summary_rows, counts)
    write_json(
        out_file, _report(args, rows, overrides, counts, skipped, indexes, summary_rows, t_all, complete=True)
    )
    log(f"wrote {out_file} and {jsonl} ({time.perf_counter() - t_all:.0f} s)")
    return 0


def _report(
    args: argparse.Namespace,
    rows: Sequence[str],
    overrides: dict[str, Any],
    counts: dict[str, Any],
    skipped: list[dict[str, Any]],
    indexes: dict[str, Any],
    summary_rows: dict[str, Any],
    t_all: float,
    complete: bool,
) -> dict[str, Any]:
    return {
        "benchmark": "locomo",
        "data": str(args.data),
        "complete": complete,
        "rows_run": list(rows),
        "settings_overrides": overrides,
        "counts": counts,
        "skipped_evidence": skipped,
        "index": indexes,
        "rows": summary_rows,
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "wall_s": round(time.perf_counter() - t_all, 1),
    }


if __name__ == "__main__":
    sys.exit(main())
