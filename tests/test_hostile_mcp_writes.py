"""Hostile input on the MCP writes and on why-not, through the real entry points: the MCP SDK client
against `explorer mcp` (served in process over the SDK's in-memory transport: tests/inproc.py),
and `explorer why-not` / `explorer search` (their main(), or a process where a memory limit is the
point), with real symlinks, fifos and sockets.

- `remember` never writes (or reads, or copies) outside the vault through a symbolic link, whatever
  the reading settings say;
- a memory holding control characters (a NUL) is searchable once it answers success, and appending
  one never makes the note's earlier memories unsearchable;
- a why-not query is bounded (length, number of filters) before any work, on every surface;
- why-not copes with named pipes and sockets in the vault;
- a tool error for a huge argument names the argument and its size instead of quoting it.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import REPO, write_notes
from tests.inproc import bounded, mcp_client, run_cli

NOTES = {
    "Pets/hamster.md": "# Hamster\n\nA Syrian hamster needs a 30 cm wheel and deep bedding.\n",
    "Travel/kyoto.md": "# Kyoto\n\nTemples, moss gardens and the Philosopher's Path in autumn.\n",
    "Coffee/espresso.md": "---\ntags: [coffee]\n---\n# Espresso\n\nA fine grind slows the shot.\n",
}
SECRET = "# Secret\n\nThe launch code is walrus-umbrella-42.\n"


def _server(vault: Path, *extra: str) -> Any:
    """A client of `explorer mcp VAULT --no-embeddings EXTRA...`."""
    return mcp_client(vault, "--no-embeddings", *extra)


def _payload(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text[:2000]
    return json.loads(result.content[0].text)


def _error(result: Any) -> str:
    assert result.is_error, result.content[0].text[:2000]
    return result.content[0].text


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=240))


def _cli(*args: str, memory_mb: int, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`explorer ARGS --no-embeddings` as a process under `memory_mb` MB of address space."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))

    return subprocess.run(
        [sys.executable, "-m", "explorer", *args, "--no-embeddings"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        timeout=timeout,
        preexec_fn=limit,
    )


def _cli_here(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`explorer ARGS --no-embeddings` through its main() in this process: (exit code, stdout, stderr)."""
    return run_cli(capsys, *args, "--no-embeddings")


def _tree(folder: Path) -> dict[str, bytes]:
    """Every regular file under `folder` with its bytes (links neither listed nor followed)."""
    out = {}
    for top, _dirs, files in os.walk(folder):
        for name in files:
            p = Path(top) / name
            if p.is_file() and not p.is_symlink():
                out[p.relative_to(folder).as_posix()] = p.read_bytes()
    return out


async def _found(client: Client, query: str) -> list[str]:
    res = _payload(await client.call_tool("search", {"query": query, "mode": "lexical", "k": 10}))
    return [r["document_path"] for r in res["results"]]


# -- 1. remember never writes through a symbolic link -------------------------------------------
@pytest.mark.parametrize("follow_external", [False, True])
def test_remember_never_writes_or_reads_outside_the_vault_through_a_link(
    tmp_path: Path, follow_external: bool
) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)
    outside = tmp_path / "outside"
    write_notes(outside, {"secret.md": SECRET, "Knowledge/keep.md": "kept\n"})
    users = vault / "Users"
    users.mkdir()
    (users / "bob").symlink_to(outside, target_is_directory=True)  # a user's folder
    (users / "alice").mkdir()
    (users / "alice" / "Knowledge").symlink_to(outside / "Knowledge", target_is_directory=True)
    (users / "carol").mkdir()
    (users / "carol" / "turns").symlink_to(outside, target_is_directory=True)
    (users / "dave" / "Knowledge").mkdir(parents=True)
    (users / "dave" / "Knowledge" / "Secret.md").symlink_to(outside / "secret.md")  # a note it appends to
    (users / "erin" / "Knowledge").mkdir(parents=True)
    before = _tree(outside)
    extra = ["--set", "vault.follow_external_symlinks=true"] if follow_external else []

    async def session() -> None:
        async with _server(vault, "--allow-write", *extra) as client:
            refused = [
                {"text": "Bob likes tea.", "user": "bob"},
                {"text": "Bob likes tea.", "user": "bob", "kind": "knowledge", "title": "Tea"},
                {"text": "Alice likes tea.", "user": "alice", "kind": "knowledge", "title": "Tea"},
                {"text": "Alice likes tea.", "user": "alice", "kind": "knowledge", "title": "keep"},
                {"text": "Carol likes tea.", "user": "carol"},
                {"text": "Dave appended this.", "user": "dave", "kind": "knowledge", "title": "Secret"},
            ]
            for args in refused:
                message = _error(await client.call_tool("remember", args))
                assert "symbolic link" in message and "not written" in message, message
                assert "walrus" not in message
            # The outside file was neither written nor copied into a note of the vault.
            assert _tree(outside) == before
            notes = {p: data for p, data in _tree(vault).items() if not p.startswith(".explorer/")}
            assert not [p for p, data in notes.items() if b"walrus" in data or b"Dave appended" in data]
            if not follow_external:
                assert await _found(client, "walrus umbrella launch code") == []

            # A real folder still takes memories, and the server answers on.
            ok = _payload(
                await client.call_tool(
                    "remember",
                    {
                        "text": "Erin's cat is called Miso.",
                        "user": "erin",
                        "kind": "knowledge",
                        "title": "Cat",
                    },
                )
            )
            assert ok["path"] == "Users/erin/Knowledge/Cat.md"
            assert ok["path"] in await _found(client, "Miso cat")

    _run(session())
    assert _tree(outside) == before


