"""Several agents at once against one `explorer mcp --http` server on loopback.

    nice -n 10 python -m benchmarks.mcp_http [VAULT] [--clients 8] [--calls 200] [--solo 100]

Copies VAULT (default sample_vault) to a temporary folder, starts `explorer mcp COPY --http
127.0.0.1:0 --allow-write` with a bearer token (the real model, hybrid search), then:

1. solo: one client makes `--solo` calls of the same mix alone (the baseline of the same run);
2. together: `--clients` clients at once, `--calls` calls each, in the mix 60% `search`, 25%
   `get_context`, 15% `remember` (each remembered text holds a code word of its own);
3. afterwards every code word is searched: its note must be the first result (nothing lost).

Prints per tool n, p50, p95 (ms, client side) solo and together, the errors, the notes found
after, the wall time and calls per second; `--out FILE` keeps the raw figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, machine, offline_environment, percentile, write_json

TOKEN = "bench-token-" + "x" * 24
QUERIES = [
    "hamster wheel size",
    "how fine should I grind for espresso",
    "tag:pets bedding",
    "meteor showers this year",
    "index funds vs bonds",
    "sourdough starter feeding",
    "git rebase or merge",
    "sleep and caffeine",
    "the martian",
    "Ming dynasty northern frontier",
    "bike chain cleaning",
    "things to do in Kyoto in autumn",
]
MIX = (("search", 0.60), ("get_context", 0.25), ("remember", 0.15))


def start(vault: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The server process and its URL (a free port on 127.0.0.1)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "EXPLORER_MCP_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [sys.executable, "-m", "explorer", "mcp", str(vault), "--http", "127.0.0.1:0", "--allow-write"],
        env=env,
        cwd=str(vault),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    lines: queue.Queue[bytes] = queue.Queue()

    def drain() -> None:  # read to the end: a full pipe would block the server
        for line in proc.stderr:
            lines.put(line)
        lines.put(b"")

    threading.Thread(target=drain, daemon=True).start()
    while line := lines.get(timeout=300):
        if b"MCP over HTTP at " in line:
            return proc, line.split(b" at ", 1)[1].split()[0].decode()
    proc.kill()
    raise SystemExit("the server did not start")


class Agent:
    """One MCP session over streamable HTTP with the bearer token."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def __aenter__(self) -> Any:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        self.http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=httpx2.Timeout(60, read=600)
        )
        await self.http.__aenter__()
        self.client = Client(streamable_http_client(self.url, http_client=self.http))
        return await self.client.__aenter__()

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.client.__aexit__(*exc)
        finally:
            await self.http.__aexit__(*exc)


async def run_agent(url: str, name: str, calls: int, targets: list[str], seed: int) -> dict[str, Any]:
    """`calls` calls of the mix; latencies per tool, errors, and the (code word, path) of each remember."""
    rng = random.Random(seed)
    times: dict[str, list[float]] = {tool: [] for tool, _ in MIX}
    errors: list[str] = []
    written: list[tuple[str, str]] = []
    async with Agent(url) as client:
        for i in range(calls):
            tool = rng.choices([t for t, _ in MIX], [w for _, w in MIX])[0]
            if tool == "search":
                args: dict[str, Any] = {"query": rng.choice(QUERIES), "k": 10}
            elif tool == "get_context":
                args = {"target": rng.choice(targets), "window": 1200}
            else:
                word = f"codeword{name}n{i}"
                args = {
                    "text": f"Agent {name} notes the code word {word} in call {i}.",
                    "title": f"{name} call {i}",
                    "user": f"agent{name}",
                }
            t = time.perf_counter()
            try:
                result = await client.call_tool(tool, args)
            except Exception as exc:  # noqa: BLE001 - counted, the run goes on
                errors.append(f"{tool}: {type(exc).__name__}: {exc}")
                continue
            times[tool].append((time.perf_counter() - t) * 1000)
            if result.is_error:
                errors.append(f"{tool}: {result.content[0].text[:200]}")
            elif tool == "remember":
                written.append(
                    (
                        args["text"].split("code word ")[1].split()[0],
                        json.loads(result.content[0].text)["path"],
                    )
                )
    return {"times": times, "errors": errors, "written": written}


