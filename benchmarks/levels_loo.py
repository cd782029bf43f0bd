r"""Notes-vault levels from the score, the first result's lead and its margin, chosen leaving one vault out.

Run with ``python -m benchmarks.levels_loo RECORDS.jsonl`` on the records of ``python -m
benchmarks.levels`` (no pipeline run, seconds). The first result's lead is its relevance less the
best relevance of the next TOP_N - 1 results (negative when a later result is more relevant); its
margin is how far its fused score is ahead of the second result's, as a share of its own (0 when
the two tie: the ranking could as well have put the other first). The level is read from
`score + a * lead + b * margin` (explorer.search.quality LEAD_WEIGHT, MARGIN_WEIGHT), optionally
with high needing a lead >= 0 (`gate`); a query that is the first result's name is high, one that
nearly spells it (NEAR_NAME) at least medium, as the pipeline says. For each (a, b, gate), the thresholds are chosen as
benchmarks.levels does (benchmarks.levels.choose: the lowest high with at most 10 % of wrong first
results high in every training vault, the highest medium with at most 10 % of right ones low in
each); the choice is the one whose worst rate on the training vaults is lowest (ties: the smaller
weights), and it and its thresholds are scored on the left-out vault.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.levels import choose, rates
from explorer.search.quality import NEAR_NAME, TOP_N

WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)
MARGIN_WEIGHTS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)
GATES = (False, True)
#: (lead weight, margin weight, gate) choices.
GRID = tuple((w, m, g) for w in WEIGHTS for m in MARGIN_WEIGHTS for g in GATES)


def lead(r: dict[str, Any]) -> float:
    rel = r.get("relevances") or []
    return rel[0] - max(rel[1:TOP_N]) if len(rel) > 1 else (rel[0] if rel else 0.0)


def margin(r: dict[str, Any]) -> float:
    s = r.get("scores") or []
    return (s[0] - s[1]) / s[0] if len(s) > 1 and s[0] > 0 else (1.0 if s else 0.0)


def level_score(r: dict[str, Any], weight: float, mweight: float) -> float:
    return r["score"] + weight * lead(r) + mweight * margin(r)


def relabel(
    recs: Sequence[dict[str, Any]], weight: float, mweight: float, gate: bool, high: float, medium: float
) -> list[dict]:
    out = []
    for r in recs:
        s = level_score(r, weight, mweight)
        level = "high" if s >= high and (not gate or lead(r) > 0) else "medium" if s >= medium else "low"
        if named(r):
            level = "high"  # high whatever the score (explorer.search.quality.assess)
        elif level == "low" and (r.get("factors") or {}).get("first_likeness", 0.0) >= NEAR_NAME:
            level = "medium"  # a query that nearly spells the first result's name (the same)
        out.append({**r, "level": level})
    return out


def named(r: dict[str, Any]) -> bool:
    """True when the query is the first result's name: its level is high by that, not by a threshold."""
    return bool((r.get("factors") or {}).get("first_named"))


def fit(recs: Sequence[dict[str, Any]], weight: float, mweight: float, gate: bool) -> tuple[float, float]:
    shifted = [{**r, "score": level_score(r, weight, mweight)} for r in recs if not named(r)]
    if gate:  # a lead below 0 is never high: those first results do not bind the high threshold
        shifted_h = [r if lead(r) > 0 else {**r, "score": -1.0} for r in shifted]
        return choose(shifted_h)[0], choose(shifted)[1]
    return choose(shifted)


def worst(
    recs: Sequence[dict[str, Any]], weight: float, mweight: float, gate: bool, th: tuple[float, float]
) -> float:
    """The worst of the two rates over the vaults of `recs` (each vault counted alone)."""
    out = 0.0
    for v in dict.fromkeys(r["vault"] for r in recs):
        x = rates(relabel([r for r in recs if r["vault"] == v], weight, mweight, gate, *th))
        out = max(out, x["wrong_high"] or 0.0, x["right_low"] or 0.0)
    return out


def best_choice(recs: Sequence[dict[str, Any]]) -> tuple[float, float, bool]:
    return min(GRID, key=lambda c: (worst(recs, *c, fit(recs, *c)), c[0] + c[1], c[2]))


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
    for c in GRID:
        th = fit(recs, *c)
        report["grid"][" ".join(map(str, c))] = {
            "thresholds": th,
            **{v: rates(relabel([r for r in recs if r["vault"] == v], *c, *th)) for v in vaults},
        }
    for v in vaults:
        train = [r for r in recs if r["vault"] != v]
        test = [r for r in recs if r["vault"] == v]
        best = best_choice(train)
        th = fit(train, *best)
        report["left_out"][v] = {"chosen": [*best, *th], **rates(relabel(test, *best, *th))}
        print(v, "left out:", best, th, {k: report["left_out"][v][k] for k in ("wrong_high", "right_low")})
    pooled = [
        r
        for v in vaults
        for r in relabel([r for r in recs if r["vault"] == v], *report["left_out"][v]["chosen"])
    ]
    report["left_out_pooled"] = rates(pooled)
    print("left out, pooled:", {k: report["left_out_pooled"][k] for k in ("wrong_high", "right_low")})
    best = best_choice(recs)
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