def test_remember_refuses_a_linked_users_folder_and_a_pipe_for_a_note(tmp_path: Path) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)
    outside = tmp_path / "outside"
    outside.mkdir()
    (vault / "Users").symlink_to(outside, target_is_directory=True)
    other = write_notes(tmp_path / "other", NOTES)
    (other / "Users" / "zoe" / "Knowledge").mkdir(parents=True)
    os.mkfifo(other / "Users" / "zoe" / "Knowledge" / "Pipe.md")

    async def linked() -> None:
        async with _server(vault, "--allow-write", "--user", "zoe") as client:
            for kind, title in (("turn", ""), ("knowledge", "Tea")):
                message = _error(
                    await client.call_tool(
                        "remember", {"text": "Zoe likes tea.", "kind": kind, "title": title}
                    )
                )
                assert "Users is a symbolic link" in message, message

    async def piped() -> None:
        async with _server(other, "--allow-write", "--user", "zoe") as client:
            # Reading a pipe would wait for a writer forever: refused at once.
            message = _error(
                await client.call_tool(
                    "remember", {"text": "Zoe likes tea.", "kind": "knowledge", "title": "Pipe"}
                )
            )
            assert "special file" in message, message
            assert _payload(await client.call_tool("remember", {"text": "Zoe likes green tea."}))["path"]

    _run(linked())
    assert list(outside.iterdir()) == []
    _run(piped())


# -- 2. control characters never cost a memory ----------------------------------------------------
def test_memories_with_control_characters_are_searchable_and_keep_the_others(tmp_path: Path) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)

    async def session() -> None:
        async with _server(vault, "--allow-write", "--user", "alice") as client:
            # Append after append: every memory that answered success is searchable at once.
            memories = [
                ("Milo eats tuna on Sundays.", "tuna"),
                ("Milo\x00 sleeps on the radiator.\x00", "radiator"),
                ("Milo\x1b[2J chases \x07the laser\x7f pointer\x9b.", "laser"),
                ("Milo\r\nwas adopted in \x0cMarch.\x01", "adopted"),
            ]
            for i, (text, _word) in enumerate(memories):
                wrote = _payload(
                    await client.call_tool(
                        "remember", {"text": text, "kind": "knowledge", "title": "Milo\x00 the cat\x1b"}
                    )
                )
                assert wrote["path"] == "Users/alice/Knowledge/Milo the cat.md"
                for _text, earlier in memories[: i + 1]:
                    assert await _found(client, earlier) == [wrote["path"]], (earlier, i)
            raw = (vault / wrote["path"]).read_bytes()
            assert not any(b < 0x20 and b not in (0x09, 0x0A) for b in raw)
            assert "\x9b" not in raw.decode("utf-8")

            turn = _payload(
                await client.call_tool(
                    "remember",
                    {
                        "text": "\x00Bob\x00 booked the ferry to Naoshima.",
                        "title": "Ferry\x00 trip",
                        "keywords": ["ferry\x00", "\x1bnaoshima"],
                    },
                )
            )
            assert await _found(client, "ferry Naoshima") == [turn["path"]]
            meta = json.loads((vault / turn["path"]).with_name("metadata.json").read_text(encoding="utf-8"))
            assert meta["keywords"] == ["ferry", "naoshima"] and meta["topic"] == "Ferry trip"
            assert "only control characters" in _error(
                await client.call_tool("remember", {"text": "\x00\x01\x1b"})
            )

            # A note the index skips (someone else wrote a NUL into it) is not appended to.
            skipped = vault / "Users/alice/Knowledge/Binary.md"
            skipped.write_bytes(b"# Binary\n\nold\x00 text\n")
            message = _error(
                await client.call_tool("remember", {"text": "kept?", "kind": "knowledge", "title": "Binary"})
            )
            assert "not indexed" in message and "NUL" in message, message
            assert skipped.read_bytes() == b"# Binary\n\nold\x00 text\n"

    _run(session())


# -- 4. why-not's query is bounded before any work --------------------------------------------------
def _tag_query(n: int) -> str:
    return "hamster " + " ".join(["tag:x"] * n)


