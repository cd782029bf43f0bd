"""`explorer mcp --http`: the real server process on 127.0.0.1 driven by the MCP SDK's streamable HTTP client."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import REPO, write_notes

TOKEN = "test-token-0123456789abcdef"
NOTES = {
    "Coffee/espresso.md": "# Espresso\n\n## Grind\n\nA fine grind slows the shot; aim for 25-30 seconds.\n",
    "Pets/hamster.md": "---\ntags: [pets]\n---\n# Hamster care\n\nA Syrian hamster needs a 30 cm wheel and deep bedding.\n",
    "Travel/kyoto.md": "# Kyoto\n\nTemples, moss gardens and the Philosopher's Path in autumn.\n",
}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}


def _env(token: str | None) -> dict[str, str]:
    env = {
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_WAIT_POLICY": "PASSIVE",
        "PATH": os.environ.get("PATH", ""),
    }
    if os.environ.get("EXPLORER_MODEL_CACHE"):
        env["EXPLORER_MODEL_CACHE"] = os.environ["EXPLORER_MODEL_CACHE"]
    if token is not None:
        env["EXPLORER_MCP_TOKEN"] = token
    return env


@contextmanager
def serving(
    vault: Path, *args: str, token: str | None = TOKEN, address: str = "127.0.0.1:0"
) -> Iterator[str]:
    """The URL of a real `explorer mcp --http` process on a free port; the process is stopped after."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "explorer", "mcp", str(vault), "--http", address, "--no-embeddings", *args],
        env=_env(token),
        cwd=str(vault),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        lines: queue.Queue[bytes] = queue.Queue()

        def drain() -> None:  # read to the end: a full pipe would block the server
            for line in proc.stderr:
                lines.put(line)
            lines.put(b"")

        threading.Thread(target=drain, daemon=True).start()
        url, seen = None, b""
        while url is None:
            line = lines.get(timeout=60)
            seen += line
            if not line:
                break
            if b"MCP over HTTP at " in line:
                url = line.split(b" at ", 1)[1].split()[0].decode()
        assert url, f"server did not start: {seen.decode(errors='replace')}"
        yield url
    finally:
        proc.terminate()
        try:
            assert proc.wait(timeout=20) == 0  # SIGTERM: a clean stop, index closed
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.stderr.close()


@pytest.fixture(scope="module")
def writer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """One `explorer mcp --http --allow-write` with the token, on a vault of NOTES, and that vault: shared
    by the tests that need no other options (a start costs ~3 s of CPU); what each writes goes under
    its own user folders. Its clean stop is checked when the module ends."""
    vault = write_notes(tmp_path_factory.mktemp("writer") / "vault", NOTES)
    with serving(vault, "--allow-write") as url:
        yield url, vault


def client(url: str, token: str | None = TOKEN) -> Any:
    """An SDK client over streamable HTTP, with the bearer token; use as `async with client(url) as (c, _)`."""

    class _Both:
        async def __aenter__(self) -> Any:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            self.http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120))
            await self.http.__aenter__()
            self.client = Client(streamable_http_client(url, http_client=self.http))
            return await self.client.__aenter__()

        async def __aexit__(self, *exc: Any) -> None:
            try:
                await self.client.__aexit__(*exc)
            finally:
                await self.http.__aexit__(*exc)

    return _Both()


def _payload(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


def _run(coro: Any, timeout: float = 120) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=timeout))


