"""`explorer mcp`: the server driven by the official MCP SDK client, as an agent would: its tools served
in process (tests/inproc.py: the command's own settings, service and server), and the whole command
over stdio with the real model."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import REPO, write_notes
from tests.inproc import mcp_client

NOTES = {
    "Coffee/espresso.md": "# Espresso\n\n## Grind\n\nA fine grind slows the shot; aim for 25-30 seconds.\n\n"
    "## Milk\n\nSteam oat milk to 60 degrees for a flat white.\n",
    "Pets/hamster.md": "---\ntags: [pets]\n---\n# Hamster care\n\nA Syrian hamster needs a 30 cm wheel and deep bedding.\n",
    "Travel/kyoto.md": "# Kyoto\n\nTemples, moss gardens and the Philosopher's Path in autumn.\n",
}


def _params(vault: Path, *extra: str) -> StdioServerParameters:
    env = {
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_WAIT_POLICY": "PASSIVE",
    }
    if os.environ.get("EXPLORER_MODEL_CACHE"):
        env["EXPLORER_MODEL_CACHE"] = os.environ["EXPLORER_MODEL_CACHE"]
    return StdioServerParameters(
        command=sys.executable, args=["-m", "explorer", "mcp", str(vault), *extra], env=env, cwd=str(vault)
    )


def _payload(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


def _error(result: Any) -> str:
    assert result.is_error, result.content
    return result.content[0].text


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=120))


def test_read_only_server_answers_every_tool_and_survives_bad_input(tmp_path: Path) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)
    (tmp_path / "secret.md").write_text("# Secret\n\noutside the vault\n", encoding="utf-8")

    async def session() -> None:
        async with mcp_client(vault, "--no-embeddings") as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == {
                "search",
                "recent",
                "find",
                "get_context",
                "explain",
                "why_not",
                "stats",
            }  # no remember
            assert all("Use it" in (t.description or "") for t in tools.values())  # each says when to use it
            assert all(len(t.description or "") > 80 for t in tools.values())
            assert "tag:" in tools["search"].description

            found = _payload(await client.call_tool("search", {"query": "hamster wheel", "k": 3}))
            assert found["results"][0]["document_path"] == "Pets/hamster.md"
            assert found["results"][0]["node_id"].startswith("Pets/hamster.md")
            assert found["quality"]["level"] in ("high", "medium", "low")
            assert found["no_good_match"] is (found["quality"]["level"] == "low")
            assert found["index"]["version"] >= 1 and "seconds_since_update" in found["index"]
            assert found["index"]["watcher"] == "watching"

            tagged = _payload(
                await client.call_tool("search", {"query": "tag:pets bedding", "mode": "lexical"})
            )
            assert [r["document_path"] for r in tagged["results"]] == ["Pets/hamster.md"]

            hits = _payload(await client.call_tool("find", {"keywords": ["oat", "milk"], "mode": "phrase"}))
            hit = hits["hits"][0]
            assert hit["path"] == "Coffee/espresso.md" and "index" in hits

            ctx = _payload(
                await client.call_tool(
                    "get_context",
                    {"target": hit["node_id"], "cursor": hit["cursor"], "before": 20, "after": 40},
                )
            )
            assert "oat milk" in ctx["text"] and ctx["path"] == "Coffee/espresso.md"

            why = _payload(
                await client.call_tool("explain", {"query": "fine grind", "target": "Coffee/espresso.md"})
            )
            assert why["found"] and why["rank"] == 1
            assert any(c["retriever"] == "bm25" for c in why["explanation"]["contributions"])

            wn = _payload(await client.call_tool("why_not", {"query": "fine grind", "note": "Kyoto"}))
            assert wn["note"] == "Travel/kyoto.md" and wn["verdict"] and wn["stages"] and wn["summary"]

            st = _payload(await client.call_tool("stats", {}))
            assert st["notes"] == 3 and st["read_only"] is True and "index" in st

            # Bad input: a tool error each time, and the server keeps answering.
            assert "no note" in _error(await client.call_tool("get_context", {"target": "Nope/missing.md#x"}))
            assert "outside the vault" in _error(
                await client.call_tool("get_context", {"target": "../secret.md"})
            )
            assert "outside the vault" in _error(
                await client.call_tool("get_context", {"target": str(tmp_path / "secret.md")})
            )
            assert "1 to 50" in _error(await client.call_tool("search", {"query": "hamster", "k": 0}))
            assert _error(await client.call_tool("search", {"query": "hamster", "k": "many"}))
            assert "empty query" in _error(await client.call_tool("search", {"query": "   "}))
            assert _error(await client.call_tool("search", {"query": "x", "mode": "psychic"}))
            assert "keywords" in _error(await client.call_tool("find", {"keywords": []}))
            assert _error(
                await client.call_tool("get_context", {"target": "Coffee/espresso.md", "cursor": 10**9})
            )
            assert _error(
                await client.call_tool("why_not", {"query": "grind", "note": "no-such-note-anywhere"})
            )
            assert _error(await client.call_tool("remember", {"text": "x"}))  # not offered read-only

            again = _payload(await client.call_tool("search", {"query": "kyoto temples", "k": 2}))
            assert again["results"][0]["document_path"] == "Travel/kyoto.md"

    _run(session())


def test_watcher_keeps_the_index_live_and_remember_writes_atomically(tmp_path: Path) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)

    async def session() -> None:
        async with mcp_client(vault, "--no-embeddings", "--allow-write", "--user", "alice") as client:
            assert "remember" in {t.name for t in (await client.list_tools()).tools}
            before = _payload(await client.call_tool("stats", {}))["index"]["version"]

            # A note written by someone else while serving becomes searchable.
            write_notes(vault, {"Garden/tomatoes.md": "# Tomatoes\n\nPinch out tomato side shoots weekly.\n"})
            deadline = time.monotonic() + 20
            while True:
                res = _payload(
                    await client.call_tool("search", {"query": "tomato side shoots", "mode": "lexical"})
                )
                if res["results"] and res["results"][0]["document_path"] == "Garden/tomatoes.md":
                    break
                assert time.monotonic() < deadline, "the watcher never indexed the new note"
                await asyncio.sleep(0.2)
            assert res["index"]["version"] > before

            turn = _payload(
                await client.call_tool(
                    "remember",
                    {
                        "text": "Alice switched her espresso beans to a Kenyan roast.",
                        "title": "Espresso beans",
                        "keywords": ["espresso", "beans"],
                    },
                )
            )
            assert turn["path"] == "Users/alice/turns/turn_000001/context.md"
            meta = json.loads(
                (vault / "Users/alice/turns/turn_000001/metadata.json").read_text(encoding="utf-8")
            )
            assert meta["keywords"] == ["espresso", "beans"]
            found = _payload(
                await client.call_tool("search", {"query": "Kenyan roast", "mode": "lexical", "k": 3})
            )
            assert found["results"][0]["document_path"] == turn["path"]
            assert found["results"][0]["source_type"] == "turn_summary"

            second = _payload(await client.call_tool("remember", {"text": "Second memory.", "title": "Next"}))
            assert second["path"] == "Users/alice/turns/turn_000002/context.md"

            know = _payload(
                await client.call_tool(
                    "remember",
                    {
                        "text": "Kenyan beans taste of blackcurrant.",
                        "title": "Coffee beans",
                        "kind": "knowledge",
                    },
                )
            )
            assert know["path"] == "Users/alice/Knowledge/Coffee beans.md"
            more = _payload(
                await client.call_tool(
                    "remember",
                    {
                        "text": "Ethiopian beans taste of blueberry.",
                        "title": "Coffee beans",
                        "kind": "knowledge",
                    },
                )
            )
            text = (vault / more["path"]).read_text(encoding="utf-8")
            assert "blackcurrant" in text and "blueberry" in text
            assert _error(await client.call_tool("remember", {"text": "  "}))
            assert _error(await client.call_tool("remember", {"text": "x", "kind": "knowledge"}))  # no title
            assert _error(await client.call_tool("remember", {"text": "x", "user": "../.."}))
            assert not list(vault.rglob(".tmp-*"))  # no temporary file left behind

    _run(session())


@pytest.mark.slow
def test_hybrid_search_with_the_real_model(tmp_path: Path) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)

    async def session() -> None:
        async with Client(_params(vault)) as client:
            deadline = time.monotonic() + 90
            while _payload(await client.call_tool("stats", {}))["shards_without_vectors"]:
                assert time.monotonic() < deadline, "embedding never finished"
                await asyncio.sleep(0.5)
            res = _payload(
                await client.call_tool(
                    "search", {"query": "what does a pet hamster need", "k": 3, "detail": True}
                )
            )
            assert res["mode"]["dense"] is True
            assert res["results"][0]["document_path"] == "Pets/hamster.md"
            off = _payload(
                await client.call_tool("search", {"query": "quantum chromodynamics lattice gauge"})
            )
            assert off["no_good_match"] is True

    _run(session())
