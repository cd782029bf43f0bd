"""The Milvus backend next to the local one on one synthetic vault: ingest rate and search latency, paired.

    nice -n 10 python -m benchmarks.milvus_scale --notes 3000 --out /tmp/milvus-bench

One generated vault (benchmarks.speed's generator) is indexed twice: by the local backend and by
the Milvus backend on Milvus Lite in process (a `.db` path), which parses as the local one and
then writes every row with its vector in one `sync` (as an open with a warm vector cache does;
a cold open writes rows without vectors first and again as vectors arrive). Both get the same stand-in vectors
(tf-idf weighted means of real-model word vectors, as benchmarks.speed does: embedding 12k shards
with the model would take ~10 min and measures the model, not the backend). Ingest: the rows
written by `MilvusIndex.sync` (every shard with its vector, then a flush) per second. Searches:
the full pipeline (real query embedding, both passes), local and Milvus taking turns query by
query (each first on every other query); p50/p95 of each, the paired median ratio, engine
searches per search, and how many of the top 10 node_ids local and Milvus share. `--reuse`
searches again on an earlier run's caches and engine (after a change of the search side).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from operator import methodcaller
from pathlib import Path
from typing import Any

from benchmarks.common import (
    REPO,
    log,
    machine,
    markdown_table,
    offline_environment,
    start_milvus_server,
    summary,
    write_json,
)
from benchmarks.speed import (
    _WordStream,
    ensure_vault,
    install_standin_vectors,
    make_queries,
    vocabulary,
    word_vectors,
)


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if "--sizes" in argv or "--plot" in argv:
        return curve_main(argv)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--notes", type=int, default=3000)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--out", type=Path, default=Path("/tmp/milvus-bench"))
    ap.add_argument(
        "--shared-cache",
        action="store_true",
        help="open the Milvus side on a copy of the local cache (no second parse; for large vaults)",
    )
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="keep the caches and the engine of an earlier run with the same --out (searches again; sync writes nothing)",
    )
    ap.add_argument(
        "--flat-arm",
        action="store_true",
        help="with --reuse: a third arm as the search was before (a copy of the earlier run's engine, its "
        "vector index left as it was, every vector search asking for all its rows at once)",
    )
    ap.add_argument(
        "--wide-arm",
        type=Path,
        default=None,
        help="with --reuse: an arm searching a copy of an engine of the earlier one-collection layout (all 20 "
        "fields in the searched collection, not migrated, no answer cache): the search as it was before the "
        "search/text split",
    )
    ap.add_argument(
        "--nocache-arm",
        action="store_true",
        help="an arm on the same engine as the Milvus arm without the session's answer cache",
    )
    ap.add_argument(
        "--server-arm",
        action="store_true",
        help="with --reuse: an arm on a `milvus-lite server` process serving a copy of the engine over "
        "gRPC on 127.0.0.1 (the team set-up), beside the in-process one",
    )
    ap.add_argument("--tag", default="", help="suffix of the output file name")
    args = ap.parse_args(argv)
    offline_environment()
    from explorer.config import Settings
    from explorer.engine import make_pipeline
    from explorer.index.local.vault_index import VaultIndex
    from explorer.index.milvus import MilvusIndex

    args.out.mkdir(parents=True, exist_ok=True)
    vocab = vocabulary()
    vault = ensure_vault(args.notes, args.out, vocab)
    wv = word_vectors(vocab, args.out)
    base = Settings()
    res: dict = {"machine": machine(), "notes": args.notes}

    reuse = args.reuse and all((args.out / d).exists() for d in ("cache-local", "cache-milvus", "engine"))
    for d in () if reuse else ("cache-local", "cache-milvus", "engine"):
        shutil.rmtree(args.out / d, ignore_errors=True)
    local = VaultIndex(
        vault, replace(base, index=replace(base.index, cache_dir=str(args.out / "cache-local")))
    )
    t = time.perf_counter()
    local.open()
    res["local_open_s"] = round(time.perf_counter() - t, 2)
    install_standin_vectors(local, wv, vocab)
    res["shards"] = local.stats().shards
    if (
        args.shared_cache and not reuse
    ):  # the Milvus side opens on a copy of this cache: parsed notes and vectors
        local.close()
        shutil.copytree(args.out / "cache-local", args.out / "cache-milvus")
        local = VaultIndex(
            vault, replace(base, index=replace(base.index, cache_dir=str(args.out / "cache-local")))
        )
        t = time.perf_counter()
        local.open()
        res["local_warm_open_s"] = round(time.perf_counter() - t, 2)

    ms = replace(
        base,
        index=replace(
            base.index,
            cache_dir=str(args.out / "cache-milvus"),
            backend="milvus",
            milvus_uri=str(args.out / "engine" / "m.db"),
        ),
    )
    flat = None
    if reuse and args.flat_arm:  # the earlier engine as it was (FLAT), beside the current one
        for d in ("engine", "cache-milvus"):
            if not (args.out / f"{d}-flat").exists():
                shutil.copytree(args.out / d, args.out / f"{d}-flat")
        fs = replace(
            ms,
            index=replace(
                ms.index,
                cache_dir=str(args.out / "cache-milvus-flat"),
                milvus_uri=str(args.out / "engine-flat" / "m.db"),
            ),
        )
        flat = MilvusIndex(vault, fs)
        flat.engine._check_index = lambda client: None  # type: ignore[method-assign] # noqa: SLF001
        from explorer.index.milvus import MilvusSnapshot

        class FullFetch(MilvusSnapshot):  # every vector search asks for all its rows at once, as before
            def _first_fetch(self, k: int) -> int:
                return k

        flat.snapshot = lambda: FullFetch(flat, flat.local.snapshot())  # type: ignore[method-assign]
        flat.open()
        res["flat_arm_index"] = flat.engine.client().describe_index(flat.engine.collection, "vector")
    wide = nocache = server = served = None
    if reuse and args.server_arm:
        server, served = _server_arm(vault, ms, args.out)
        served.open()
    if reuse and args.wide_arm is not None:
        wide = _wide_arm(vault, ms, args.wide_arm, args.out)
        wide.open()
        res["wide_arm_engine"] = str(args.wide_arm)
    remote = MilvusIndex(vault, ms)
    t = time.perf_counter()
    remote.local.open()  # parse and index as the local backend does; the engine is written below
    res["milvus_parse_s"] = round(time.perf_counter() - t, 2)
    if not args.shared_cache:
        install_standin_vectors(remote.local, wv, vocab)  # as a warm vector cache would give them at open
    sample = list(remote.shards.values())[:2000]
    t = time.perf_counter()
    for s in sample:
        remote._row(s)  # noqa: SLF001 - the row building alone, timed
    res["row_build_ms"] = round((time.perf_counter() - t) * 1000 / max(1, len(sample)), 3)
    remote._opened = True  # noqa: SLF001 - opened by VaultIndex.open above, synced here
    t = time.perf_counter()
    rows = remote.sync()  # every shard with its vector: inserted in batches, then one flush
    dt = time.perf_counter() - t
    res["ingest"] = {"rows": rows, "s": round(dt, 2), "rows_per_s": round(rows / dt, 1)}
    log(f"ingest {rows} rows in {dt:.1f} s ({res['row_build_ms']} ms per row built)")

    if args.nocache_arm:
        from explorer.index.milvus.answers import Answers

        nocache = MilvusIndex(vault, ms)
        nocache.open()
        nocache.answers = Answers(ttl=-1.0)  # every question asked of the engine
    pl, pm = make_pipeline(local, local.settings), make_pipeline(remote, remote.settings)
    queries = make_queries(vocab, args.queries + 5)
    for q in queries[:5]:
        pl.search(q, record=False)
        pm.search(q, record=False)
    tl, tm, tf, agree = [], [], [], []
    calls = 0
    arms = [("local", pl, tl), ("milvus", pm, tm)]
    tw: list[float] = []
    tn: list[float] = []
    ts: list[float] = []
    for other, name, times in (
        (wide, "milvus_wide", tw),
        (nocache, "milvus_nocache", tn),
        (served, "milvus_server", ts),
    ):
        if other is not None:
            po = make_pipeline(other, other.settings)
            for q in queries[:5]:
                po.search(q, record=False)
            arms.append((name, po, times))
    if flat is not None:
        pf = make_pipeline(flat, flat.settings)
        for q in queries[:5]:
            pf.search(q, record=False)
        arms.append(("milvus_flat", pf, tf))
    same = 0
    for i, q in enumerate(queries[5:]):
        got = {}
        whole: dict[str, list[tuple[str, float]]] = {}
        for name, pipe, times in arms[i % len(arms) :] + arms[: i % len(arms)]:
            before = remote.engine.calls.get("search", 0)
            t = time.perf_counter()
            r = pipe.search(q, record=False)
            times.append((time.perf_counter() - t) * 1000)
            calls += remote.engine.calls.get("search", 0) - before
            got[name] = [x.node_id for x in r.results[:10]]
            whole[name] = [(x.node_id, round(x.score, 6)) for x in r.results]
        a, b = got["local"], got["milvus"]
        agree.append(len(set(a) & set(b)) / max(1, len(a)))
        same += all(whole[n] == whole["local"] for n in whole)
    res["search_ms"] = {"local": summary(tl), "milvus": summary(tm)}

    def paired(a: list[float], b: list[float]) -> float:
        ratios = sorted(y / max(x, 1e-9) for x, y in zip(a, b, strict=True))
        return round(ratios[len(ratios) // 2], 2)

    res["milvus_over_local_median"] = paired(tl, tm)
    for name, times in (("milvus_wide", tw), ("milvus_nocache", tn), ("milvus_server", ts)):
        if times:
            res["search_ms"][name] = summary(times)
            res[f"{name}_over_local_median"] = paired(tl, times)
            res[f"milvus_over_{name}_median"] = paired(times, tm)
    res["answer_cache"] = {"hits": remote.answers.hits, "misses": remote.answers.misses}
    if tf:
        res["search_ms"]["milvus_flat"] = summary(tf)
        res["flat_over_local_median"] = paired(tl, tf)
        res["milvus_over_flat_median"] = paired(tf, tm)
    res["engine_searches_per_search"] = round(calls / max(1, len(tm)), 1)
    res["top10_agreement"] = round(sum(agree) / len(agree), 3)
    res["all_results_equal_on_every_arm"] = f"{same} of {len(agree)} queries (node_ids and scores to 1e-6)"
    log(
        f"local {res['search_ms']['local']} / milvus {res['search_ms']['milvus']}; paired ratio "
        f"{res['milvus_over_local_median']}; engine searches per search {res['engine_searches_per_search']}; "
        f"agreement {res['top10_agreement']}"
    )
    write_json(args.out / f"milvus-scale-{args.notes}{args.tag}.json", res)
    if flat is not None:
        flat.close()
    for other in (wide, nocache, served):
        if other is not None:
            other.close()
    if server is not None:
        server.terminate()
        server.wait(timeout=30)
    local.close()
    remote.close()
    return 0


def server_on_copy(out: Path, tag: str) -> tuple[Any, str, Path]:
    """A `milvus-lite server` process on copies of the benchmark's engine (`out/engine/m.db`) and its
    vector cache, named after `tag`: (process, URI, the copied cache folder). Returns once the port
    answers (RuntimeError after 60 s)."""
    data, cache = out / f"engine-{tag}", out / f"cache-milvus-{tag}"
    for src, dst in ((out / "engine" / "m.db", data), (out / "cache-milvus", cache)):
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)
    proc, uri = start_milvus_server(data)
    return proc, uri, cache


def _server_arm(vault: Path, settings: Any, out: Path) -> tuple[Any, Any]:
    """A `milvus-lite server` process on a copy of the engine, and a MilvusIndex reaching it by URI."""
    from explorer.index.milvus import MilvusIndex

    proc, uri, cache = server_on_copy(out, "server")
    ss = replace(settings, index=replace(settings.index, cache_dir=str(cache), milvus_uri=uri))
    return proc, MilvusIndex(vault, ss)


def _wide_arm(vault: Path, settings: Any, engine_copy: Path, out: Path) -> Any:
    """A MilvusIndex on a copy of an engine of the earlier layout, searched as it was: its one wide
    collection, not migrated, every question asked of the engine (no answer cache)."""
    from explorer.index.milvus import MilvusIndex
    from explorer.index.milvus.answers import Answers
    from explorer.index.milvus.engine import Engine

    class WideEngine(Engine):
        def _prepare(self, client: Any) -> None:
            client.load_collection(self.collection)

    cache = out / "cache-milvus-wide"
    if not cache.exists():
        shutil.copytree(out / "cache-milvus", cache)
    ws = replace(
        settings,
        index=replace(settings.index, cache_dir=str(cache), milvus_uri=str(engine_copy / "m.db")),
    )
    ix = MilvusIndex(vault, ws)
    ix.engine = WideEngine(ws.index.milvus_uri, ws.index.collection)
    ix.answers = Answers(ttl=-1.0)
    return ix


# -- the team scale curve ---------------------------------------------------------------------
CURVE_DOC = """The team scale curve: one `milvus-lite server` process grown to each size, searched at each.

    nice -n 10 python -m benchmarks.milvus_scale --sizes 12000,50000,100000,300000 --out /tmp/milvus-curve
    python -m benchmarks.milvus_scale --plot /tmp/milvus-curve/milvus-curve-before.json \\
        /tmp/milvus-curve/milvus-curve-after.json   # the PNG in docs/images from earlier runs

