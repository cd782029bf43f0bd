"""What a process's open asks of a Milvus Lite engine (a behaviour, not a timing): a one-shot command at team
scale must not read every row of its vault, nor ping the engine into closing a long call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import write_notes

pymilvus = pytest.importorskip("pymilvus", reason="the milvus extra is not installed")

from explorer.engine import make_pipeline, new_index  # noqa: E402
from explorer.index.milvus import MilvusIndex  # noqa: E402
from test_milvus import NOTES, milvus_settings  # noqa: E402


def _open(vault: Path, db: str, cache: Path) -> MilvusIndex:
    index = new_index(vault, milvus_settings(db, cache, embeddings=False))
    assert isinstance(index, MilvusIndex)
    index.open()
    return index


def _rows(index: MilvusIndex) -> dict[str, str]:
    rows = index.engine.call(
        "q",
        lambda c: c.query(
            index.engine.collection,
            filter=f'vault == "{index.vault_name}"',
            output_fields=["node_id", "content_hash"],
            limit=1000,
        ),
    )
    return {r["node_id"]: r["content_hash"] for r in rows}


def test_an_open_reads_the_vaults_rows_only_when_its_last_sync_left_another_state(tmp_path: Path) -> None:
    """The row state a sync leaves is named by a digest in the statistics table: the next process's open
    compares it with its own index and reads every row of its vault only when they differ."""
    vault = write_notes(tmp_path / "vault", NOTES)
    db = str(tmp_path / "engine" / "milvus.db")
    (tmp_path / "engine").mkdir()
    first = _open(vault, db, tmp_path / "cache")
    try:
        assert first.engine.calls.get("read", 0) == 1  # a new collection: its rows read once
        written = _rows(first)
        assert set(written) == set(first.shards)
    finally:
        first.close()

    again = _open(vault, db, tmp_path / "cache")
    try:
        assert again.engine.calls.get("read", 0) == 0  # nothing changed: no row read
        assert _rows(again) == written
    finally:
        again.close()

    # A note changed and one gone while no writer ran: the digest differs, the rows are read and brought along.
    (vault / "astro/moon.md").write_text("# The Moon\n\nA quibbly crater rim.\n", encoding="utf-8")
    (vault / "cook/bread.md").unlink()
    third = _open(vault, db, tmp_path / "cache")
    try:
        assert third.engine.calls.get("read", 0) == 1
        now = _rows(third)
        assert set(now) == set(third.shards)
        assert not any(nid.startswith("cook/bread.md") for nid in now)
        assert now != written
        pipe = make_pipeline(third, third.settings)
        assert pipe.search("quibbly").results[0].document_path == "astro/moon.md"
    finally:
        third.close()

    fourth = _open(vault, db, tmp_path / "cache")
    try:
        assert fourth.engine.calls.get("read", 0) == 0
        assert _rows(fourth) == now
    finally:
        fourth.close()


def test_the_client_pings_no_more_often_than_a_milvus_lite_server_allows(tmp_path: Path) -> None:
    """A gRPC server with the core's defaults (Milvus Lite's) takes one keepalive ping per 5 minutes on a
    connection it sends nothing on, and closes it (GOAWAY too_many_pings) at the third too many: pymilvus's
    10 s pings cut every call longer than ~40 s, which pymilvus then sent again beside the first."""
    (tmp_path / "engine").mkdir()
    index = _open(
        write_notes(tmp_path / "vault", NOTES), str(tmp_path / "engine" / "milvus.db"), tmp_path / "c"
    )
    try:
        handler = index.engine.client()._get_connection()  # noqa: SLF001 - the options the channel was made with
        options = handler._grpc_options  # noqa: SLF001
        assert options["grpc.keepalive_time_ms"] >= 300_000
        assert options["grpc.keepalive_permit_without_calls"] is False
    finally:
        index.close()


def test_a_write_whose_answer_was_lost_is_not_sent_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An insert that landed but whose answer never came (the engine stopped at that moment) raises; the
    next sync reads the rows first instead of inserting them again (a Milvus Standalone keeps both copies),
    also when the fault comes in a sync that was itself a retry after a fault."""
    from explorer.index.milvus import BackendError

    monkeypatch.setattr("explorer.index.milvus.index.UPSERT_BATCH", 10)
    notes = {f"n{i:03d}.md": f"# Note {i}\n\nword{i} and a shared plover line.\n" for i in range(40)}
    (tmp_path / "engine").mkdir()
    index = _open(
        write_notes(tmp_path / "vault", notes), str(tmp_path / "engine" / "milvus.db"), tmp_path / "c"
    )
    try:
        write_notes(
            tmp_path / "vault", {f"m{i:03d}.md": f"# More {i}\n\nmore{i} plover.\n" for i in range(30)}
        )
        real = index.engine.call

        def lost_answer(what: str, fn: Any) -> Any:
            out = real(what, fn)
            if what == "insert":
                raise BackendError("milvus at test: insert failed: unreachable")
            return out

        monkeypatch.setattr(index.engine, "call", lost_answer)
        index.refresh()  # the batch's sync: its first insert lands, its answer is lost (kept for the retry)
        with pytest.raises(BackendError):
            index.sync()  # a retry: the rows read again, the next insert lands, its answer lost too
        monkeypatch.setattr(index.engine, "call", real)
        reads = index.engine.calls.get("read", 0)
        index.sync()
        # Milvus Lite keeps one row per key whatever was inserted twice (a Standalone keeps both): what shows
        # the fault was met is that the rows were read before anything was sent again.
        assert index.engine.calls.get("read", 0) == reads + 1
        rows = index.engine.call(
            "q",
            lambda c: c.query(
                index.engine.collection, filter='vault != ""', output_fields=["pk"], limit=1000
            ),
        )
        keys = [r["pk"] for r in rows]
        assert len(keys) == len(set(keys)) == len(index.shards) == 70
    finally:
        index.close()
