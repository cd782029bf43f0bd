"""Faults at scale on a real `milvus-lite server` process: the engine stopped (SIGKILL, SIGTERM) in the middle
of a writer's ingest of a few thousand rows, then started again: nothing lost, nothing doubled, the writer
resumes; a reader during the ingest sees whole batches only, each shard with its text row."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from conftest import write_notes

pytest.importorskip("pymilvus", reason="the milvus extra is not installed")

from explorer.engine import new_index
from explorer.index.milvus import BackendError, MilvusIndex, wait_until
from explorer.index.milvus.engine import UPSERT_BATCH
from test_milvus import MILVUS_LITE, LiteServer, milvus_settings

NOTES = 2000
"""Rows the writer ingests (one shard per note): four batches of `UPSERT_BATCH`."""
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda".split()


def _notes(n: int) -> dict[str, str]:
    return {
        f"n/{i:05d}.md": f"# Note {i}\n\n"
        + " ".join(WORDS[(i + j) % len(WORDS)] for j in range(40))
        + f" word{i}\n"
        for i in range(n)
    }


def _pks(index: MilvusIndex, name: str) -> list[str]:
    def read(c) -> list[str]:
        out: list[str] = []
        it = c.query_iterator(name, batch_size=4000, filter="", output_fields=["pk"])
        try:
            while page := it.next():
                out += [r["pk"] for r in page]
        finally:
            it.close()
        return out

    return index.engine.call("read", read)


def _count(c, name: str) -> int:
    return int(c.query(name, filter="", output_fields=["count(*)"])[0]["count(*)"])


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_an_engine_stopped_mid_ingest_loses_and_doubles_nothing(tmp_path: Path, how: signal.Signals) -> None:
    if not MILVUS_LITE.exists():
        pytest.skip("milvus-lite server is not installed")
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    server = LiteServer(tmp_path / "engine")
    server.start()
    vault = write_notes(tmp_path / "vault", _notes(NOTES))
    index = new_index(
        vault, milvus_settings(server.uri, tmp_path / "cache", vault_name="v", embeddings=False)
    )
    assert isinstance(index, MilvusIndex)
    stopped = threading.Event()

    def stop_mid_ingest() -> None:
        while index.engine.calls.get("insert", 0) < 2 and server.proc is not None:
            time.sleep(0.005)
        assert server.proc is not None
        server.proc.send_signal(how)
        server.proc.wait(timeout=60)
        server.proc = None
        stopped.set()

    killer = threading.Thread(target=stop_mid_ingest, daemon=True)
    killer.start()
    try:
        with pytest.raises(BackendError, match=r"127\.0\.0\.1"):
            index.open()  # a command's open syncs and meets the fault: one line naming the URI
        assert stopped.wait(60)
        assert index.stats().shards == NOTES  # the vault's own index is whole
        server.start()

        def resumed() -> bool:
            try:
                index.sync()
            except BackendError:
                return False  # the server is still starting
            return True

        assert wait_until(resumed, 300)
        assert index.behind == 0
        for name in (index.engine.collection, index.engine.text_collection):
            pks = _pks(index, name)
            assert len(pks) == NOTES and len(set(pks)) == NOTES, (name, len(pks), len(set(pks)))
        assert index.sync() == 0  # nothing left to send
    finally:
        index.close()
        server.stop()


def test_a_reader_during_ingest_sees_whole_batches_only(tmp_path: Path) -> None:
    """Each batch of `UPSERT_BATCH` rows reaches a reader whole (an engine insert is one write), and a
    shard's text row before its search row, so a reader never finds a row it cannot show."""
    if not MILVUS_LITE.exists():
        pytest.skip("milvus-lite server is not installed")
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    from pymilvus import MilvusClient

    server = LiteServer(tmp_path / "engine")
    server.start()
    vault = write_notes(tmp_path / "vault", _notes(NOTES))
    index = new_index(
        vault, milvus_settings(server.uri, tmp_path / "cache", vault_name="v", embeddings=False)
    )
    seen: list[tuple[int, int]] = []
    done = threading.Event()
    reader = MilvusClient(uri=server.uri)
    name = index.engine.collection  # type: ignore[attr-defined]

    def watch() -> None:
        while not done.is_set():
            try:
                if not (reader.has_collection(name) and reader.has_collection(name + "_text")):
                    continue
                reader.load_collection(name)
                reader.load_collection(name + "_text")
                search = _count(reader, name)
                text = _count(reader, name + "_text")  # read after: it holds at least as many
                seen.append((search, text))
            except Exception:  # noqa: BLE001 - the collection is being created
                time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        index.open()
        done.set()
        watcher.join(30)
        assert _count(reader, name) == NOTES
        assert any(0 < s < NOTES for s, _ in seen), seen  # the reader did look during the ingest
        assert all(s % UPSERT_BATCH == 0 or s == NOTES for s, _ in seen), seen
        assert all(t >= s for s, t in seen), seen
    finally:
        done.set()
        reader.close()
        index.close()
        server.stop()


def test_a_batch_whose_answer_was_lost_is_not_sent_twice(tmp_path: Path) -> None:
    """A fault after the engine took a batch (its answer lost with the connection): the writer's retry
    reads the engine's rows again and sends only what the engine lacks, never inserting a row twice
    (Milvus keeps a second insert of the same key as a second row until compaction)."""
    if not MILVUS_LITE.exists():
        pytest.skip("milvus-lite server is not installed")
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    server = LiteServer(tmp_path / "engine")
    server.start()
    vault = write_notes(tmp_path / "vault", _notes(10))
    index = new_index(
        vault, milvus_settings(server.uri, tmp_path / "cache", vault_name="v", embeddings=False)
    )
    assert isinstance(index, MilvusIndex)
    try:
        index.open()
        index.retry_seconds = 0.2
        engine, sent = index.engine, []
        call = engine.call

        def answer_lost(what, fn):
            out = call(what, fn)
            sent.append(what)
            if what == "insert" and sent.count("insert") == 1:
                raise engine.fail("insert failed: unreachable")  # the rows landed; the answer did not
            return out

        engine.call = answer_lost  # type: ignore[method-assign]
        write_notes(vault, _notes(30))
        index.refresh(
            [f"n/{i:05d}.md" for i in range(10, 30)]
        )  # the batch reaches the engine, then the fault
        assert wait_until(lambda: not index.engine_fault and index.behind == 0, 60), index.engine_fault
        assert sent.count("insert") == 1 and sent.count("upsert") <= 2, sent  # the retry sent no row again
        assert len(_pks(index, engine.collection)) == 30
    finally:
        index.close()
        server.stop()