def raw_post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    """One POST with these headers (a given Host replaces the real one); the status and the body."""
    parts = httpx2.URL(url)
    conn = http.client.HTTPConnection(parts.host, parts.port, timeout=30)
    try:
        skip_host = "Host" in headers
        conn.putrequest("POST", parts.path, skip_host=skip_host, skip_accept_encoding=True)
        for name, value in {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Content-Length": str(len(body)),
            **headers,
        }.items():
            conn.putheader(name, value)
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_token_required_and_dns_rebinding_refused(writer: tuple[str, Path]) -> None:
    body = json.dumps(INIT).encode()
    url, _vault = writer
    port = httpx2.URL(url).port
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert raw_post(url, body, {})[0] == 401
    assert raw_post(url, body, {"Authorization": "Bearer wrong-token-0123456789abcdef"})[0] == 401
    assert raw_post(url, body, {"Authorization": TOKEN})[0] == 401  # the scheme is part of it
    status, reply = raw_post(url, body, auth)
    assert status == 200, reply
    # A page at http://evil.example whose name now resolves to 127.0.0.1: its Host, its Origin.
    assert raw_post(url, body, {**auth, "Host": f"evil.example:{port}"})[0] == 421
    assert raw_post(url, body, {**auth, "Origin": "http://evil.example"})[0] == 403
    assert (
        raw_post(url, body, {**auth, "Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"})[0]
        == 200
    )

    async def session() -> None:
        async with client(url) as c:
            tools = {t.name for t in (await c.list_tools()).tools}
            assert tools == {
                "search",
                "recent",
                "find",
                "get_context",
                "explain",
                "why_not",
                "stats",
                "remember",
            }
            found = _payload(
                await c.call_tool("search", {"query": "hamster wheel", "k": 3, "mode": "lexical"})
            )
            assert found["results"][0]["document_path"] == "Pets/hamster.md"
        # The SDK client without the token cannot even start a session: the server's refusal
        # comes back as the SDK's error, inside the task groups the client runs.
        with pytest.raises(ExceptionGroup) as refused:
            async with client(url, token=None) as c:
                await c.list_tools()
        assert refused.group_contains(MCPError)

    _run(session())


def test_loopback_without_token_still_checks_host_and_origin(tmp_path: Path) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)
    body = json.dumps(INIT).encode()
    with serving(vault, token=None) as url:
        port = httpx2.URL(url).port
        assert raw_post(url, body, {})[0] == 200
        assert raw_post(url, body, {"Host": f"attacker.example:{port}"})[0] == 421
        assert raw_post(url, body, {"Origin": "https://attacker.example"})[0] == 403

        async def session() -> None:
            async with client(url, token=None) as c:
                assert "remember" not in {t.name for t in (await c.list_tools()).tools}

        _run(session())


def test_every_interface_takes_the_allowed_names_only(tmp_path: Path) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)
    body = json.dumps(INIT).encode()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with serving(vault, "--allow-host", "memory.team.example", address="0.0.0.0:0") as named:
        assert named.startswith("http://memory.team.example:")
        port = httpx2.URL(named).port
        url = f"http://127.0.0.1:{port}/mcp"
        assert raw_post(url, body, auth)[0] == 200
        assert raw_post(url, body, {**auth, "Host": f"memory.team.example:{port}"})[0] == 200
        assert raw_post(url, body, {**auth, "Host": f"evil.example:{port}"})[0] == 421
        assert raw_post(url, body, {"Host": f"memory.team.example:{port}"})[0] == 401


@pytest.mark.parametrize(
    ("address", "token", "message"),
    [
        ("nonsense", TOKEN, "give HOST:PORT"),
        ("127.0.0.1:99999", TOKEN, "outside 0-65535"),
        ("example.com:8080", TOKEN, "not an IP address"),
        ("0.0.0.0:0", None, "without a token"),
        ("0.0.0.0:0", TOKEN, "--allow-host"),
        ("127.0.0.1:0", "short", "at least 16"),
        ("192.0.2.7:0", TOKEN, "not an address of this machine"),
    ],
)
def test_setup_failures_are_one_line_and_exit_2(
    tmp_path: Path, address: str, token: str | None, message: str
) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)
    proc = subprocess.run(
        [sys.executable, "-m", "explorer", "mcp", str(vault), "--http", address, "--no-embeddings"],
        env=_env(token),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr


def test_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "explorer", "mcp", str(vault), "--http", f"127.0.0.1:{port}"],
            env=_env(TOKEN),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"explorer: cannot listen on 127.0.0.1:{port}: the port is in use"


