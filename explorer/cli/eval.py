"""`explorer eval`: replay the relevance marks of `.explorer/judgments.jsonl` as a personal benchmark."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from explorer.cli.render import print_json
from explorer.config import Settings
from explorer.text.safe import safe_text
from explorer.vault.judgments import Judgment, latest_marks, load_judgments, score_query

if TYPE_CHECKING:
    from explorer.index.backend import IndexBackend
    from explorer.search.core.pipeline import SearchPipeline

BASELINE = "eval-baseline.json"


def replay(
    pipeline: SearchPipeline, index: IndexBackend, judgments: list[Judgment], k: int = 10
) -> dict[str, Any]:
    """Run every marked query again and score it against its marks.

    Per query: nDCG@10 and MRR@10 over the notes marked relevant, the relevant notes that
    dropped out of the top k (`dropped`), those no longer in the index (`gone`), and notes marked
    not relevant that are in the top k (`unwanted`). Queries with no relevant mark are listed but
    not averaged.
    """
    queries: dict[str, Any] = {}
    for query, marks in sorted(latest_marks(judgments).items()):
        relevant = {p for p, j in marks.items() if j.mark == "relevant"}
        wrong = {p for p, j in marks.items() if j.mark == "not_relevant"}
        res = pipeline.search(query, k=k, record=False)
        ranked = [r.document_path for r in res.results if r.source == "search"][:k]
        scores = score_query(relevant, ranked, k)
        queries[query] = {
            **{m: round(v, 4) for m, v in scores.items()},
            "relevant": len(relevant),
            "dropped": sorted(p for p in relevant if p not in ranked and index.note(p) is not None),
            "gone": sorted(p for p in relevant if index.note(p) is None),
            "unwanted": sorted(p for p in wrong if p in ranked),
            "marked_generation": max(j.generation for j in marks.values()),
        }
    scored = [q for q in queries.values() if q["relevant"]]
    means = {
        m: round(sum(q[m] for q in scored) / len(scored), 4) if scored else 0.0 for m in ("ndcg@10", "mrr@10")
    }
    return {"queries": queries, "scored_queries": len(scored), **means, "index_version": index.version}


def cmd_eval(args: argparse.Namespace, vault: Path, settings: Settings) -> int:
    """Replay the marks; compare with the stored baseline; exit 1 on a regression beyond the threshold.

    The first run (or `--update-baseline`) stores its scores in `.explorer/eval-baseline.json`.
    Later runs compare mean nDCG@10 and MRR@10 with it: a drop larger than `--threshold` is a
    regression (exit 1). No marks: exit 0 with a note on how to make some.
    """
    from explorer.engine import make_pipeline, open_index

    index, _ = open_index(vault, settings)
    try:
        judgments, bad = load_judgments(index.cache_dir)
        if not judgments:
            print(
                "explorer: no relevance marks yet: mark results in the app (F8 relevant, F9 not relevant)",
                file=sys.stderr,
            )
            return 0
        report = replay(make_pipeline(index, settings), index, judgments)
        baseline_path = Path(index.cache_dir) / BASELINE
    finally:
        index.close()
    report["marks"] = len(judgments)
    report["malformed_lines"] = bad
    baseline = _load_baseline(baseline_path)
    regressions: list[str] = []
    if baseline is not None and not args.update_baseline:
        for metric in ("ndcg@10", "mrr@10"):
            drop = float(baseline.get(metric, 0.0)) - report[metric]
            if drop > args.threshold:
                regressions.append(
                    f"{metric} fell {drop:.3f} (from {baseline[metric]:.3f} to {report[metric]:.3f})"
                )
        report["baseline"] = {m: baseline.get(m) for m in ("ndcg@10", "mrr@10", "index_version")}
    report["regressions"] = regressions
    if baseline is None or args.update_baseline:
        baseline_path.write_text(
            json.dumps({m: report[m] for m in ("ndcg@10", "mrr@10", "index_version")}) + "\n",
            encoding="utf-8",
        )
        report["baseline_written"] = True
    if args.json:
        print_json(report)
    else:
        print(
            f"{report['scored_queries']} marked queries ({report['marks']} marks): nDCG@10 {report['ndcg@10']:.3f}, "
            f"MRR@10 {report['mrr@10']:.3f}"
        )
        for query, q in report["queries"].items():
            notes = (
                "".join(f"\n    dropped: {safe_text(p)}" for p in q["dropped"])
                + "".join(f"\n    gone from the vault: {safe_text(p)}" for p in q["gone"])
                + "".join(f"\n    marked not relevant but shown: {safe_text(p)}" for p in q["unwanted"])
            )
            print(f"  {q['ndcg@10']:.3f}  {safe_text(query)}{notes}")
        if bad:
            print(f"  {bad} malformed line(s) in judgments.jsonl skipped")
        if report.get("baseline_written"):
            print("  baseline stored")
        for r in regressions:
            print(f"REGRESSION: {r}")
    return 1 if regressions else 0


def _load_baseline(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("ndcg@10"), (int, float)) else None
