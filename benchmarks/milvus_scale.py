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
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.common import log, machine, offline_environment, summary, write_json
from benchmarks.speed import ensure_vault, install_standin_vectors, make_queries, vocabulary, word_vectors


def main(argv: list[str] | None = None) -> int:
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
    VaultIndex.open(remote)  # parse and index as the local backend does; the engine is written below
    res["milvus_parse_s"] = round(time.perf_counter() - t, 2)
    if not args.shared_cache:
        install_standin_vectors(remote, wv, vocab)  # as a warm vector cache would give them at open
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
    answers (or after 60 s)."""
    import socket
    import subprocess
    import sys

    data, cache = out / f"engine-{tag}", out / f"cache-milvus-{tag}"
    for src, dst in ((out / "engine" / "m.db", data), (out / "cache-milvus", cache)):
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("milvus-lite")),
            "server",
            "--data-dir",
            str(data),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    end = time.monotonic() + 60
    while time.monotonic() < end:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.2)
    return proc, f"http://127.0.0.1:{port}", cache


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


if __name__ == "__main__":
    raise SystemExit(main())
