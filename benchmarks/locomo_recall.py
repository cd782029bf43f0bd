r"""Recall on LoCoMo left out: values chosen on four conversations, scored on the fifth, beside the in-sample choice.

Run with ``python -m benchmarks.locomo_recall`` on per-question records of
``python -m benchmarks.locomo --rows explorer --candidates 100`` (no pipeline run: seconds).

``--runs LABEL=RECORDS.jsonl ...``: one pipeline run per candidate value of a setting (for example
``--set experimental.answer_weight=0.5``). For each conversation, the run with the best mean
recall@10 (categories 1-4) on the other four is chosen and its lists are scored on the left-out
one; the five left-out parts are pooled. Printed beside it: the run best on all five (in-sample),
the `--base` run, and a paired test of left-out against base (per-question recall@10).

``--ideas RECORDS.jsonl``: ranking ideas tried offline on one run's first 100 results per
question (dialog id and fused score), each a small grid chosen the same way:

    reply       a turn that asks (its text ends in "?") by someone other than the person the
                question names lends `w` of its score to the next turn of its session and keeps
                1 - `d` of its own (the pipeline's explorer.search.memory.signals.lift_answers)
    cap         at most `m` turns of one session in the first places, the rest after
    diversity   each turn's score times (1 - `d`) per turn of its session ranked above it
    asking      a turn times (1 - `p` x its share of sentences that ask) x (1 + `l` x min(1, words / 40))
    both        a question naming two people: their turns interleaved, best first
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.locomo import DEFAULT_DATA, Turn, load_conversations, paired_test, question_metrics

CATS = (1, 2, 3, 4)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def load_records(path: Path) -> dict[str, dict[str, Any]]:
    """The explorer row's scored questions (categories 1-4 with evidence) by question id."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        if r.get("row") == "explorer" and r["category"] in CATS and r["evidence"]:
            r["conv"] = r["qid"].split("#")[0]
            out[r["qid"]] = r
    return out


def _mean(xs: Any) -> float:
    xs = list(xs)
    return round(statistics.fmean(xs), 4) if xs else float("nan")


def choose(
    qids: Sequence[str], conv_of: Callable[[str], str], recall: dict[Any, dict[str, float]]
) -> dict[str, Any]:
    """Leave one conversation out over `recall` (candidate -> qid -> recall@10): choices, pooled figures."""
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


def report_runs(runs: dict[str, dict[str, dict[str, Any]]], base: str) -> dict[str, Any]:
    """The `--runs` report: per-fold choices, left-out and in-sample figures per category, paired test."""
    qids = sorted(set.intersection(*(set(r) for r in runs.values())))
    any_run = next(iter(runs.values()))
    recall = {label: {q: recs[q]["recall@10"] for q in qids} for label, recs in runs.items()}
    chosen = choose(qids, lambda q: any_run[q]["conv"], recall)

    def cats(values: dict[str, float]) -> dict[str, float]:
        out = {"all": _mean(values.values())}
        out.update({str(c): _mean(v for q, v in values.items() if any_run[q]["category"] == c) for c in CATS})
        return out

    rows = {label: cats(recall[label]) for label in runs}
    return {
        "questions": len(qids),
        "per_fold": chosen["pick"],
        "left_out": cats(chosen["left"]),
        "in_sample": {"chosen": chosen["in_sample"], **rows[chosen["in_sample"]]},
        "runs": rows,
        "paired_left_out_vs_base": paired_test(
            [chosen["left"][q] for q in qids], [recall[base][q] for q in qids]
        ),
    }


# -- offline ideas -----------------------------------------------------------------------------
def _asking_share(text: str) -> float:
    sentences = [s for s in _SENTENCE.split(text) if s.strip()]
    return sum(1 for s in sentences if s.rstrip().endswith("?")) / max(1, len(sentences))


class Turns:
    """What the offline ideas read of each turn (conversation, dialog id): session, speaker, text."""

    def __init__(self, data: Path) -> None:
        self.turn: dict[tuple[str, str], Turn] = {}
        self.next: dict[tuple[str, str], str] = {}
        self.people: dict[str, set[str]] = {}
        for conv in load_conversations(data):
            self.people[conv.sample_id] = {t.speaker for t in conv.turns}
            for t in conv.turns:
                self.turn[(conv.sample_id, t.dia_id)] = t
            for a, b in zip(conv.turns, conv.turns[1:]):
                if a.session == b.session:
                    self.next[(conv.sample_id, a.dia_id)] = b.dia_id

    def said(self, key: tuple[str, str]) -> str:
        """The turn's words without the speaker and the image caption (its first paragraph)."""
        return self.turn[key].text.split("\n\n", 1)[0].split(":", 1)[-1].strip()

    def named(self, conv: str, question: str) -> list[str]:
        return sorted(p for p in self.people[conv] if re.search(r"\b" + re.escape(p) + r"\b", question))


