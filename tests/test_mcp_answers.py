"""MCP answers sized for agents, through the real MCP SDK client (to `explorer mcp` served in process:
tests/inproc.py): brief by default, under 8,000 characters, paged, with excerpts of the asked
length, the full answer on request, `recent` turns and `get_context` windows."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import write_notes
from tests.inproc import mcp_client
from tests.test_mcp import _error, _payload, _run

LIMIT = 8000


def _vault(root: Path) -> Path:
    notes = {}
    for i in range(60):
        notes[f"Wheels/wheel-{i:02d}.md"] = (
            f"---\ndate: 2026-01-{i % 28 + 1:02d}\ntags: [{'pets' if i % 2 else 'bikes'}]\n---\n"
            f"# Wheel note {i}\n\n"
            + f"The wheel number {i} turns. " * (3 + i % 7)
            + "A long tail of words about spokes, rims and hubs. " * 12
        )
    for n, (day, topic) in enumerate(
        [("2026-02-01", "first talk"), ("2026-02-03", "wheel sizes"), ("2026-02-02", "bike rims")], 1
    ):
        notes[f"Users/bo/turns/turn_{n:06d}/context.md"] = (
            f"---\nturn_id: {n}\ndate: {day}\ntopic: {topic}\n---\n# {topic}\n\nWe spoke about {topic} and a wheel.\n"
        )
    return write_notes(root, notes)


def test_search_answers_are_brief_paged_and_complete_on_request(tmp_path: Path) -> None:
    vault = _vault(tmp_path / "vault")

    async def session() -> None:
        async with mcp_client(vault, "--no-embeddings", "--no-watch") as client:

            async def call(tool: str, args: dict) -> tuple[dict, int]:
                result = await client.call_tool(tool, args)
                return _payload(result), len(result.content[0].text)

            brief, size = await call("search", {"query": "wheel turns", "k": 10})
            assert size <= LIMIT and "cut" not in brief
            assert [r["rank"] for r in brief["results"]] == list(range(1, 11))
            first = brief["results"][0]
            assert set(first) >= {"rank", "node_id", "document_path", "title", "source_type", "excerpt"}
            assert first["date"].startswith("2026-01-") and "explanation" not in first
            assert first["date_from"] == "date"  # which field gave it, as --json says
            assert brief["quality"]["level"] in ("high", "medium", "low") and isinstance(
                brief["no_good_match"], bool
            )
            assert brief["next_offset"] == 10

            full, full_size = await call("search", {"query": "wheel turns", "k": 10, "detail": True})
            assert full_size > 2 * size and full["results"][0]["explanation"]["contributions"]
            assert [r["document_path"] for r in full["results"]] == [
                r["document_path"] for r in brief["results"]
            ]

            # 50 results do not fit: the answer says so and where to go on; the pages add up to the full list.
            big, size = await call("search", {"query": "wheel turns", "k": 50})
            assert size <= LIMIT and "cut" in big and 0 < len(big["results"]) < 50
            assert big["next_offset"] == len(big["results"]) and f"offset={big['next_offset']}" in big["cut"]
            everything, _ = await call("search", {"query": "wheel turns", "k": 50, "detail": True})
            paths = [r["document_path"] for r in everything["results"]]
            got = [r["document_path"] for r in big["results"]]
            while len(got) < len(paths):
                page, size = await call(
                    "search", {"query": "wheel turns", "k": 50 - len(got), "offset": len(got)}
                )
                assert size <= LIMIT and page["results"][0]["rank"] == len(got) + 1
                got += [r["document_path"] for r in page["results"]]
            assert got == paths

            short, _ = await call("search", {"query": "wheel turns", "k": 5, "excerpt_chars": 40})
            assert all(0 < len(r["excerpt"]) <= 40 for r in short["results"])
            long, _ = await call("search", {"query": "wheel turns", "k": 2, "excerpt_chars": 600})
            assert all(len(r["excerpt"]) > 300 for r in long["results"])
            none, _ = await call("search", {"query": "wheel turns", "k": 3, "excerpt_chars": 0})
            assert all(r["excerpt"] == "" for r in none["results"])

            assert "0 to 49" in _error(await client.call_tool("search", {"query": "wheel", "offset": -1}))
            assert "offset + k" in _error(
                await client.call_tool("search", {"query": "wheel", "k": 30, "offset": 30})
            )
            assert "excerpt_chars" in _error(
                await client.call_tool("search", {"query": "wheel", "excerpt_chars": 10**6})
            )

    _run(session())


def test_recent_turns_context_windows_and_filtered_find(tmp_path: Path) -> None:
    vault = _vault(tmp_path / "vault")

    async def session() -> None:
        async with mcp_client(vault, "--no-embeddings", "--no-watch") as client:
            recent = _payload(await client.call_tool("recent", {"n": 2, "excerpt_chars": 30}))
            assert recent["user"] == "bo"
            assert [(t["turn"], t["date"], t["title"]) for t in recent["turns"]] == [
                (2, "2026-02-03", "bo, 2026-02-03: wheel sizes"),
                (3, "2026-02-02", "bo, 2026-02-02: bike rims"),
            ]
            assert all(len(t["excerpt"]) <= 30 for t in recent["turns"])
            nobody = _payload(await client.call_tool("recent", {"user": "zed"}))
            assert nobody["turns"] == [] and "no conversation turns" in nobody["note"]
            assert _error(await client.call_tool("recent", {"user": "../bo"}))

            ctx = _payload(
                await client.call_tool(
                    "get_context", {"target": "Wheels/wheel-03.md", "cursor": 200, "window": 100}
                )
            )
            assert 80 <= ctx["end"] - ctx["start"] <= 120 and ctx["start"] >= 140  # ends snap to whole words
            assert _error(
                await client.call_tool("get_context", {"target": "Wheels/wheel-03.md", "window": -5})
            )

            # why_not states only what it ran; running the stated query again gives the stated rank.
            wn = _payload(
                await client.call_tool(
                    "why_not", {"query": "wheel number 1 tag:bikes", "note": "wheel-01", "k": 5}
                )
            )
            assert wn["note"] == "Wheels/wheel-01.md" and "left out by tag:bikes" in wn["facts"]
            change = next(c for c in wn["changes"] + wn["not_enough"] if c["kind"] == "filter")
            again = _payload(await client.call_tool("search", {"query": change["query"], "k": 5}))
            ranks = [r["rank"] for r in again["results"] if r["document_path"] == "Wheels/wheel-01.md"]
            assert (ranks[0] if ranks else None) == change["rank"] and change["holds"] is bool(ranks)

            hits = _payload(
                await client.call_tool("find", {"keywords": ["wheel", "tag:pets"], "max_results": 50})
            )
            odd = {int(h["path"][-5:-3]) % 2 for h in hits["hits"]}
            assert hits["hits"] and odd == {1} and hits["keywords"] == ["wheel"]

    _run(session())
