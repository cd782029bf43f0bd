r"""The development collection of real vaults, one left out: ranking per kind, levels and sections.

Run with ``nice -n 10 python -m benchmarks.vaults_loo --vaults DIR [--embeddings]`` on the vaults
``python -m benchmarks.vaults --vaults DIR`` lays out. Every query of benchmarks.vault_queries
(anchor, section, typo, alias) runs through the default pipeline (k=10; lexical only unless
``--embeddings``) and through plain BM25 over each note's name and body (rank_bm25.BM25Okapi,
explorer.text.tokenize, one document per note). Reported per vault and kind: MRR@10 and hit@1 of
both (the first expected note's rank).

Levels (explorer.search.quality): the level score is ``score + LEAD_WEIGHT * lead`` and a query
that is the first result's name is high whatever it is. Thresholds are chosen toward "high =>
the first result is right in >= 80 % of cases, low => in <= 30 %": ``medium`` the highest value
(0.01 grid) at which the queries said low are right <= TARGET_LOW of the time over the vaults
chosen on, then ``high`` the lowest value not below it at which those said high are right >=
TARGET_HIGH of the time. For each vault they are chosen on the other vaults (left out) and on all of them (in
sample); the report gives, per vault, how often a high first result is right and a low one is,
at the current values, in sample and left out. Records go to ``OUT/vaults_loo.jsonl``, the
summary to ``OUT/vaults_loo.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import DEFAULT_OUT, log, markdown_table, offline_environment, write_json
from benchmarks.levels_loo import lead
from benchmarks.vault_queries import KINDS, queries_for
from explorer.search.quality import HIGH, LEAD_WEIGHT, MEDIUM

TARGET_HIGH = 0.80
TARGET_LOW = 0.30
GRID = [i / 100 for i in range(-20, 121)]


def run_vault(vault: Path, cache: Path, embeddings: bool) -> list[dict[str, Any]]:
    from rank_bm25 import BM25Okapi  # type: ignore[import-untyped]

    from benchmarks.quality import open_vault_index
    from explorer.engine import make_pipeline
    from explorer.text.tokenize import tokenize

    queries = queries_for(vault)
    index, settings, _info = open_vault_index(vault, {"index.cache_dir": str(cache)}, embeddings=embeddings)
    pipeline = make_pipeline(index, settings)
    paths = sorted(p.relative_to(vault).as_posix() for p in vault.rglob("*.md"))
    paths = [p for p in paths if not any(x.startswith(".") for x in p.split("/"))]
    docs = []
    for p in paths:
        name = p.rsplit("/", 1)[-1][:-3]
        docs.append(tokenize(name + "\n" + (vault / p).read_text(encoding="utf-8", errors="replace")) or [""])
    bm25 = BM25Okapi(docs)
    out = []
    for q in queries:
        res = pipeline.search(q["query"], k=10, record=False)
        quality = res.quality
        assert quality is not None
        searched = [r for r in res.results if r.source == "search"]
        ranked = list(dict.fromkeys(r.document_path for r in searched))[:10]
        scores = bm25.get_scores(tokenize(q["query"]))
        order = sorted((i for i in range(len(paths)) if scores[i] > 0), key=lambda i: (-scores[i], paths[i]))
        base = [paths[i] for i in order[:10]]
        out.append(
            {
                "vault": vault.name,
                **q,
                "rank": next((i + 1 for i, p in enumerate(ranked) if p in q["expected"]), None),
                "bm25_rank": next((i + 1 for i, p in enumerate(base) if p in q["expected"]), None),
                "right": bool(ranked) and ranked[0] in q["expected"],
                "score": quality.score,
                "level": quality.level,
                "factors": {k: v for k, v in quality.factors.items() if isinstance(v, (int, float, bool))},
                "relevances": [r.relevance for r in searched][:10],
            }
        )
    index.close()
    return out


def level_score(r: dict[str, Any]) -> float:
    return float(r["score"]) + LEAD_WEIGHT * lead(r)


def named(r: dict[str, Any]) -> bool:
    return bool((r.get("factors") or {}).get("first_named"))


def level(r: dict[str, Any], high: float, medium: float) -> str:
    s = level_score(r)
    return "high" if named(r) or s >= high else "medium" if s >= medium else "low"


def choose(recs: Sequence[dict[str, Any]]) -> tuple[float, float]:
    """(high, medium) toward low => right <= TARGET_LOW, high => right >= TARGET_HIGH, over `recs` pooled.

    `medium` first: the highest value at which the queries said low are right at most TARGET_LOW
    of the time; then `high`: the lowest value not below it at which those said high are right at
    least TARGET_HIGH of the time (when most first results are right, that is `medium` itself).
    """
    medium = GRID[0]
    for t in GRID:
        low = [r["right"] for r in recs if not named(r) and level_score(r) < t]
        if not low or sum(low) / len(low) <= TARGET_LOW:
            medium = t
    high = GRID[-1]
    for t in GRID:
        said = [r["right"] for r in recs if named(r) or level_score(r) >= t]
        if t >= medium and said and sum(said) / len(said) >= TARGET_HIGH:
            high = t
            break
    return high, medium


def calib(recs: Sequence[dict[str, Any]], high: float, medium: float) -> dict[str, Any]:
    lv = [level(r, high, medium) for r in recs]
    hi = [r["right"] for r, x in zip(recs, lv, strict=True) if x == "high"]
    lo = [r["right"] for r, x in zip(recs, lv, strict=True) if x == "low"]
    n = len(recs)
    return {
        "n": n,
        "high_share": round(len(hi) / n, 4) if n else None,
        "high_right": round(sum(hi) / len(hi), 4) if hi else None,
        "low_share": round(len(lo) / n, 4) if n else None,
        "low_right": round(sum(lo) / len(lo), 4) if lo else None,
    }


def ranking(recs: Sequence[dict[str, Any]], key: str) -> dict[str, float]:
    n = len(recs)
    return {
        "n": n,
        "mrr10": round(sum(1 / r[key] for r in recs if r[key]) / n, 4) if n else 0.0,
        "hit1": round(sum(r[key] == 1 for r in recs) / n, 4) if n else 0.0,
    }


def _p(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f} %"


def report(recs: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    vaults = list(dict.fromkeys(r["vault"] for r in recs))
    summary: dict[str, Any] = {"ranking": {}, "levels": {}}
    rows = []
    for v in vaults:
        for kind in (*KINDS, "all"):
            sub = [r for r in recs if r["vault"] == v and (kind == "all" or r["kind"] == kind)]
            if not sub:
                continue
            a, b = ranking(sub, "rank"), ranking(sub, "bm25_rank")
            summary["ranking"][f"{v}/{kind}"] = {"pipeline": a, "bm25": b}
            rows.append(
                [v, kind, a["n"], f"{a['mrr10']:.3f}", _p(a["hit1"]), f"{b['mrr10']:.3f}", _p(b["hit1"])]
            )
    text = "### Ranking per vault and kind (pipeline beside plain BM25 over name + body)\n\n"
    text += markdown_table(["vault", "kind", "n", "MRR@10", "hit@1", "BM25 MRR@10", "BM25 hit@1"], rows)
    in_sample = choose(recs)
    summary["levels"]["in_sample_thresholds"] = in_sample
    rows = []
    left: list[dict[str, Any]] = []
    for v in vaults:
        test = [r for r in recs if r["vault"] == v]
        th = choose([r for r in recs if r["vault"] != v])
        cur, ins, out = calib(test, HIGH, MEDIUM), calib(test, *in_sample), calib(test, *th)
        left.extend({**r, "_th": th} for r in test)
        summary["levels"][v] = {"left_out_thresholds": th, "current": cur, "in_sample": ins, "left_out": out}
        rows.append(
            [
                v,
                cur["n"],
                f"{_p(cur['high_right'])} / {_p(cur['low_right'])}",
                f"{_p(ins['high_right'])} / {_p(ins['low_right'])}",
                f"{th[0]:.2f} / {th[1]:.2f}",
                f"{_p(out['high_right'])} / {_p(out['low_right'])}",
                f"{_p(out['high_share'])} / {_p(out['low_share'])}",
            ]
        )
    pooled = {
        "current": calib(recs, HIGH, MEDIUM),
        "in_sample": calib(recs, *in_sample),
    }
    lv = [level(r, *r["_th"]) for r in left]
    hi = [r["right"] for r, x in zip(left, lv, strict=True) if x == "high"]
    lo = [r["right"] for r, x in zip(left, lv, strict=True) if x == "low"]
    pooled["left_out"] = {
        "high_right": round(sum(hi) / len(hi), 4) if hi else None,
        "low_right": round(sum(lo) / len(lo), 4) if lo else None,
    }
    summary["levels"]["pooled"] = pooled
    text += (
        f"\n\n### Levels: top-1 right when high / when low (current HIGH {HIGH} / MEDIUM {MEDIUM};"
        f" in sample {in_sample[0]:.2f} / {in_sample[1]:.2f})\n\n"
    )
    text += markdown_table(
        [
            "vault",
            "n",
            "current",
            "in sample",
            "left-out high / medium",
            "left out",
            "left out: share high / low",
        ],
        rows,
    )
    text += (
        f"\n\nPooled: current {_p(pooled['current']['high_right'])} / {_p(pooled['current']['low_right'])},"
        f" in sample {_p(pooled['in_sample']['high_right'])} / {_p(pooled['in_sample']['low_right'])},"
        f" left out {_p(pooled['left_out']['high_right'])} / {_p(pooled['left_out']['low_right'])}\n"
    )
    return summary, text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.vaults_loo", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--vaults", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--embeddings", action="store_true", help="run the model too (slow)")
    parser.add_argument("--records", type=Path, default=None, help="report from these records, no run")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    jsonl = args.out / "vaults_loo.jsonl"
    if args.records:
        recs = [json.loads(x) for x in args.records.read_text(encoding="utf-8").splitlines() if x.strip()]
    else:
        offline_environment()
        recs = []
        jsonl.write_text("", encoding="utf-8")
        for vault in sorted(p for p in args.vaults.iterdir() if p.is_dir()):
            t = time.perf_counter()
            got = run_vault(vault, args.out / "cache" / vault.name, args.embeddings)
            log(f"{vault.name}: {len(got)} queries in {time.perf_counter() - t:.0f} s")
            with jsonl.open("a", encoding="utf-8") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in got)
            recs.extend(got)
    summary, text = report(recs)
    summary["embeddings"] = args.embeddings
    write_json(args.out / "vaults_loo.json", summary)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
