r"""Ranking identity between two source trees: the same queries, the same vaults, top-10 compared per query.

Run with ``nice -n 10 python -m benchmarks.rank_identity --baseline TREE``. TREE is another
checkout of Explorer (``git worktree add --detach /tmp/base <commit>``). For each suite below
the vaults are written once (from this tree's benchmark code: data, not behaviour), indexed
once with this tree so their vectors are in the vault's ``.explorer/`` (``--seed-scifact`` and
``--seed-locomo`` name the vaults of ``benchmarks.quality`` / ``benchmarks.locomo`` whose index
folders are copied first, so little or nothing is embedded again), then copied
for each tree, so neither tree writes into the other's index and both read the same vectors.
Each tree runs every query in a subprocess of its own, with ``PYTHONPATH=TREE`` and only
``explorer`` imports (none of ``benchmarks``), through ``explorer.engine.open_index`` and
``make_pipeline`` with the default settings, except that the reranker's time budgets are off
(``0``: no limit), since a pass cut by the clock would differ between runs of one tree.

Suites:
    scifact     the BEIR SciFact test queries (300) over its corpus as one note per document
    locomo      every question of the LoCoMo dev split, one vault per conversation
    known_item  the names, aliases and one-typo names of benchmarks.known_item (sample vault
                and the generated Obsidian vault, seed 7)

Compared per query: the node_ids of the first 10 results in order, and their scores at a
relative tolerance of 1e-6 (absolute 1e-9 near zero). Every difference is listed in
``OUT/rank_identity.json`` (query, position, both sides) and counted in the printed table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REL_TOL = 1e-6
ABS_TOL = 1e-9
TOP = 10
SUITES = ("scifact", "locomo", "known_item")

# -- the child: one tree, every query ----------------------------------------------------------
#: Reranker budgets off, as each tree spells the settings (the first set its settings accept).
NO_BUDGETS: tuple[dict[str, Any], ...] = (
    {"experimental.rerank_pass1_timeout_ms": 0, "experimental.rerank_pass2_timeout_ms": 0},
    {"rerank.pass1_timeout_ms": 0, "rerank.pass2_timeout_ms": 0},
)


def child(spec_path: Path) -> int:
    """Run the spec's queries on its vaults with the `explorer` on PYTHONPATH; JSON lines to its `out`."""
    import datetime as dt

    import explorer
    from explorer.config import load_settings
    from explorer.engine import make_pipeline, open_index

    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    out = Path(spec["out"])
    with out.open("w", encoding="utf-8") as fh:
        fh.write(json.dumps({"explorer": explorer.__file__}) + "\n")
        for job in spec["vaults"]:
            vault = Path(job["vault"])
            settings, used = None, None
            for flags in NO_BUDGETS:
                try:
                    settings, used = load_settings(vault, dict(flags)), flags
                    break
                except Exception:  # noqa: BLE001 - the other tree's spelling
                    continue
            if settings is None:
                settings, used = load_settings(vault), {}
            index, _report = open_index(vault, settings)
            embedded = index.embed_pending()
            pipeline = make_pipeline(index, settings)
            if hasattr(pipeline, "today"):
                pipeline.today = lambda: dt.date.fromisoformat(spec["today"])
            fh.write(json.dumps({"vault": str(vault), "settings": used, "embedded_now": embedded}) + "\n")
            for q in job["queries"]:
                t = time.perf_counter()
                try:
                    res = pipeline.search(q["query"], k=TOP, record=False)
                    top = [[r.node_id, float(r.score), r.document_path] for r in res.results[:TOP]]
                    error = None
                except Exception as exc:  # noqa: BLE001 - recorded and compared like a result
                    top, error = [], f"{type(exc).__name__}: {exc}"
                ms = (time.perf_counter() - t) * 1000
                fh.write(json.dumps({"id": q["id"], "top": top, "error": error, "ms": round(ms, 2)}) + "\n")
            index.close()
    return 0


# -- the parent: suites, copies, comparison ----------------------------------------------------
def _copy(src: Path, dst: Path) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True)  # copy2: the files' times stay, so do dates read from them


def _seed(folder: Path, into: Path) -> None:
    """Copy an index folder (`.explorer/`) that may be in use: its SQLite files through SQLite's
    backup (a consistent copy), the rest as files."""
    import sqlite3

    into.mkdir(parents=True)
    for f in folder.iterdir():
        if f.name.endswith((".sqlite-wal", ".sqlite-shm", "-journal")) or not f.is_file():
            continue
        if f.suffix == ".sqlite":
            src = sqlite3.connect(f"file:{f}?mode=ro", uri=True)
            dst = sqlite3.connect(into / f.name)
            try:
                src.backup(dst)
            finally:
                src.close()
                dst.close()
        else:
            shutil.copy2(f, into / f.name)