def test_several_clients_at_once_with_writes_lose_nothing(writer: tuple[str, Path]) -> None:
    url, vault = writer
    clients, rounds = 6, 8

    async def agent(url: str, n: int) -> list[str]:
        written = []
        async with client(url) as c:
            for i in range(rounds):
                word = f"zebra{n}x{i}"
                made = _payload(
                    await c.call_tool(
                        "remember",
                        {"text": f"The code word is {word}.", "title": f"Note {n} {i}", "user": f"agent{n}"},
                    )
                )
                written.append((word, made["path"]))
                hits = _payload(
                    await c.call_tool("search", {"query": "hamster wheel", "k": 3, "mode": "lexical"})
                )
                assert hits["results"][0]["document_path"] == "Pets/hamster.md"
                ctx = _payload(await c.call_tool("get_context", {"target": "Travel/kyoto.md", "window": 200}))
                assert "moss gardens" in ctx["text"]
        return written

    async def everyone(url: str) -> None:
        done = await asyncio.gather(*(agent(url, n) for n in range(clients)))
        paths = [p for w in done for _, p in w]
        assert len(set(paths)) == clients * rounds  # no write lost or overwritten
        async with client(url) as c:
            for word, path in (x for w in done for x in w):
                hits = _payload(await c.call_tool("search", {"query": word, "k": 1, "mode": "lexical"}))
                assert hits["results"][0]["document_path"] == path, word

    _run(everyone(url), timeout=240)
    assert len(list((vault / "Users").glob("agent*/turns/turn_*/context.md"))) == clients * rounds


def test_a_bad_client_leaves_the_others_unaffected(writer: tuple[str, Path]) -> None:

    def vandal(url: str) -> list[int]:
        """Garbage, oversized bodies, huge arguments and a connection dropped mid-call."""
        parts = httpx2.URL(url)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        codes = [
            raw_post(url, b"\x00\xff{not json", auth)[0],
            raw_post(url, b'{"jsonrpc": "2.0", "id": 1, "method": 42}', auth)[0],
            raw_post(url, b"[" * 100_000, auth)[0],
            raw_post(url, b" " * (2 * 1024 * 1024), auth)[0],
        ]
        for cut in (
            10,
            200,
        ):  # headers, then part of the body, then gone; then the whole call, gone before the answer
            call = json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 7,
                    "method": "tools/call",
                    "params": {"name": "search", "arguments": {"query": "hamster " * 5000}},
                }
            ).encode()
            with socket.create_connection((parts.host, parts.port), timeout=10) as s:
                s.sendall(
                    f"POST {parts.path} HTTP/1.1\r\nHost: {parts.host}:{parts.port}\r\n"
                    f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                    f"Accept: application/json, text/event-stream\r\nContent-Length: {len(call)}\r\n\r\n".encode()
                    + call[: cut if cut < 200 else len(call)]
                )
        return codes

    async def good(url: str) -> int:
        answered = 0
        async with client(url) as c:
            for _ in range(15):
                hits = _payload(
                    await c.call_tool("search", {"query": "fine grind", "k": 2, "mode": "lexical"})
                )
                assert hits["results"][0]["document_path"] == "Coffee/espresso.md"
                answered += 1
        return answered

    async def huge(url: str) -> None:
        async with client(url) as c:
            big = _payload(
                await c.call_tool("search", {"query": "kyoto moss " * 50_000, "k": 2, "mode": "lexical"})
            )
            assert big["results"][0]["document_path"] == "Travel/kyoto.md"  # cut to the query limit, answered
            bad = await c.call_tool("get_context", {"target": "x" * 500_000, "window": 10**9})
            assert bad.is_error
            bad = await c.call_tool("remember", {"text": "y" * 200_000})
            assert bad.is_error and "limit" in bad.content[0].text

    async def together(url: str) -> None:
        loop = asyncio.get_running_loop()
        vandalism = loop.run_in_executor(None, vandal, url)
        answered, _, codes = await asyncio.gather(good(url), huge(url), vandalism)
        assert answered == 15
        assert all(400 <= c < 500 for c in codes), codes
        assert codes[3] == 413
        assert await good(url) == 15  # still serving afterwards

    _run(together(writer[0]), timeout=240)


def test_allow_host_without_http_is_refused(tmp_path: Path) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)
    proc = subprocess.run(
        [sys.executable, "-m", "explorer", "mcp", str(vault), "--allow-host", "memory.example"],
        env=_env(TOKEN),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2 and "--allow-host goes with --http" in proc.stderr
