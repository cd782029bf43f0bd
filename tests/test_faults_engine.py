"""A Milvus engine that stops and comes back, with real processes: one `milvus-lite server` for the
module, stopped and started again by each test (each test leaves it running).

- read-your-writes and fresh answers across an outage: a note written while the engine is down is
  found during the outage (from the vault's own index, said plainly), before the kept changes are
  replayed, and after (never an answer kept from before);
- an app started while the engine is down answers from the vault's own index, and from the engine
  once it is back;
- `explorer watch` + one-shot `explorer search` and `explorer mcp` + the MCP SDK client: the same
  through the real entry points, and nothing but Explorer's own lines on the terminal.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import REPO, write_notes

pytest.importorskip("pymilvus", reason="the milvus extra is not installed")

from explorer.engine import make_pipeline, new_index
from explorer.index.milvus import BackendError, MilvusIndex, wait_until
from test_milvus import MILVUS_LITE, NOTES, LiteServer, milvus_settings

COMET = {"astro/comet.md": "# Comets\n\nA quuxtail of ice points away from the sun.\n"}
OWN_INDEX = "answered from this vault's own index"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiteServer]:
    if not MILVUS_LITE.exists():
        pytest.skip("milvus-lite server is not installed")
    lite = LiteServer(tmp_path_factory.mktemp("engine"))
    lite.start()
    try:
        yield lite
    finally:
        lite.stop()


@pytest.fixture()
def running(server: LiteServer) -> Iterator[LiteServer]:
    """The module's server, running at the start of the test and again at its end."""
    if server.proc is None:
        server.start()
    yield server
    if server.proc is None:
        server.start()


def _env(tmp_path: Path, uri: str, collection: str, **more: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "EXPLORER_INDEX_BACKEND": "milvus",
        "EXPLORER_INDEX_MILVUS_URI": uri,
        "EXPLORER_INDEX_COLLECTION": collection,
        "EXPLORER_INDEX_CACHE_DIR": str(tmp_path / "cache"),
        "EXPLORER_INDEX_EMBEDDINGS": "false",
        **more,
    }


def test_read_your_writes_and_fresh_answers_across_an_outage(running: LiteServer, tmp_path: Path) -> None:
    """A search kept from before the outage, one asked during it, one asked after the engine is back but
    before the kept changes are replayed, and one after the replay: each sees the note written during the
    outage, and only the answers asked while the engine lacked it say they came from the vault's own index."""
    vault = write_notes(tmp_path / "vault", NOTES)
    index = new_index(
        vault, milvus_settings(running.uri, tmp_path / "cache", collection="rw", embeddings=False)
    )
    assert isinstance(index, MilvusIndex)
    try:
        index.open()
        index.retry_seconds = 3600.0  # the replay is the test's to run
        pipe = make_pipeline(index, index.settings)
        assert not pipe.search("quuxtail").results  # kept: a search asked again at this version reads it
        running.stop()
        write_notes(vault, COMET)
        index.refresh(["astro/comet.md"])
        assert running.uri in index.engine_fault
        down = pipe.search("quuxtail")
        assert down.results[0].document_path == "astro/comet.md"
        assert running.uri in down.warnings[0] and OWN_INDEX in down.warnings[0]
        running.start()
        early = pipe.search("quuxtail")  # the engine is back, without the note yet
        assert early.results[0].document_path == "astro/comet.md"

        def replayed() -> bool:  # the replay lands (the client may take a few tries to connect again)
            try:
                index.sync()
            except BackendError:
                return False
            return True

        assert wait_until(replayed, 60), index.engine_fault
        asked = index.engine.calls.get("search", 0)
        after = pipe.search("quuxtail")
        assert after.results[0].document_path == "astro/comet.md" and not after.mode.cached
        assert not any(OWN_INDEX in w for w in after.warnings)
        assert index.engine.calls.get("search", 0) > asked  # the engine answered it
        assert pipe.search("quuxtail").mode.cached  # and now that answer is kept
    finally:
        index.close()


def test_an_app_started_while_the_engine_is_down_answers_from_the_vault(
    running: LiteServer, tmp_path: Path, embedder
) -> None:
    """The app on a Milvus-backed vault, opened while the engine is down: its searches show the vault's
    own results and say the engine is unreachable (naming the URI); once the engine is back and holds the
    vault, the engine answers and the note is gone."""
    from conftest import SIZE, make_app, quiet_settings, search, wait_for
    from explorer.tui.widgets.results import ResultsSummary

    vault = write_notes(tmp_path / "vault", NOTES)
    settings = quiet_settings(
        **{
            "index.backend": "milvus",
            "index.milvus_uri": running.uri,
            "index.collection": "app",
            "index.cache_dir": str(tmp_path / "cache"),
        }
    )
    running.stop()

    async def run() -> None:
        app = make_app(vault, embedder, tmp_path, settings=settings)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: bool(getattr(app.index, "engine_fault", "")), timeout=90)
            shown = await search(app, pilot, "lunar craters")
            assert shown.results and shown.results[0].document_path == "astro/moon.md"
            summary = str(app.main_screen.query_one(ResultsSummary).content)
            assert running.uri in summary and OWN_INDEX in summary
            running.start()
            index = app.index
            assert isinstance(index, MilvusIndex)
            await wait_for(pilot, lambda: index.engine_current and not index.engine_fault, timeout=120)
            asked = index.engine.calls.get("search", 0)
            shown = await search(app, pilot, "black hole")
            assert shown.results[0].document_path == "astro/holes.md"
            assert index.engine.calls.get("search", 0) > asked
            assert running.uri not in str(app.main_screen.query_one(ResultsSummary).content)

    asyncio.run(run())


