"""Sensible answers: what a person expects when an agent writes memories, and when they ask why-not,
on small real vaults (`explorer mcp` served in process to the real SDK client, the CLI through its
main(): tests/inproc.py)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from conftest import write_notes
from inproc import bounded, mcp_client, run_cli

VAULT = {
    "Users/alice/Knowledge/Garden.md": "---\ndate: 2026-03-01\n---\n\n# Garden\n\n## 2026-03-01\n\n"
    "The tomatoes go in the south bed.\n",
    "Travel/lisbon.md": "# Lisbon\n\nTram 28 climbs to the castle; pastel de nata in Belém.\n",
    "Cooking/bread.md": "# Bread\n\nA sourdough starter wants feeding twice a day.\n",
}


def _server(vault: Path) -> Any:
    """A client of `explorer mcp VAULT --no-embeddings --allow-write --user alice`."""
    return mcp_client(vault, "--no-embeddings", "--allow-write", "--user", "alice")


def _ok(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text[:1000]
    return json.loads(result.content[0].text)


async def _paths(client: Client, query: str) -> list[str]:
    res = _ok(await client.call_tool("search", {"query": query, "mode": "lexical"}))
    return [r["document_path"] for r in res["results"]]


def _explorer(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`explorer ARGS --no-embeddings`: (exit code, stdout, stderr)."""
    return run_cli(capsys, *args, "--no-embeddings")


def test_a_pasted_nul_does_not_hide_the_new_memory_or_the_old_ones(tmp_path: Path) -> None:
    """An agent remembers text copied from a terminal, with a NUL and an escape in it, into Alice's
    garden note: she finds the new fact and still finds the tomatoes."""
    vault = write_notes(tmp_path / "vault", VAULT)

    async def session() -> None:
        async with _server(vault) as client:
            note = "Users/alice/Knowledge/Garden.md"
            assert await _paths(client, "tomatoes south bed") == [note]
            wrote = _ok(
                await client.call_tool(
                    "remember",
                    {
                        "text": "The \x1b[1mcourgettes\x1b[0m need netting\x00 against pigeons.",
                        "kind": "knowledge",
                        "title": "Garden",
                    },
                )
            )
            assert wrote["path"] == note
            assert await _paths(client, "courgettes netting pigeons") == [note]
            assert await _paths(client, "tomatoes south bed") == [note]

    asyncio.run(asyncio.wait_for(session(), timeout=180))
    text = (vault / "Users/alice/Knowledge/Garden.md").read_text(encoding="utf-8")
    assert "courgettes need netting against pigeons" in text and "\x00" not in text and "\x1b" not in text


def test_three_memories_in_a_row_are_each_found_right_after_they_are_written(tmp_path: Path) -> None:
    vault = write_notes(tmp_path / "vault", VAULT)
    facts = [
        ("Feed the starter at 8 am.", "starter 8 am"),
        ("Use 75% hydration for the country loaf.", "hydration country loaf"),
        ("Bake at 250 degrees with the lid on.", "lid 250 degrees"),
    ]

    async def session() -> None:
        async with _server(vault) as client:
            for text, query in facts:
                wrote = _ok(
                    await client.call_tool(
                        "remember", {"text": text, "kind": "knowledge", "title": "Sourdough"}
                    )
                )
                assert (await _paths(client, query))[0] == wrote["path"]
            for _text, query in facts:  # and the earlier ones are all still there
                assert (await _paths(client, query))[0] == "Users/alice/Knowledge/Sourdough.md"

    asyncio.run(asyncio.wait_for(session(), timeout=180))


def test_a_knowledge_folder_linked_to_a_sync_folder_outside_is_refused_and_left_alone(tmp_path: Path) -> None:
    """Alice linked her Knowledge folder to a synced folder outside the vault: the agent is told, in a
    sentence, that it cannot write there; the synced folder is untouched."""
    vault = write_notes(tmp_path / "vault", {k: v for k, v in VAULT.items() if not k.startswith("Users/")})
    synced = write_notes(tmp_path / "Dropbox" / "Knowledge", {"Garden.md": "# Garden\n\nprivate\n"})
    (vault / "Users" / "alice").mkdir(parents=True)
    (vault / "Users" / "alice" / "Knowledge").symlink_to(synced, target_is_directory=True)

    async def session() -> None:
        async with _server(vault) as client:
            res = await client.call_tool(
                "remember", {"text": "Plant garlic in October.", "kind": "knowledge", "title": "Garden"}
            )
            assert res.is_error
            message = res.content[0].text
            assert "Users/alice/Knowledge is a symbolic link" in message and len(message) < 300
            # A turn goes to her real turns folder, as before.
            turn = _ok(await client.call_tool("remember", {"text": "Plant garlic in October."}))
            assert turn["path"] == "Users/alice/turns/turn_000001/context.md"

    asyncio.run(asyncio.wait_for(session(), timeout=180))
    assert [p.name for p in synced.iterdir()] == ["Garden.md"]
    assert (synced / "Garden.md").read_text(encoding="utf-8") == "# Garden\n\nprivate\n"


def test_why_not_explains_even_when_a_sync_tool_left_a_named_pipe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vault = write_notes(tmp_path / "vault", VAULT)
    os.mkfifo(vault / ".sync-control")
    os.mkfifo(vault / "Travel" / "notes.md")
    with bounded(300):
        code, out, err = _explorer(
            capsys, "why-not", "sourdough starter castle", "lisbon", "--vault", str(vault), "-k", "1"
        )
    assert code == 0, err
    assert out.startswith("why not Travel/lisbon.md")
    assert "if it contained “sourdough”" in out  # the word it lacks, tried in a copy of the vault


def test_a_pasted_log_as_a_why_not_query_gets_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vault = write_notes(tmp_path / "vault", VAULT)
    log = " ".join(f"tag:line{i}" for i in range(5000))
    code, out, err = _explorer(capsys, "why-not", log, "lisbon", "--vault", str(vault))
    assert code == 2
    assert out == ""
    assert err.startswith("explorer: the query is ") and err.count("\n") == 1
    assert "why-not takes at most 2,000" in err
