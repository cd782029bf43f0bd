r"""Values chosen on LoCoMo leaving one conversation out: the date lift and the "no good match" thresholds.

Run with ``python -m benchmarks.locomo_loo RECORDS.jsonl [--flag-records RECORDS.jsonl]`` on the
per-question records of ``python -m benchmarks.locomo --rows explorer --candidates 100`` (no
pipeline run: numpy-free, seconds). Two choices, each made on four conversations and scored on the
fifth, the five left-out parts pooled, beside the value chosen on all five (in-sample):

1. The date lift (explorer.search.memory.signals.lift_by_date): on records of a run *without* it
   (``--set experimental.date_weight=0``), each question's first 100 results are re-scored as the pipeline
   would: score + weight * best score * closeness(turn's session day, the query's dates,
   after_days); the grid of (weight, after_days) with the best mean recall@10 (categories 1-4)
   on the four is applied to the fifth.
2. The "no good match" flag (explorer.search.quality) of a question that names someone:
   `named_coverage - OTHER_WEIGHT * other_coverage < LEAD_FLAG or matched < WEAK` (recorded parts
   of each question's quality); a question naming nobody is flagged when its level is low
   (`matched` < TURN_MEDIUM). The gate: at most 20 % of answerable questions whose evidence is in the top 5 flagged, and as many adversarial ones
   as possible. On the four, the triple with the most adversarial flagged among those that keep the
   answerable share <= 20 % is chosen and scored on the fifth.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.locomo import DEFAULT_DATA, load_conversations, question_metrics
from explorer.search.quality import TURN_MEDIUM

DATE_WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5, 1.0)
DATE_AFTER_DAYS = (0, 7, 14, 30, 60)
OTHER_WEIGHT_GRID = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
LEAD_GRID = tuple(round(-0.2 + 0.02 * i, 2) for i in range(36))  # -0.20 .. 0.50
WEAK_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.45)
#: Gate: share of answerable questions (evidence in the top 5) the flag may say "no good match" for.
ANSWERABLE_FLAG_MAX = 0.20


def _load(path: Path) -> list[dict[str, Any]]:
    recs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    out = [r for r in recs if r.get("row") == "explorer"]
    for r in out:
        r["conv"] = r["qid"].split("#")[0]
    return out


def _mean(xs: Any) -> float:
    xs = list(xs)
    return round(statistics.fmean(xs), 4) if xs else float("nan")


def loo(
    groups: Sequence[str],
    candidates: Sequence[Any],
    score: Callable[[Any, str | None, bool], dict[str, float]],
    better: Callable[[dict[str, float]], Any],
) -> tuple[dict[str, Any], Any]:
    """For each left-out group: the candidate best on the others, its figures there. Returns (per group, in-sample best)."""
    out = {}
    for g in groups:
        best = max(candidates, key=lambda c: better(score(c, g, False)))
        out[g] = {"chosen": best, "left_out": score(best, g, True)}
    return out, max(candidates, key=lambda c: better(score(c, None, False)))


def date_choice(records: list[dict[str, Any]], data: Path) -> dict[str, Any]:
    from explorer.search.memory.when import closeness, mentions

    days = {
        (c.sample_id, t.dia_id): (t.when.date() if t.when else None)
        for c in load_conversations(data)
        for t in c.turns
    }
    scored = [r for r in records if r["category"] in (1, 2, 3, 4) and r["evidence"] and r.get("candidates")]
    if not scored:
        raise SystemExit("no records with candidates: run benchmarks.locomo with --candidates 100")
    spans = {r["qid"]: mentions(r["question"]) for r in scored}
    memo: dict[tuple[str, Any], float] = {}

    def recall(r: dict[str, Any], cand: tuple[float, float]) -> float:
        key = (r["qid"], cand)
        if key not in memo:
            w, lag = cand
            top = r["candidates"][0][1] or 1.0
            rescored = []
            for d, s, _rel in r["candidates"]:
                day = days.get((r["conv"], d))
                fit = (
                    closeness(day, spans[r["qid"]], lag) if w and day is not None and spans[r["qid"]] else 0.0
                )
                rescored.append((-(s + w * top * fit), d))
            memo[key] = question_metrics(r["evidence"], [d for _, d in sorted(rescored, key=lambda x: x[0])])[
                "recall@10"
            ]
        return memo[key]

    def score(cand: tuple[float, float], group: str | None, held_out: bool) -> dict[str, float]:
        rs = [r for r in scored if (r["conv"] == group) == held_out] if group else scored
        return {"recall@10": _mean(recall(r, cand) for r in rs), "n": len(rs)}

    grid = [(w, float(lag)) for w in DATE_WEIGHTS for lag in DATE_AFTER_DAYS]
    groups = sorted({r["conv"] for r in scored})
    per, insample = loo(groups, grid, score, lambda m: (m["recall@10"],))
    by_q = {r["qid"]: recall(r, per[r["conv"]]["chosen"]) for r in scored}
    cats = {c: _mean(by_q[r["qid"]] for r in scored if r["category"] == c) for c in (1, 2, 3, 4)}
    ins = {c: _mean(recall(r, insample) for r in scored if r["category"] == c) for c in (1, 2, 3, 4)}
    base = {c: _mean(recall(r, (0.0, 0.0)) for r in scored if r["category"] == c) for c in (1, 2, 3, 4)}
    return {
        "grid": "weight x after_days",
        "per_fold": {g: {"chosen": list(v["chosen"]), **v["left_out"]} for g, v in per.items()},
        "left_out": {"recall@10": _mean(by_q.values()), "categories": cats},
        "in_sample": {
            "chosen": list(insample),
            "recall@10": score(insample, None, False)["recall@10"],
            "categories": ins,
        },
        "without": {"recall@10": score((0.0, 0.0), None, False)["recall@10"], "categories": base},
        "with_dates_in_query": sum(1 for r in scored if spans[r["qid"]]),
    }


def flag_choice(records: list[dict[str, Any]]) -> dict[str, Any]:
    def parts(r: dict[str, Any], key: str) -> float:
        return r.get("quality_parts", {}).get(key, 0.0 if key == "other_coverage" else 1.0)

    ans = [r for r in records if r["category"] in (1, 2, 3, 4) and r["evidence"] and r["hit@5"] == 1]
    every = [r for r in records if r["category"] in (1, 2, 3, 4)]
    adv = [r for r in records if r["category"] == 5]

    def flagged(r: dict[str, Any], cand: tuple[float, float, float]) -> bool:
        weight, lead, weak = cand
        if not r.get("named", True):  # nobody named: weak results (level low) are the flag, as in every vault
            return parts(r, "matched") < TURN_MEDIUM
        return (
            parts(r, "named_coverage") - weight * parts(r, "other_coverage") < lead
            or parts(r, "matched") < weak
        )

    def score(cand: tuple[float, float, float], group: str | None, held_out: bool) -> dict[str, float]:
        sel = (lambda rs: [r for r in rs if (r["conv"] == group) == held_out]) if group else (lambda rs: rs)
        return {
            "answerable_top5": _mean(flagged(r, cand) for r in sel(ans)),
            "adversarial": _mean(flagged(r, cand) for r in sel(adv)),
            "answerable": _mean(flagged(r, cand) for r in sel(every)),
        }

    def better(m: dict[str, float]) -> tuple:
        ok = m["answerable_top5"] <= ANSWERABLE_FLAG_MAX
        return (ok, m["adversarial"] if ok else -m["answerable_top5"], -m["answerable_top5"])

    grid = [(o, e, w) for o in OTHER_WEIGHT_GRID for e in LEAD_GRID for w in WEAK_GRID]
    groups = sorted({r["conv"] for r in records})
    per, insample = loo(groups, grid, score, better)
    pooled_a = [flagged(r, per[r["conv"]]["chosen"]) for r in ans]
    pooled_d = [flagged(r, per[r["conv"]]["chosen"]) for r in adv]
    pooled_e = [flagged(r, per[r["conv"]]["chosen"]) for r in every]
    return {
        "rule": "named_coverage - OTHER_WEIGHT * other_coverage < LEAD_FLAG or matched < WEAK",
        "per_fold": {g: {"chosen": list(v["chosen"]), **v["left_out"]} for g, v in per.items()},
        "left_out": {
            "answerable_top5": _mean(pooled_a),
            "adversarial": _mean(pooled_d),
            "answerable": _mean(pooled_e),
        },
        "in_sample": {"chosen": list(insample), **score(insample, None, False)},
        "n": {"answerable_top5": len(ans), "adversarial": len(adv), "answerable": len(every)},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.locomo_loo", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "records", type=Path, help="locomo jsonl of a run without the date lift, with --candidates"
    )
    parser.add_argument(
        "--flag-records",
        type=Path,
        default=None,
        help="locomo jsonl whose quality parts choose the flag (default: RECORDS)",
    )
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="the LoCoMo file the records came from"
    )
    parser.add_argument("--out", type=Path, default=None, help="write the report here as JSON")
    args = parser.parse_args(argv)
    report = {
        "date": date_choice(_load(args.records), args.data),
        "flag": flag_choice(_load(args.flag_records or args.records)),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