The searching vault ("caller", `--notes` generated notes, benchmarks.speed's generator) is parsed
and written through `MilvusIndex.sync` as a writer does. The other vaults (`team01`, ... of
10,000 shards each, as a team of 30 vaults x 10k) are generated rows written straight into the
search and text collections in the writer's batches: English-like shard texts from the same
Zipf word stream, the writer's BM25 words, and stand-in vectors (the tf-idf weighted mean of
real-model word vectors, as benchmarks.speed gives the caller's shards). Embedding 300k texts
with the model here would take about four hours (~21 shards/s) and measures the model, not the
engine. At each size: `vault:*` searches and the caller's own searches (the full pipeline with
a real query embedding, both passes) taking turns query by query, p50/p95; engine calls per
search by kind with their wall time (client side of each pymilvus call) and the server
process's CPU time beside the client's; ingest rows/s of the step; the server's RSS and the
data folder's size; a cProfile of a few `vault:*` searches. After the last size, one-shot CLI
`explorer search ... vault:*` processes against the server (wall time of the process).
"""

BULK_VAULT_SHARDS = 10_000
"""Shards of each generated vault (30 of them make the 300k team of the plan)."""


def curve_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=CURVE_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="12000,50000,100000,300000", help="collection sizes in shards")
    ap.add_argument("--phase", choices=("ingest", "search", "both"), default="both")
    ap.add_argument("--notes", type=int, default=1500, help="notes of the searching vault")
    ap.add_argument(
        "--queries", type=int, default=20, help="queries measured at each size (own and vault:* each)"
    )
    ap.add_argument("--out", type=Path, default=Path("/tmp/milvus-curve"))
    ap.add_argument(
        "--tag", default="", help="names the result file (milvus-curve-TAG.json) and the plot's line"
    )
    ap.add_argument(
        "--before",
        type=Path,
        default=None,
        help="a team.py of an earlier tree: its TeamSnapshot is a second vault:* arm, taking turns with this "
        "tree's (paired, in the same process and on the same server)",
    )
    ap.add_argument("--profile", type=int, default=3, help="vault:* searches profiled at each size")
    ap.add_argument(
        "--cli-runs", type=int, default=3, help="one-shot CLI vault:* searches at the largest size"
    )
    ap.add_argument(
        "--plot", nargs="*", type=Path, default=None, help="only draw the plot of these result files"
    )
    ap.add_argument("--png", type=Path, default=REPO / "docs" / "images" / "milvus-team-scale.png")
    args = ap.parse_args(argv)
    offline_environment()
    if args.plot is not None:
        runs = [json.loads(p.read_text(encoding="utf-8")) for p in args.plot]
        for run in runs:
            print(curve_table(run))
        plot_curve(runs, args.png)
        return 0
    sizes = sorted(int(x) for x in args.sizes.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    if args.phase in ("ingest", "both"):
        curve_ingest(args, sizes)
    if args.phase in ("search", "both"):
        res = curve_search(args, sizes)
        print(curve_table(res))
        plot_curve([res], args.png)
    return 0


def _caller(args: argparse.Namespace, uri: str) -> tuple[Any, Any]:
    """The searching vault's MilvusIndex on `uri` (opened; not synced) and its settings."""
    from explorer.config import Settings
    from explorer.index.milvus import MilvusIndex

    vocab = vocabulary()
    vault = ensure_vault(args.notes, args.out, vocab)
    base = Settings()
    ms = replace(
        base,
        index=replace(
            base.index,
            cache_dir=str(args.out / "cache-caller"),
            backend="milvus",
            milvus_uri=uri,
            vault_name="caller",
        ),
    )
    ix = MilvusIndex(vault, ms)
    ix.local.open()  # parse and index as the local backend does; the engine is written by `sync`
    # the shards the vector cache lacks
    install_standin_vectors(ix.local, word_vectors(vocab, args.out), vocab)
    ix.engine.client()
    ix._opened = True  # noqa: SLF001 - opened by VaultIndex.open above
    return ix, ms