def idea_grids(turns: Turns) -> dict[str, tuple[list[Any], Callable[[dict[str, Any], Any], list[str]]]]:
    """Each idea: (grid, re-rank(record, value) -> dialog ids best first); the grid's first value is 'off'."""

    def base(r: dict[str, Any]) -> list[tuple[str, float]]:
        return [(d, s) for d, s, _ in r["candidates"]]

    def ordered(scores: dict[str, float]) -> list[str]:
        return [d for d, _ in sorted(scores.items(), key=lambda kv: -kv[1])]

    def reply(r: dict[str, Any], v: tuple[float, float]) -> list[str]:
        w, d = v
        named = turns.named(r["conv"], r["question"])
        scores = dict(base(r))
        if not w or not named:
            return ordered(scores)
        gain: dict[str, float] = {}
        for did, s in base(r):
            key = (r["conv"], did)
            nxt = turns.next.get(key)
            if nxt is None or turns.turn[key].speaker in named or not turns.said(key).endswith("?"):
                continue
            if turns.turn[(r["conv"], nxt)].speaker not in named:
                continue
            gain[nxt] = max(gain.get(nxt, 0.0), w * s)
            scores[did] = s * (1 - d)
        for did, g in gain.items():
            scores[did] = scores.get(did, 0.0) + g
        return ordered(scores)

    def cap(r: dict[str, Any], m: int) -> list[str]:
        if not m:
            return [d for d, _ in base(r)]
        seen: dict[str, int] = {}
        top, rest = [], []
        for d, _ in base(r):
            session = d.split(":")[0]
            (top if seen.get(session, 0) < m else rest).append(d)
            seen[session] = seen.get(session, 0) + 1
        return top + rest

    def diversity(r: dict[str, Any], d: float) -> list[str]:
        seen: dict[str, int] = {}
        scores = {}
        for did, s in base(r):
            session = did.split(":")[0]
            scores[did] = s * (1 - d) ** seen.get(session, 0)
            seen[session] = seen.get(session, 0) + 1
        return ordered(scores)

    def asking(r: dict[str, Any], v: tuple[float, float]) -> list[str]:
        p, length = v
        scores = {}
        for did, s in base(r):
            said = turns.said((r["conv"], did))
            scores[did] = s * (1 - p * _asking_share(said)) * (1 + length * min(1.0, len(said.split()) / 40))
        return ordered(scores)

    def both(r: dict[str, Any], on: bool) -> list[str]:
        ids = [d for d, _ in base(r)]
        named = turns.named(r["conv"], r["question"])
        if not on or len(named) < 2:
            return ids
        lists = [[d for d in ids if turns.turn[(r["conv"], d)].speaker == p] for p in named]
        out: list[str] = []
        for i in range(len(ids)):
            out.extend(lst[i] for lst in lists if i < len(lst))
        return out + [d for d in ids if d not in out]

    return {
        "reply": (
            [(0.0, 0.0)] + [(w, d) for w in (0.3, 0.5, 0.7, 1.0) for d in (0.0, 0.2, 0.3, 0.5)],
            reply,
        ),
        "cap": ([0, 1, 2, 3, 4, 5], cap),
        "diversity": ([0.0, 0.05, 0.1, 0.2, 0.3], diversity),
        "asking": (
            [(p, length) for p in (0.0, 0.1, 0.2, 0.3, 0.5) for length in (0.0, 0.1, 0.2, 0.3)],
            asking,
        ),
        "both": ([False, True], both),
    }


def report_ideas(records: dict[str, dict[str, Any]], data: Path) -> dict[str, Any]:
    """Each offline idea: off, in-sample best and left-out, per category."""
    turns = Turns(data)
    qids = [q for q in sorted(records) if records[q].get("candidates")]
    if not qids:
        raise SystemExit("no records with candidates: run benchmarks.locomo with --candidates 100")
    out: dict[str, Any] = {}

    def cats(values: dict[str, float]) -> dict[str, float]:
        res = {"all": _mean(values.values())}
        res.update({str(c): _mean(v for q, v in values.items() if records[q]["category"] == c) for c in CATS})
        return res

    for name, (grid, rank) in idea_grids(turns).items():
        recall = {
            v: {q: question_metrics(records[q]["evidence"], rank(records[q], v))["recall@10"] for q in qids}
            for v in grid
        }
        chosen = choose(qids, lambda q: records[q]["conv"], recall)
        on = max(grid[1:], key=lambda v: statistics.fmean(recall[v].values()))
        out[name] = {
            "off": cats(recall[grid[0]]),
            "best_on": {"value": on, **cats(recall[on])},
            "in_sample": {"chosen": chosen["in_sample"], **cats(recall[chosen["in_sample"]])},
            "left_out": cats(chosen["left"]),
            "per_fold": chosen["pick"],
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.locomo_recall", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--runs", nargs="*", default=[], metavar="LABEL=RECORDS", help="one run per value")
    parser.add_argument("--base", default=None, help="label of the run the left-out choice is tested against")
    parser.add_argument("--ideas", type=Path, default=None, help="records whose candidates the ideas re-rank")
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="the LoCoMo file the records came from"
    )
    parser.add_argument("--out", type=Path, default=None, help="write the report here as JSON")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {}
    if args.runs:
        runs = {}
        for spec in args.runs:
            label, _, path = spec.partition("=")
            runs[label] = load_records(Path(path))
        report["runs"] = report_runs(runs, args.base or next(iter(runs)))
    if args.ideas:
        report["ideas"] = report_ideas(load_records(args.ideas), args.data)
    text = json.dumps(report, indent=1, default=str)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