def _prime(vault: Path, seed: Path | None) -> None:
    """Index the source vault with this tree (its vectors cached in its .explorer/); `seed`: a vault
    folder of the same content whose index to start from, so that little or nothing is embedded."""
    from benchmarks.quality import open_vault_index

    if seed is not None and (seed / ".explorer").is_dir() and not (vault / ".explorer").exists():
        _seed(seed / ".explorer", vault / ".explorer")
    index, _settings, info = open_vault_index(vault, {}, embeddings=True)
    index.close()
    print(
        f"  primed {vault.name}: {info['notes']} notes, {info['embedded_now']} shards embedded now",
        file=sys.stderr,
    )


def suite_scifact(work: Path, data: Path, limit: int | None, seed: Path | None) -> list[dict[str, Any]]:
    from benchmarks.quality import load_beir, write_vault

    beir = load_beir(data, limit_queries=limit)
    vault = work / "scifact-vault"
    write_vault(beir, vault)
    _prime(vault, seed)
    queries = [{"id": qid, "query": text} for qid, text in beir.queries.items()]
    return [{"name": "scifact", "vault": vault, "queries": queries}]


def suite_locomo(work: Path, data: Path, limit: int | None, seed: Path | None) -> list[dict[str, Any]]:
    from benchmarks.locomo import _folder_name, load_conversations, write_vault

    jobs = []
    for conv in load_conversations(data):
        name = _folder_name(conv.sample_id)  # as benchmarks.locomo names it, so its work folder can seed
        vault = work / "locomo" / name
        write_vault(conv, vault)
        _prime(vault, seed / name if seed is not None else None)
        queries = [
            {"id": f"{conv.sample_id}/{q.qid}", "query": q.text} for q in conv.questions if q.text.strip()
        ]
        jobs.append({"name": f"locomo {conv.sample_id}", "vault": vault, "queries": queries[:limit]})
    return jobs


def suite_known_item(work: Path, limit: int | None) -> list[dict[str, Any]]:
    from benchmarks import obsidian_vault
    from benchmarks.known_item import queries_for

    sample = work / "known-sample_vault"
    if not sample.exists():
        shutil.copytree(
            Path(__file__).resolve().parent.parent / "sample_vault",
            sample,
            ignore=shutil.ignore_patterns(".explorer"),
        )
    generated = work / "known-obsidian-vault-7"
    if not generated.exists():
        obsidian_vault.write(generated, 7)
    jobs = []
    for vault in (sample, generated):
        queries = [{"id": f"{q['kind']}:{q['query']}", "query": q["query"]} for q in queries_for(vault)]
        _prime(vault, None)
        jobs.append({"name": f"known_item {vault.name}", "vault": vault, "queries": queries[:limit]})
    return jobs