def stop_server(proc: Any) -> None:
    proc.send_signal(2)  # as its operator stops it (SIGINT): it finishes writing and closes its files
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


def curve_ingest(args: argparse.Namespace, sizes: list[int]) -> None:
    """Grow one server's collection to each size; after each, the server is stopped and its data folder
    copied to `engine-SIZE` (searched by the search phase). Writes `ingest.json`."""
    data = args.out / "engine-grow"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    proc, uri = start_milvus_server(data)
    res: dict[str, Any] = {"machine": machine(), "notes": args.notes, "sizes": {}}
    vocab = vocabulary()
    try:
        t = time.perf_counter()
        ix, _ = _caller(args, uri)
        res["caller_open_s"] = round(time.perf_counter() - t, 2)
        t = time.perf_counter()
        own = ix.sync()
        dt = time.perf_counter() - t
        res["caller_ingest"] = {"rows": own, "s": round(dt, 2), "rows_per_s": round(own / dt, 1)}
        log(f"caller: {own} rows through MilvusIndex.sync in {dt:.1f} s")
        bulk = BulkRows(vocab, word_vectors(vocab, args.out), ix.model_id)
        total = own
        for size in sizes:
            point: dict[str, Any] = {}
            if size > total:
                point = bulk.write(ix.engine, size - total)
                total = size
            point["server_rss_mb"] = tree_rss_mb(proc.pid)
            ix.engine.close()
            stop_server(proc)
            point["disk_mb"] = round(sum(f.stat().st_size for f in data.rglob("*") if f.is_file()) / 2**20, 1)
            copy = args.out / f"engine-{size}"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(data, copy)
            (copy / "vault-stats.json").write_text(json.dumps(bulk.stats), encoding="utf-8")
            res["sizes"][str(size)] = point
            write_json(args.out / "ingest.json", res)
            log(f"{size}: {point}")
            proc, uri = start_milvus_server(data)
            ix.engine.uri = uri
        ix.close()
    finally:
        stop_server(proc)