def test_why_not_cli_refuses_a_huge_or_filter_heavy_query_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)
    # ~120 KB of tag: filters: on an unbounded why-not, 2.5 GB and minutes. Under 1 GB of address
    # space it must answer with one line and exit 2.
    huge = _tag_query(20_000)
    proc = _cli("why-not", huge, "hamster", "--vault", str(vault), memory_mb=1024)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert "120,007 characters" in proc.stderr and "2,000" in proc.stderr
    assert proc.stdout == ""

    many = _tag_query(100)  # 608 characters, 100 filters
    proc = _cli("why-not", many, "hamster", "--vault", str(vault), memory_mb=1024)
    assert proc.returncode == 2 and "100 filters" in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().count("\n") == 0

    # The search surface holds the same bound on filters (its length is cut at 2,000 already).
    code, _out, err = _cli_here(capsys, "search", many, "--vault", str(vault), "--local")
    assert code == 2 and "100 filters" in err, err[-2000:]

    # A query inside the bounds still gets its proof.
    code, out, err = _cli_here(
        capsys, "why-not", "hamster tag:coffee -draft", "hamster", "--vault", str(vault), "--json"
    )
    assert code == 0, err[-2000:]
    assert json.loads(out)["note"] == "Pets/hamster.md"


def test_why_not_and_search_tools_refuse_huge_queries_and_errors_name_sizes(tmp_path: Path) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)
    big = "x" * 1_000_000

    async def session() -> None:
        async with _server(vault, "--allow-write", "--user", "alice") as client:
            message = _error(
                await client.call_tool("why_not", {"query": _tag_query(170_000), "note": "hamster"})
            )
            assert "characters" in message and len(message) < 400, message[:500]
            message = _error(await client.call_tool("why_not", {"query": _tag_query(100), "note": "hamster"}))
            assert "100 filters" in message, message
            message = _error(await client.call_tool("search", {"query": _tag_query(100)}))
            assert "100 filters" in message, message

            # 6: every tool's error for a 1 MB argument names the argument and its size.
            # A search reads the first 2,000 characters of a query, and says so; the answer stays brief.
            for tool, args in (
                ("search", {"query": big}),
                ("explain", {"query": big, "target": "Pets/hamster.md"}),
            ):
                result = await client.call_tool(tool, args)
                assert not result.is_error and len(result.content[0].text) < 10_000, result.content[0].text[
                    :300
                ]
            calls = [
                ("search", {"query": "hamster", "after": big}),
                ("search", {"query": "hamster", "on": big}),
                ("recent", {"user": big}),
                ("find", {"keywords": ["hamster", big]}),
                ("get_context", {"target": big}),
                ("explain", {"query": "hamster", "target": big}),
                ("why_not", {"query": "hamster", "note": big}),
                ("why_not", {"query": big, "note": "hamster"}),
                ("remember", {"text": big}),
                ("remember", {"text": "x", "user": big}),
                ("remember", {"text": "x", "title": big, "kind": "knowledge"}),
                ("remember", {"text": "x", "keywords": [big]}),
            ]
            for tool, args in calls:
                message = _error(await client.call_tool(tool, args))
                name = next(k for k, v in args.items() if big in (v if isinstance(v, list) else [v]))
                assert len(message) < 400, (tool, name, message[:300])
                assert name in message and "1,000,000 characters" in message, (tool, name, message)
            # A long but allowed argument quoted back in an error is named with its size too.
            message = _error(await client.call_tool("search", {"query": "hamster", "after": "y" * 900}))
            assert "<after: 900 characters>" in message and len(message) < 400, message[:300]
            assert _payload(await client.call_tool("stats", {}))["notes"] == 3

    _run(session())


# -- 5. why-not on a vault with a named pipe and a socket ------------------------------------------
def test_why_not_on_a_vault_with_a_fifo_and_a_socket(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)
    os.mkfifo(vault / "pipe.md")
    os.mkfifo(vault / "Pets" / "feeder")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(vault / "Travel" / "agent.sock"))
    with bounded(120):
        try:
            # "wheel" is missing from Kyoto: its rehearsal copies the vault.
            code, out, err = _cli_here(
                capsys, "why-not", "hamster wheel", "kyoto", "--vault", str(vault), "--json"
            )
            assert code == 0, err[-2000:]
            proof = json.loads(out)
            assert proof["note"] == "Travel/kyoto.md"
            words = [c for c in proof["changes"] + proof["not_enough"] if c["kind"] == "word"]
            assert {"hamster", "wheel"} <= {c["value"] for c in words}
            assert not proof["unchecked"]

            async def session() -> None:
                async with _server(vault) as client:
                    got = _payload(
                        await client.call_tool("why_not", {"query": "hamster wheel", "note": "kyoto"})
                    )
                    tried = {c["value"] for c in got["changes"] + got["not_enough"] if c["kind"] == "word"}
                    assert {"hamster", "wheel"} <= tried

            _run(session())
        finally:
            sock.close()