async def check_found(url: str, written: list[tuple[str, str]]) -> list[str]:
    """The code words whose note is not the first search result."""
    lost = []
    async with Agent(url) as client:
        for word, path in written:
            result = await client.call_tool("search", {"query": word, "k": 1, "mode": "lexical"})
            data = json.loads(result.content[0].text) if not result.is_error else {"results": []}
            if not data["results"] or data["results"][0]["document_path"] != path:
                lost.append(word)
    return lost


def table(solo: dict[str, list[float]], together: dict[str, list[float]]) -> str:
    rows = [
        "| tool | solo n | solo p50 ms | solo p95 ms | together n | together p50 ms | together p95 ms | p50 ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for tool, _ in MIX:
        s, t = solo.get(tool, []), together.get(tool, [])
        s50, t50 = percentile(s, 50), percentile(t, 50)
        rows.append(
            f"| `{tool}` | {len(s)} | {s50:.1f} | {percentile(s, 95):.1f} | {len(t)} | {t50:.1f} | "
            f"{percentile(t, 95):.1f} | {t50 / s50 if s50 else float('nan'):.1f}x |"
        )
    return "\n".join(rows)


async def bench(url: str, vault: Path, clients: int, calls: int, solo_calls: int) -> dict[str, Any]:
    files = sorted(p.relative_to(vault).as_posix() for p in vault.rglob("*.md"))
    async with Agent(url) as warm:  # the model loaded and the pipeline built before anything is timed
        await warm.call_tool("search", {"query": "warm up", "k": 10})
        # The notes the index holds (ignored folders such as .trash/ are not notes).
        targets = [
            f
            for f in files
            if not (await warm.call_tool("get_context", {"target": f, "window": 10})).is_error
        ]
    solo = await run_agent(url, "solo", solo_calls, targets, seed=1000)
    t0 = time.perf_counter()
    runs = await asyncio.gather(*(run_agent(url, str(n), calls, targets, seed=n) for n in range(clients)))
    wall = time.perf_counter() - t0
    together: dict[str, list[float]] = {tool: [] for tool, _ in MIX}
    for r in runs:
        for tool, values in r["times"].items():
            together[tool] += values
    written = [w for r in runs for w in r["written"]] + solo["written"]
    lost = await check_found(url, written)
    files = len(list((vault / "Users").glob("agent*/turns/turn_*/context.md")))
    return {
        "clients": clients,
        "calls": calls,
        "wall_s": round(wall, 1),
        "calls_per_s": round(sum(len(v) for v in together.values()) / wall, 1),
        "errors": solo["errors"] + [e for r in runs for e in r["errors"]],
        "remembered": len(written),
        "turn_files": files,
        "lost": lost,
        "solo": solo["times"],
        "together": together,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("vault", nargs="?", type=Path, default=REPO / "sample_vault")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--solo", type=int, default=100)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    offline_environment()
    with tempfile.TemporaryDirectory() as tmp:
        vault = Path(tmp) / args.vault.name
        shutil.copytree(args.vault, vault, ignore=shutil.ignore_patterns(".explorer"))
        proc, url = start(vault)
        try:
            result = asyncio.run(bench(url, vault, args.clients, args.calls, args.solo))
        finally:
            proc.terminate()
            code = proc.wait(timeout=60)
    print(
        f"{args.clients} clients x {args.calls} calls at once, one server on 127.0.0.1 ({vault.name}, hybrid search)\n"
    )
    print(table(result["solo"], result["together"]))
    print(
        f"\nerrors: {len(result['errors'])}; remembered {result['remembered']}, found first after: "
        f"{result['remembered'] - len(result['lost'])} ({result['turn_files']} turn files); "
        f"wall {result['wall_s']} s, {result['calls_per_s']} calls/s; server exit {code}"
    )
    for e in result["errors"][:10]:
        print(f"  {e}")
    if args.out:
        write_json(args.out, {**result, "machine": machine(), "server_exit": code})
    sys.exit(1 if result["errors"] or result["lost"] or code != 0 else 0)


if __name__ == "__main__":
    main()