def curve_search(args: argparse.Namespace, sizes: list[int]) -> dict[str, Any]:
    """At each size: a server on `engine-SIZE`, own and `vault:*` searches taking turns."""
    from explorer.engine import make_pipeline

    ingest = json.loads((args.out / "ingest.json").read_text(encoding="utf-8"))
    res: dict[str, Any] = {"machine": machine(), "tag": args.tag, "notes": args.notes, "sizes": []}
    res["caller_ingest"] = ingest.get("caller_ingest")
    queries = make_queries(vocabulary(), args.queries + 5, seed=23)
    before = _load_before(args.before) if args.before is not None else None
    for n, size in enumerate(sizes):
        data = args.out / f"engine-{size}"
        proc, uri = start_milvus_server(data)
        try:
            ix, ms = _caller(args, uri)
            ix.sync()  # reads the row state (writes nothing: the copy holds this vault)
            write_vault_stats(ix, data)
            clock = CallClock(ix.engine)
            pipe = make_pipeline(ix, ix.settings)
            point: dict[str, Any] = {"shards": size, "ingest": ingest["sizes"].get(str(size), {})}
            t = time.perf_counter()
            pipe.search(queries[0] + " vault:*", record=False)
            point["first_team_search_ms"] = round((time.perf_counter() - t) * 1000, 1)
            arms: list[tuple[str, Any]] = [("own", ""), ("team", " vault:*")]
            old = None
            if before is not None:
                old = _before_index(before, ix)
                arms.append(("before", " vault:*"))
            pipes = {"own": pipe, "team": pipe, "before": make_pipeline(old, old.settings) if old else None}
            for q in queries[1:5]:
                for arm, suffix in arms:
                    pipes[arm].search(q + suffix, record=False)
            point.update(measure(pipes, arms, [ix] + ([old] if old else []), clock, proc.pid, queries[5:]))
            point["server_rss_mb"] = tree_rss_mb(proc.pid)
            point["disk_mb"] = point["ingest"].get("disk_mb")
            point["profile"] = profile_searches(
                pipe, queries[5 : 5 + args.profile], args.out / f"profile-{size}-{args.tag or 'run'}.txt"
            )
            res["sizes"].append(point)
            log(
                f"{size}: vault:* p50 {point['team_ms']['median']} p95 {point['team_ms']['p95']} ms, own p50 "
                f"{point['own_ms']['median']} ms, calls {point['team_calls']}, RSS {point['server_rss_mb']} MB"
                + (
                    f"; before p50 {point['before_ms']['median']} p95 {point['before_ms']['p95']}"
                    if old
                    else ""
                )
            )
            if n == len(sizes) - 1 and args.cli_runs:
                res["cli"] = cli_searches(ix.root, ms, uri, queries[5 : 5 + args.cli_runs])
            write_json(args.out / f"milvus-curve-{args.tag or 'run'}.json", res)
            ix.close()
        finally:
            stop_server(proc)
    return res


