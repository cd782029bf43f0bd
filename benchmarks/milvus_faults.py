"""The Milvus backend's engine stopped in the middle of a large ingest, then started again: counts.

    nice -n 10 python -m benchmarks.milvus_faults --rows 100000 --signal kill --out /tmp/milvus-faults

A generated vault of `--rows` one-shard notes is written by one `MilvusIndex` (a command's open: parse,
then one `sync` of every row in batches of `UPSERT_BATCH`) into a `milvus-lite server` process. When
`--stop-at` of the batches have been sent, the server gets the signal (kill: SIGKILL, term: SIGTERM,
int: Ctrl-C) and is started again on the same data folder; the writer resumes (`sync` retried until the
engine answers). Meanwhile a reader counts the rows of the search and text collections every 0.2 s.
Rows carry no vectors (`index.embeddings = false`): the engine's ingest and its faults are measured,
not the model. Reported: rows expected, rows in each collection and distinct keys after the resume
(lost = expected - distinct, doubled = rows - distinct), rows sent before the fault and by the
resume, ingest rows/s before the fault, seconds from the restart to a resumed collection, the
reader's observations and any that saw part of a batch or a search row without its text row.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import log, machine, start_milvus_server, write_json

WORDS = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma".split()
)
SIGNALS = {"kill": signal.SIGKILL, "term": signal.SIGTERM, "int": signal.SIGINT}


class Server:
    """A `milvus-lite server` process on 127.0.0.1 (the one the venv installs)."""

    def __init__(self, data: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.data, self.proc = data, None
        self.uri = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc, _ = start_milvus_server(self.data, self.port, wait=120)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:  # a server holding a large collection can take longer to stop
            log(f"server did not stop on signal {sig} within 120 s: killed")
            self.proc.kill()
            self.proc.wait(timeout=60)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.signal(signal.SIGINT)


def write_vault(root: Path, rows: int) -> None:
    for i in range(rows):
        folder = root / f"n{i // 1000:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        text = " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(60))
        (folder / f"{i:06d}.md").write_text(f"# Note {i}\n\n{text} word{i}\n", encoding="utf-8")


def count_keys(client: Any, name: str) -> tuple[int, int]:
    """(rows listed, distinct keys) of a collection."""
    keys: list[str] = []
    it = client.query_iterator(name, batch_size=8000, filter="", output_fields=["pk"])
    try:
        while page := it.next():
            keys += [r["pk"] for r in page]
    finally:
        it.close()
    return len(keys), len(set(keys))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--signal", choices=sorted(SIGNALS), default="kill")
    ap.add_argument("--stop-at", type=float, default=0.5, help="share of the batches sent before the signal")
    ap.add_argument("--out", type=Path, default=Path("/tmp/milvus-faults"))
    args = ap.parse_args(argv)
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    from dataclasses import replace

    from pymilvus import MilvusClient

    from explorer.config import Settings
    from explorer.engine import new_index
    from explorer.index.milvus import BackendError
    from explorer.index.milvus.engine import UPSERT_BATCH

    out = args.out
    shutil.rmtree(out / "engine", ignore_errors=True)
    shutil.rmtree(out / "cache", ignore_errors=True)
    vault = out / f"vault-{args.rows}"
    if not vault.exists():
        log(f"writing {args.rows} notes")
        write_vault(vault, args.rows)
    server = Server(out / "engine")
    server.start()
    base = Settings()
    settings = replace(
        base,
        index=replace(
            base.index,
            backend="milvus",
            milvus_uri=server.uri,
            cache_dir=str(out / "cache"),
            vault_name="bench",
            embeddings=False,
        ),
    )
    index: Any = new_index(vault, settings)
    batches = -(-args.rows // UPSERT_BATCH)
    stop_after = max(1, int(batches * args.stop_at))
    seen: list[tuple[float, int, int]] = []
    done, stopped = threading.Event(), threading.Event()
    sent_at: list[float] = []

    def reader() -> None:
        client = None
        while not done.is_set():
            try:
                if client is None:
                    client = MilvusClient(uri=server.uri, timeout=5)
                name = index.engine.collection
                s = client.query(name, filter="", output_fields=["count(*)"])[0]["count(*)"]
                t = client.query(name + "_text", filter="", output_fields=["count(*)"])[0]["count(*)"]
                seen.append((time.monotonic(), int(s), int(t)))
            except Exception:  # noqa: BLE001 - the engine is away or the collection not made yet
                if client is not None:
                    client.close()
                client = None
            time.sleep(0.2)

    def stopper() -> None:
        while index.engine.calls.get("insert", 0) < stop_after:
            time.sleep(0.005)
        sent_at.append(time.monotonic())
        server.signal(SIGNALS[args.signal])
        stopped.set()

    threading.Thread(target=reader, daemon=True).start()
    threading.Thread(target=stopper, daemon=True).start()
    t0 = time.monotonic()
    fault = ""
    try:
        index.open()
    except BackendError as exc:
        fault = str(exc)
    stopped.wait(600)
    synced_before = time.monotonic()
    inserts_before = index.engine.calls.get("insert", 0)
    log(f"fault after {synced_before - t0:.1f} s: {fault}")
    server.start()
    restarted = time.monotonic()
    resumed_rows = -1
    tries = 0
    while time.monotonic() - restarted < 900:
        tries += 1
        try:
            resumed_rows = index.sync()
            break
        except BackendError:
            time.sleep(0.5)
    resumed = time.monotonic()
    done.set()
    client = MilvusClient(uri=server.uri, timeout=30)
    client.load_collection(index.engine.collection)
    client.load_collection(index.engine.text_collection)
    search_rows, search_keys = count_keys(client, index.engine.collection)
    text_rows, text_keys = count_keys(client, index.engine.text_collection)
    client.close()
    during = [(s, t) for _, s, t in seen]
    partial = [(s, t) for s, t in during if s % UPSERT_BATCH and s != args.rows]
    textless = [(s, t) for s, t in during if t < s]
    ingest_s = (sent_at[0] - t0) if sent_at else float("nan")
    result = {
        "rows": args.rows,
        "signal": args.signal,
        "fault": fault,
        "insert_calls_before_fault": inserts_before,
        "rows_sent_by_resume": resumed_rows,
        "resume_tries": tries,
        "seconds_restart_to_resumed": round(resumed - restarted, 1),
        "open_seconds_to_fault (parse + ingest)": round(ingest_s, 1),
        "search_collection": {"rows": search_rows, "distinct": search_keys},
        "text_collection": {"rows": text_rows, "distinct": text_keys},
        "lost": args.rows - min(search_keys, text_keys),
        "doubled": (search_rows - search_keys) + (text_rows - text_keys),
        "reader_observations": len(during),
        "reader_saw_part_of_a_batch": len(partial),
        "reader_saw_a_row_without_its_text": len(textless),
        "machine": machine(),
    }
    write_json(
        out / f"milvus_faults_{args.rows}_{args.signal}.json", result
    )  # before the stop, which may fail
    index.close()
    server.stop()
    log(str({k: v for k, v in result.items() if k != "machine"}))
    return 0 if result["lost"] == 0 and result["doubled"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
