r"""Notes-vault levels from the score and the first result's lead, chosen leaving one vault out.

Run with ``python -m benchmarks.levels_loo RECORDS.jsonl`` on the records of ``python -m
benchmarks.levels`` (no pipeline run, seconds). The first result's lead is its relevance less the
best relevance of the next TOP_N - 1 results (negative when a later result is more relevant); the
level is read from `score + a * lead` (explorer.search.quality LEAD_WEIGHT), optionally with high
needing a lead >= 0 (`lead_gate`). For each weight (and gate), the thresholds are chosen as
benchmarks.levels does (benchmarks.levels.choose: the lowest high with at most 10 % of wrong first
results high, the highest medium with at most 10 % of right ones low); the weight is the one whose
worse rate on the other vault is lowest, and it and its thresholds are scored on the left-out vault.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.levels import choose, rates
from explorer.search.quality import TOP_N

WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)
GATES = (False, True)


def lead(r: dict[str, Any]) -> float:
    rel = r.get("relevances") or []
    return rel[0] - max(rel[1:TOP_N]) if len(rel) > 1 else (rel[0] if rel else 0.0)


def relabel(
    recs: Sequence[dict[str, Any]], weight: float, gate: bool, high: float, medium: float
) -> list[dict]:
    out = []
    for r in recs:
        s = r["score"] + weight * lead(r)
        level = "high" if s >= high and (not gate or lead(r) > 0) else "medium" if s >= medium else "low"
        out.append({**r, "level": level})
    return out


def fit(recs: Sequence[dict[str, Any]], weight: float, gate: bool) -> tuple[float, float]:
    shifted = [{**r, "score": r["score"] + weight * lead(r)} for r in recs]
    if gate:  # a lead below 0 is never high: those first results do not bind the high threshold
        shifted_h = [r if lead(r) > 0 else {**r, "score": -1.0} for r in shifted]
        return choose(shifted_h)[0], choose(shifted)[1]
    return choose(shifted)


def worst(recs: Sequence[dict[str, Any]], weight: float, gate: bool, th: tuple[float, float]) -> float:
    x = rates(relabel(recs, weight, gate, *th))
    return max(x["wrong_high"] or 0.0, x["right_low"] or 0.0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.levels_loo", description=__doc__.splitlines()[0]
    )
    parser.add_argument("records", type=Path, help="levels jsonl (with relevances)")
    parser.add_argument("--out", type=Path, default=None, help="write the report here as JSON")
    args = parser.parse_args(argv)
    recs = [json.loads(x) for x in args.records.read_text(encoding="utf-8").splitlines() if x.strip()]
    recs = [r for r in recs if "relevances" in r]
    vaults = list(dict.fromkeys(r["vault"] for r in recs))
    report: dict[str, Any] = {"grid": {}, "left_out": {}, "in_sample": {}}
    for w in WEIGHTS:
        for gate in GATES:
            th = fit(recs, w, gate)
            report["grid"][f"{w} {gate}"] = {
                "thresholds": th,
                **{v: rates(relabel([r for r in recs if r["vault"] == v], w, gate, *th)) for v in vaults},
            }
    for v in vaults:
        train = [r for r in recs if r["vault"] != v]
        test = [r for r in recs if r["vault"] == v]
        best = min(
            ((w, g) for w in WEIGHTS for g in GATES), key=lambda c: (worst(train, *c, fit(train, *c)), c[0])
        )
        th = fit(train, *best)
        report["left_out"][v] = {"chosen": [*best, *th], **rates(relabel(test, *best, *th))}
        print(v, "left out:", best, th, {k: report["left_out"][v][k] for k in ("wrong_high", "right_low")})
    best = min(((w, g) for w in WEIGHTS for g in GATES), key=lambda c: (worst(recs, *c, fit(recs, *c)), c[0]))
    th = fit(recs, *best)
    report["in_sample"] = {
        "chosen": [*best, *th],
        **{v: rates(relabel([r for r in recs if r["vault"] == v], *best, *th)) for v in vaults},
    }
    print("in sample:", best, th)
    for v in vaults:
        print(
            " ",
            v,
            {k: report["in_sample"][v][k] for k in ("wrong_high", "right_low", "high_right", "low_right")},
        )
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