def write_vault_stats(ix: Any, data: Path) -> None:
    """The BM25 statistics of the generated vaults (kept beside their copy by the ingest phase), written as
    their writers would have (when this tree keeps such statistics: explorer.index.milvus.stats)."""
    table = getattr(ix, "team_stats", None)
    path = data / "vault-stats.json"
    if table is None or not path.is_file():
        return
    for vault, (docs, length, df) in json.loads(path.read_text(encoding="utf-8")).items():
        table.write_vault(vault, int(docs), int(length), df, None)


def _load_before(path: Path) -> Any:
    """The TeamSnapshot class of an earlier tree's team.py, loaded beside this tree's (same base classes)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("explorer_team_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TeamSnapshot


def _before_index(team_cls: Any, ix: Any) -> Any:
    """A second view of the same MilvusIndex whose team views are the earlier TeamSnapshot's."""
    import copy

    old = copy.copy(ix)  # the same index, engine, answers and snapshots; only `team_view` differs
    from explorer.index.milvus.answers import Answers

    old.answers = Answers()

    def team_view(base: Any, scope: Any) -> tuple[Any, str, bool]:
        _view, note, covered = type(ix).team_view(ix, base, scope)
        return team_cls(base, scope), note, covered

    old.team_view = team_view
    return old


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (Linux /proc)."""
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def tree_rss_mb(pid: int) -> float:
    total = 0
    for p in _tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return round(total / 1024, 1)


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of `pid` and its descendants."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for p in _tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, ValueError, IndexError):
            continue
    return total / tick


class CallClock:
    """Wall time of every engine call by kind (the client's side of each pymilvus call: the engine's
    work, the gRPC round trip and the decoding of the answer)."""

    def __init__(self, engine: Any) -> None:
        self.ms: dict[str, float] = {}
        inner = engine.call

        def timed(what: str, fn: Any) -> Any:
            t = time.perf_counter()
            try:
                return inner(what, fn)
            finally:
                self.ms[what] = self.ms.get(what, 0.0) + (time.perf_counter() - t) * 1000

        engine.call = timed


def measure(
    pipes: dict[str, Any],
    arms: list[tuple[str, str]],
    indexes: list[Any],
    clock: CallClock,
    pid: int,
    queries: list[str],
) -> dict[str, Any]:
    """Every arm on every query, taking turns (the first arm of each query rotates)."""
    names = [a for a, _ in arms]
    times: dict[str, list[float]] = {a: [] for a in names}
    calls: dict[str, dict[str, int]] = {a: {} for a in names}
    call_ms: dict[str, dict[str, float]] = {a: {} for a in names}
    cpu = {a: [0.0, 0.0] for a in names}  # client, server seconds
    tops: dict[str, dict[str, list[str]]] = {}
    engine = indexes[0].engine
    for i, q in enumerate(queries):
        for arm, suffix in arms[i % len(arms) :] + arms[: i % len(arms)]:
            before, ms_before = dict(engine.calls), dict(clock.ms)
            c0, s0 = time.process_time(), tree_cpu_s(pid)
            t = time.perf_counter()
            found = pipes[arm].search(q + suffix, record=False)
            times[arm].append((time.perf_counter() - t) * 1000)
            tops.setdefault(q, {})[arm] = [r.document_path for r in found.results[:10]]
            cpu[arm][0] += time.process_time() - c0
            cpu[arm][1] += tree_cpu_s(pid) - s0
            for k, v in engine.calls.items():
                calls[arm][k] = calls[arm].get(k, 0) + v - before.get(k, 0)
            for k, v in clock.ms.items():
                call_ms[arm][k] = call_ms[arm].get(k, 0.0) + v - ms_before.get(k, 0.0)
    n = max(1, len(queries))
    out: dict[str, Any] = {}
    for arm in names:
        out[f"{arm}_ms"] = summary(times[arm])
        out[f"{arm}_calls"] = {k: round(v / n, 2) for k, v in sorted(calls[arm].items()) if v}
        out[f"{arm}_call_ms"] = {k: round(v / n, 1) for k, v in sorted(call_ms[arm].items()) if v}
        out[f"{arm}_client_cpu_ms"] = round(cpu[arm][0] * 1000 / n, 1)
        out[f"{arm}_server_cpu_ms"] = round(cpu[arm][1] * 1000 / n, 1)
    if "before" in times:  # the top 10 of this tree's vault:* search against the earlier one's
        pairs = [(t["team"], t["before"]) for t in tops.values() if "team" in t and "before" in t]
        out["top10_overlap_with_before"] = round(
            sum(len(set(a) & set(b)) for a, b in pairs) / max(1, len(pairs)), 2
        )
        out["top10_same_order_with_before"] = sum(a == b for a, b in pairs)
        out["top1_same_with_before"] = sum(a[:1] == b[:1] for a, b in pairs)
        ratios = sorted(b / max(a, 1e-9) for a, b in zip(times["team"], times["before"], strict=True))
        out["before_over_team_median"] = round(ratios[len(ratios) // 2], 2)
    return out


def profile_searches(pipe: Any, queries: list[str], path: Path) -> list[list[Any]]:
    """cProfile of `vault:*` searches: the whole listing to `path`, the top functions by own time returned."""
    prof = cProfile.Profile()
    prof.enable()
    for q in queries:
        pipe.search(q + " vault:*", record=False)
    prof.disable()
    buf = io.StringIO()
    st = pstats.Stats(prof, stream=buf)
    st.sort_stats("cumulative").print_stats(45)
    st.sort_stats("tottime").print_stats(25)
    path.write_text(buf.getvalue(), encoding="utf-8")
    n = max(1, len(queries))
    rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:10]  # type: ignore[attr-defined]
    return [
        [f"{Path(f).name}:{line}({fn})", round(tt * 1000 / n, 1)] for (f, line, fn), (_, _, tt, _, _) in rows
    ]


def cli_searches(vault: Path, settings: Any, uri: str, queries: list[str]) -> dict[str, Any]:
    """One-shot `explorer search QUERY vault:* --json` processes against the server (wall seconds)."""
    env = dict(os.environ)
    env.update(
        EXPLORER_INDEX_BACKEND="milvus",
        EXPLORER_INDEX_MILVUS_URI=uri,
        EXPLORER_INDEX_CACHE_DIR=settings.index.cache_dir,
        EXPLORER_INDEX_VAULT_NAME="caller",
    )
    walls = []
    for q in queries:
        t = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "explorer", "search", "--vault", str(vault), "--json", q, "vault:*"],
            cwd=REPO,
            env=env,
            capture_output=True,
            timeout=600,
        )
        walls.append(time.perf_counter() - t)
        if done.returncode != 0:
            log(f"cli exit {done.returncode}: {done.stderr.decode(errors='replace')[-300:]}")
    return {"s": summary(walls)}


class BulkRows:
    """Other vaults' rows, generated and written in the writer's batches (`team01`, ... of
    `BULK_VAULT_SHARDS` shards each): notes of 1-5 shards of 80-250 words from the Zipf word stream,
    the writer's BM25 words, stand-in vectors (tf-idf weighted means of real-model word vectors)."""

    def __init__(self, vocab: list[str], wordvecs: Path, model: str, seed: int = 101) -> None:
        import numpy as np

        self.vocab, self.model = vocab, model
        self.wv = np.load(wordvecs).astype(np.float32)
        self.word_id = {w: i for i, w in enumerate(vocab)}
        self.stream = _WordStream(vocab, seed)
        self.idf = (-np.log(self.stream._p)).astype(np.float32)  # noqa: SLF001 - the stream's own word frequencies
        self.rng = random.Random(seed)
        self.vault_no, self.in_vault, self.note_no = 0, BULK_VAULT_SHARDS, 0
        self.tags = list(vocab[200:400])
        self.stats: dict[str, list[Any]] = {}
        """vault -> [documents, total length in tokens, {token: documents holding it}] (Explorer's tokens)."""

    def _shards(self, n: int) -> list[dict[str, Any]]:
        """The next `n` shards' full rows (as `MilvusIndex._row` gives them), whole notes at a time."""
        import hashlib

        from explorer.index.milvus.engine import engine_terms, shard_pk
        from explorer.text.tokenize import tokenize

        out: list[dict[str, Any]] = []
        while len(out) < n:
            if self.in_vault >= BULK_VAULT_SHARDS:
                self.vault_no, self.in_vault = self.vault_no + 1, 0
            vault = f"team{self.vault_no:02d}"
            self.note_no += 1
            path = f"{self.rng.choice(self.tags).capitalize()}/note-{self.note_no}.md"
            tags = self.rng.sample(self.tags, self.rng.randint(0, 2))
            day = 739000 + self.rng.randint(0, 900)
            offset = 0
            for k in range(self.rng.randint(1, 5)):
                words = self.stream.take(self.rng.randint(80, 250))
                text = f"## Section {k}\n\n" + " ".join(words) + "."
                node = f"{path}#Section {k}"
                tokens = tokenize(f"note {self.note_no} section {k} " + text)
                st = self.stats.setdefault(vault, [0, 0, {}])
                st[0] += 1
                st[1] += len(tokens)
                for tok in set(tokens):
                    st[2][tok] = st[2].get(tok, 0) + 1
                row = {
                    "pk": shard_pk(vault, node),
                    "node_id": node,
                    "vault": vault,
                    "path": path,
                    "owner": vault,
                    "source_type": "note",
                    "heading_path": f"Section {k}",
                    "tags": tags,
                    "mtime": 1_700_000_000,
                    "day": day,
                    "ordinal": k,
                    "start": offset,
                    "end": offset + len(text),
                    "text": text,
                    "content_hash": hashlib.blake2b(text.encode(), digest_size=16).hexdigest(),
                    "model": self.model,
                    "terms": engine_terms(tokens),
                    "has_vector": True,
                    "props": "",
                    "_words": words,
                }
                offset += len(text) + 1
                out.append(row)
                self.in_vault += 1
        self._vectors(out)
        return out

    def _vectors(self, rows: list[dict[str, Any]]) -> None:
        import numpy as np
        from scipy import sparse

        ids = [[self.word_id[w] for w in r.pop("_words") if w in self.word_id] for r in rows]
        indptr = np.cumsum([0] + [len(d) for d in ids])
        indices = np.fromiter((j for d in ids for j in d), dtype=np.int64, count=int(indptr[-1]))
        m = sparse.csr_matrix(
            (np.ones(len(indices), dtype=np.float32), indices, indptr), shape=(len(rows), len(self.vocab))
        )
        m.sum_duplicates()
        vecs = np.asarray(sparse.csr_matrix(m.multiply(self.idf[None, :])) @ self.wv, dtype=np.float32)
        vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        for r, v in zip(rows, vecs, strict=True):
            r["vector"] = v.tolist()

    def write(self, engine: Any, n: int) -> dict[str, Any]:
        """Write `n` more rows as a writer writes new shards (text rows, then search rows, 500 a call, then
        one flush; inserted, as rows known to be new); their generation is timed apart and left out of the rate."""
        from explorer.index.milvus.engine import FIELDS, UPSERT_BATCH, text_row

        gen = ingest = 0.0
        done = 0
        while done < n:
            t = time.perf_counter()
            part = self._shards(min(UPSERT_BATCH, n - done))
            gen += time.perf_counter() - t
            t = time.perf_counter()
            text = [text_row(r) for r in part]
            search = [{k: r[k] for k in FIELDS if k in r} for r in part]
            engine.text_call("insert", methodcaller("insert", engine.text_collection, text))
            engine.call("insert", methodcaller("insert", engine.collection, search))
            ingest += time.perf_counter() - t
            done += len(part)
        t = time.perf_counter()
        engine.call("flush", lambda c: (c.flush(engine.text_collection), c.flush(engine.collection)))
        flush = time.perf_counter() - t
        ingest += flush
        return {
            "rows": done,
            "s": round(ingest, 1),
            "flush_s": round(flush, 1),
            "rows_per_s": round(done / max(ingest, 1e-9), 1),
            "generate_s": round(gen, 1),
        }