def run_tree(tree: Path, label: str, jobs: list[dict[str, Any]], work: Path, today: str) -> dict[str, Any]:
    """Copy each job's vault for `tree` and run its queries there in a subprocess; id -> record."""
    vaults = []
    for job in jobs:
        copy = work / label / job["vault"].name
        _copy(job["vault"], copy)
        vaults.append({"vault": str(copy), "queries": job["queries"]})
    spec = work / f"{label}-spec.json"
    out = work / f"{label}-out.jsonl"
    spec.write_text(json.dumps({"vaults": vaults, "out": str(out), "today": today}), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t = time.perf_counter()
    # -P: the script's own folder is not put on sys.path, so only the tree's packages are imported.
    proc = subprocess.run(
        [sys.executable, "-P", str(Path(__file__).resolve()), "--child", str(spec)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{label} ({tree}) failed:\n{proc.stderr[-4000:]}")
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines() if line.strip()]
    found = lines[0]["explorer"]
    if not Path(found).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"{label}: imported {found}, not the tree {tree}")
    records = {r["id"]: r for r in lines if "id" in r}
    headers = [r for r in lines if "vault" in r]
    return {"records": records, "vaults": headers, "seconds": round(time.perf_counter() - t, 1)}


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def compare(base: dict[str, Any], this: dict[str, Any]) -> dict[str, Any] | None:
    """The differences of one query's top 10 (None: identical)."""
    if base["error"] != this["error"]:
        return {"error": {"baseline": base["error"], "this": this["error"]}}
    b, t = base["top"], this["top"]
    ids_b, ids_t = [x[0] for x in b], [x[0] for x in t]
    scores = [
        {"rank": i + 1, "node_id": x[0], "baseline": x[1], "this": y[1]}
        for i, (x, y) in enumerate(zip(b, t))
        if x[0] == y[0] and not _close(x[1], y[1])
    ]
    if ids_b == ids_t and not scores:
        return None
    out: dict[str, Any] = {}
    if ids_b != ids_t:
        first = next((i for i, (x, y) in enumerate(zip(ids_b, ids_t)) if x != y), min(len(ids_b), len(ids_t)))
        out["first_rank"] = first + 1
        out["baseline"] = b
        out["this"] = t
        out["same_set"] = set(ids_b) == set(ids_t)
    if scores:
        out["scores"] = scores
    return out


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.common import DEFAULT_OUT, REPO, machine, markdown_table, offline_environment, write_json

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.rank_identity", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--baseline", type=Path, required=True, help="the other source tree")
    parser.add_argument("--suites", default=",".join(SUITES), help=f"comma-separated, of {', '.join(SUITES)}")
    parser.add_argument("--limit", type=int, default=None, help="queries per vault (default: all)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default bench-out/)")
    parser.add_argument(
        "--work-dir", type=Path, default=None, help="vaults and copies (default OUT/rank-identity)"
    )
    parser.add_argument("--scifact", type=Path, default=REPO.parent.parent / "shared" / "bench" / "scifact")
    parser.add_argument(
        "--locomo",
        type=Path,
        default=REPO.parent.parent / "shared" / "bench" / "locomo" / "locomo10-dev.json",
    )
    parser.add_argument(
        "--seed-scifact",
        type=Path,
        default=None,
        help="a SciFact vault (benchmarks.quality's) whose index to start from",
    )
    parser.add_argument(
        "--seed-locomo",
        type=Path,
        default=None,
        help="a locomo work folder (benchmarks.locomo's) whose indexes to start from",
    )
    parser.add_argument(
        "--this", type=Path, default=REPO, help="the tree compared with the baseline (default: this one)"
    )
    parser.add_argument(
        "--only",
        type=Path,
        default=None,
        help="a report of an earlier run: run only the queries that differed there",
    )
    parser.add_argument("--today", default="2026-01-15", help="the date relative dates are read against")
    parser.add_argument("--tag", default="", help="suffix of the output file name")
    args = parser.parse_args(argv)
    offline_environment()
    work = (args.work_dir or args.out / "rank-identity").resolve()
    work.mkdir(parents=True, exist_ok=True)
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    report: dict[str, Any] = {
        "machine": machine(),
        "baseline": str(args.baseline),
        "this": str(args.this),
        "tolerance": {"rel": REL_TOL, "abs": ABS_TOL, "top": TOP},
        "suites": {},
    }
    rows = []
    only = json.loads(args.only.read_text(encoding="utf-8"))["suites"] if args.only is not None else None
    for suite in suites:
        print(f"{suite}: writing and priming the vaults", file=sys.stderr)
        if suite == "scifact":
            jobs = suite_scifact(work / "src", args.scifact, args.limit, args.seed_scifact)
        elif suite == "locomo":
            jobs = suite_locomo(work / "src", args.locomo, args.limit, args.seed_locomo)
        elif suite == "known_item":
            jobs = suite_known_item(work / "src", args.limit)
        else:
            raise SystemExit(f"unknown suite {suite!r}")
        if only is not None:
            keep = set(only.get(suite, {}).get("differences", {}))
            jobs = [{**job, "queries": [q for q in job["queries"] if q["id"] in keep]} for job in jobs]
            jobs = [job for job in jobs if job["queries"]]
            if not jobs:
                continue
        print(f"{suite}: baseline tree", file=sys.stderr)
        base = run_tree(args.baseline.resolve(), f"{suite}-baseline", jobs, work, args.today)
        print(f"{suite}: this tree", file=sys.stderr)
        this = run_tree(args.this.resolve(), f"{suite}-this", jobs, work, args.today)
        diffs = {}
        queries = {q["id"]: q["query"] for job in jobs for q in job["queries"]}
        for qid in queries:
            d = compare(base["records"][qid], this["records"][qid])
            if d is not None:
                diffs[qid] = {"query": queries[qid], **d}
        order = sum(1 for d in diffs.values() if "first_rank" in d)
        score_only = sum(1 for d in diffs.values() if "first_rank" not in d and "scores" in d)
        errors = sum(1 for d in diffs.values() if "error" in d)
        report["suites"][suite] = {
            "queries": len(queries),
            "identical": len(queries) - len(diffs),
            "ranking_differs": order,
            "scores_differ_only": score_only,
            "error_differs": errors,
            "seconds": {"baseline": base["seconds"], "this": this["seconds"]},
            "vaults": {"baseline": base["vaults"], "this": this["vaults"]},
            "differences": diffs,
        }
        rows.append([suite, len(queries), len(queries) - len(diffs), order, score_only, errors])
        print(f"{suite}: {len(queries) - len(diffs)}/{len(queries)} identical", file=sys.stderr)
        for qid, d in list(diffs.items())[:20]:
            print(
                f"  {qid}: {d['query']!r} {json.dumps({k: v for k, v in d.items() if k != 'query'})[:300]}",
                file=sys.stderr,
            )
    print(
        markdown_table(
            ["suite", "queries", "identical", "top-10 differs", "scores differ only", "error differs"], rows
        )
    )
    path = args.out / ("rank_identity" + (f"-{args.tag}" if args.tag else "") + ".json")
    write_json(path, report)
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        sys.exit(child(Path(sys.argv[2])))
    sys.exit(main())