#: A line of `explorer watch`'s own: a timed event, or a message of Explorer's.
OWN_LINE = re.compile(r"^(\d\d:\d\d:\d\d  |explorer: )")


def test_watch_and_one_shot_searches_across_an_outage(running: LiteServer, tmp_path: Path) -> None:
    """`explorer watch` on a Milvus-backed vault and one-shot `explorer search`es it answers: the note
    written while the engine is down is found during the outage (said plainly), and after the engine is
    back and says the collection is up to date, from the engine (not a kept answer). The watch prints
    only its own lines: gRPC's tracer is turned on (`GRPC_TRACE=http`, which writes a line for every
    frame, as the GOAWAY line of a stopping engine), and none of its lines reaches the terminal."""
    vault = write_notes(tmp_path / "vault", NOTES)
    env = _env(tmp_path, running.uri, "watch", GRPC_TRACE="http")
    env.pop("GRPC_VERBOSITY", None)
    watch = subprocess.Popen(
        [sys.executable, "-m", "explorer", "watch", str(vault)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines: list[str] = []
    assert watch.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(watch.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()

    def said(text: str, seconds: float = 120) -> bool:
        return wait_until(lambda: any(text in line for line in lines), seconds)

    def search(query: str) -> dict:
        out = subprocess.run(
            [sys.executable, "-m", "explorer", "search", "-V", str(vault), "--json", query],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        assert not out.stderr.strip(), out.stderr
        return json.loads(out.stdout)

    try:
        assert said("watching"), lines
        assert not search("quuxtail")["results"]
        running.stop()
        write_notes(vault, COMET)
        assert said("astro/comet.md") and said("changes are kept"), lines
        down = search("quuxtail")
        assert down["results"][0]["document_path"] == "astro/comet.md"
        assert running.uri in down["warnings"][0] and OWN_INDEX in down["warnings"][0]
        running.start()
        assert said("back; the collection is up to date"), lines
        back = search("quuxtail")
        assert back["results"][0]["document_path"] == "astro/comet.md"
        assert not back["mode"]["cached"] and not any(OWN_INDEX in w for w in back["warnings"])
    finally:
        watch.send_signal(signal.SIGINT)
        try:
            watch.wait(timeout=60)
        except subprocess.TimeoutExpired:
            watch.kill()
            watch.wait(timeout=30)
        reader.join(10)
    foreign = [line for line in lines if line.strip() and not OWN_LINE.match(line)]
    assert not foreign, foreign[:5]


def test_an_agent_reads_its_writes_across_an_outage(
    running: LiteServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`explorer mcp` on a Milvus-backed vault (served in this process), driven by the MCP SDK client:
    a note written while the engine is down is found by the agent's next searches (said plainly), and
    once the server says the collection is up to date, found at once by the engine: no empty answer
    kept from the outage."""
    from inproc import mcp_client

    vault = write_notes(tmp_path / "vault", NOTES)
    for name, value in _env(tmp_path, running.uri, "mcp").items():  # the settings `explorer mcp` reads
        if name.startswith("EXPLORER_"):
            monkeypatch.setenv(name, value)
    said: list[str] = []  # what `explorer mcp` prints on stderr

    async def agent() -> None:
        async def search(query: str) -> dict:
            got = await client.call_tool("search", {"query": query, "mode": "lexical", "k": 3})
            assert not got.is_error, got.content
            return json.loads(got.content[0].text)

        def logged(text: str) -> bool:
            return any(text in line for line in said)

        async def until(check, seconds: float = 120) -> None:
            end = time.monotonic() + seconds
            while not await check():
                assert time.monotonic() < end, said
                await asyncio.sleep(0.3)

        async with mcp_client(vault, on_message=said.append) as client:
            assert not (await search("quuxtail"))["results"]
            running.stop()
            write_notes(vault, COMET)

            async def found() -> bool:
                # Once the server's watcher has read the note and a search has met the engine
                # gone (before that, the note is answered from the vault's own index as a batch
                # on its way, with nothing to say).
                res = await search("quuxtail")
                return bool(res["results"]) and OWN_INDEX in json.dumps(res)

            await until(found)
            down = await search("quuxtail")
            assert down["results"][0]["document_path"] == "astro/comet.md"
            assert running.uri in json.dumps(down) and OWN_INDEX in json.dumps(down)
            assert logged("changes are kept")
            running.start()

            async def back() -> bool:
                return logged("back; the collection is up to date")

            await until(back)
            after = await search("quuxtail")
            assert after["results"][0]["document_path"] == "astro/comet.md"
            assert OWN_INDEX not in json.dumps(after)

    asyncio.run(agent())