def curve_table(res: dict[str, Any]) -> str:
    rows = []
    for p in res["sizes"]:
        ing = p.get("ingest", {})
        rows.append(
            [
                f"{p['shards']:,}",
                p["team_ms"]["median"],
                p["team_ms"]["p95"],
                p["own_ms"]["median"],
                p["own_ms"]["p95"],
                " ".join(f"{k} {v}" for k, v in p["team_calls"].items()),
                " ".join(f"{k} {v}" for k, v in p["team_call_ms"].items()),
                f"{p['team_client_cpu_ms']} / {p['team_server_cpu_ms']}",
                f"{p['before_ms']['median']} / {p['before_ms']['p95']}" if "before_ms" in p else "-",
                " ".join(f"{k} {v}" for k, v in p.get("before_calls", {}).items()) or "-",
                ing.get("rows_per_s", "-"),
                p["server_rss_mb"],
                p["disk_mb"],
            ]
        )
    head = [
        "shards",
        "vault:* p50 ms",
        "p95",
        "own p50",
        "own p95",
        "engine calls / search",
        "engine call ms / search",
        "CPU ms client / server",
        "before p50 / p95",
        "before calls",
        "ingest rows/s",
        "server RSS MB",
        "disk MB",
    ]
    text = f"## {res.get('tag') or 'run'}\n" + markdown_table(head, rows)
    if res.get("cli"):
        text += f"\none-shot CLI vault:* search at {res['sizes'][-1]['shards']:,} shards: {res['cli']['s']} s"
    return text


def plot_curve(runs: list[dict[str, Any]], png: Path) -> None:
    """Search latency, engine calls and the server's memory against the collection's size, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    for run in runs:
        tag = run.get("tag") or "run"
        xs = [p["shards"] for p in run["sizes"]]
        arms = [("team_ms", "-o", "vault:*"), ("own_ms", ":s", "own vault")]
        if all("before_ms" in p for p in run["sizes"]):
            arms.append(("before_ms", "-.x", "vault:* before"))
        for key, style, label in arms:
            axes[0].plot(xs, [p[key]["median"] for p in run["sizes"]], style, label=f"{label} p50 ({tag})")
            if key != "own_ms":
                axes[0].plot(xs, [p[key]["p95"] for p in run["sizes"]], "--^", label=f"{label} p95 ({tag})")
        axes[1].plot(
            xs, [sum(p["team_calls"].values()) for p in run["sizes"]], "-o", label=f"vault:* ({tag})"
        )
        axes[2].plot(xs, [p["server_rss_mb"] for p in run["sizes"]], "-o", label=f"server RSS ({tag})")
        axes[2].plot(xs, [p["disk_mb"] for p in run["sizes"]], "--s", label=f"disk ({tag})")
    for ax, title, unit in zip(
        axes,
        ("search latency (full pipeline)", "engine calls per search", "milvus-lite server"),
        ("ms", "calls", "MB"),
        strict=True,
    ):
        ax.set_xscale("log")
        ax.set_xlabel("shards in the collection")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_yscale("log")
    fig.suptitle("Explorer on one milvus-lite server, 2 cores (benchmarks/milvus_scale.py --sizes)")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    log(f"plot: {png}")


if __name__ == "__main__":
    raise SystemExit(main())
