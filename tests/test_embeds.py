"""Embeds (`![[Note]]`, `![[Note#Heading]]`, `![[Note#^block]]`) expanded once in the index layer, shown by `explorer context`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import write_notes
from explorer.config import Settings
from explorer.engine import open_index
from explorer.index.targets import context_for
from explorer.index.transclusion import MAX_EMBED_CHARS, MAX_EMBED_DEPTH, embeds_in, with_embeds

REPO = Path(__file__).resolve().parent.parent

NOTES = {
    "Host.md": (
        "---\ntags: [host]\n---\n# Host\n\nIntro line.\n\n"
        "![[Recipes/Bread#Starter]]\n\n"
        "![[Bread#^feed]]\n\n"
        "- ![[Nowhere to be found]]\n"
        "- ![[photo.png]]\n\n"
        "Self: ![[Host]]\n"
    ),
    "Recipes/Bread.md": (
        "# Bread\n\nBread intro.\n\n## Starter\n\nFeed the starter twice a day with flour and water.\n"
        "Keep it warm. ^feed\n\n### Jar\n\nA glass jar.\n\n## Baking\n\nBake hot.\n"
    ),
    "Loop A.md": "A says: ![[Loop B]]\n",
    "Loop B.md": "B says: ![[Loop A]]\n",
    "Chain 1.md": "one ![[Chain 2]]\n",
    "Chain 2.md": "two ![[Chain 3]]\n",
    "Chain 3.md": "three ![[Chain 4]]\n",
    "Chain 4.md": "four ![[Chain 5]]\n",
    "Chain 5.md": "five\n",
    "Big.md": "![[Huge]]\n",
    "Huge.md": "word " * (MAX_EMBED_CHARS // 2),
    "Evil.md": "Embeds: ![[Payload#Trap]]\n",
    "Payload.md": "# Trap\n\nclear \x1b[2J the screen \x1b]0;owned\x07 and \u009b31m C1\n",
}


@pytest.fixture(scope="module")
def vault(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_notes(tmp_path_factory.mktemp("embeds") / "vault", NOTES)


@pytest.fixture(scope="module")
def index(vault: Path):
    idx, _ = open_index(vault, Settings().with_overrides({"index.embeddings": False}))
    yield idx
    idx.close()


def by_ref(embeds):
    return {e.reference: e for e in embeds}


def test_sections_blocks_missing_files_and_self(index) -> None:
    """A heading embeds its section (down to the next heading of its level), a block its block,
    a whole note its body; a missing target, a file and a self-embed are marked, not expanded."""
    embeds = by_ref(embeds_in(index, "Host.md"))
    section = embeds["Recipes/Bread#Starter"]
    assert section.status == "embedded" and section.path == "Recipes/Bread.md"
    assert section.node_id.startswith("Recipes/Bread.md#") and section.node_id.endswith("Starter")
    assert section.text.startswith("## Starter") and "A glass jar." in section.text  # its sub-heading too
    assert "Bake hot" not in section.text and "Bread intro" not in section.text
    block = embeds["Bread#^feed"]
    assert block.status == "embedded" and block.node_id == "Recipes/Bread.md#^feed"
    assert "Feed the starter" in block.text and "Keep it warm." in block.text and "Jar" not in block.text
    missing = embeds["Nowhere to be found"]
    assert missing.status == "missing" and missing.text == "" and "unresolved" in missing.label
    assert embeds["photo.png"].status == "file"
    assert embeds["Host"].status == "cycle" and embeds["Host"].text == ""
    # The node_id an embed names opens in `explorer context` too.
    window = context_for(index, section.node_id)
    assert window.path == "Recipes/Bread.md" and "Feed the starter" in window.text


def test_cycles_through_other_notes_stop(index) -> None:
    """A embeds B embeds A: B's text is shown once, its embed of A is marked as a cycle."""
    (b,) = embeds_in(index, "Loop A.md")
    assert b.status == "embedded" and b.text == "B says: ![[Loop A]]"
    (a,) = b.embeds
    assert a.status == "cycle" and a.embeds == ()


def test_depth_limit(index) -> None:
    """Embeds inside embeds expand down to MAX_EMBED_DEPTH, then say why they stop."""
    level, depth = embeds_in(index, "Chain 1.md")[0], 1
    while level.status == "embedded" and level.embeds:
        level, depth = level.embeds[0], depth + 1
    assert depth == MAX_EMBED_DEPTH + 1
    assert level.status == "depth" and "deep" in level.reason


def test_size_cap(index) -> None:
    """One embed keeps at most MAX_EMBED_CHARS characters and counts the rest."""
    (huge,) = embeds_in(index, "Big.md")
    assert huge.status == "embedded"
    assert 0 < len(huge.text) <= MAX_EMBED_CHARS and huge.cut > 0
    assert len(huge.text) + huge.cut == len(NOTES["Huge.md"].strip())
    assert "more characters not shown" in huge.label


def test_embeds_only_inside_the_window(index) -> None:
    """A context window carries the embeds whose link lies in it, no others."""
    text = index.note("Host.md").text
    cut = text.index("- ![[Nowhere")
    window = with_embeds(index, context_for(index, "Host.md", 0, 0, cut - 1))
    assert {e.reference for e in window.embeds} == {"Recipes/Bread#Starter", "Bread#^feed"}


def run_cli(vault: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "explorer", "context", "--vault", str(vault), "--no-embeddings", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=REPO,
    )


def test_cli_context_shows_embedded_text_marked_with_its_node_id(
    vault: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`explorer context` (its main()) prints each embed's text below its line in a box headed by the
    source node_id; unresolved embeds and cycles are one marked line; --json carries the same."""
    from inproc import run_cli as run_here

    def context(*args: str) -> tuple[int, str, str]:
        return run_here(capsys, "context", "--vault", str(vault), "--no-embeddings", *args)

    code, out, err = context("Host")
    assert code == 0, err
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if "embedded from Recipes/Bread.md#" in line)
    assert lines[head - 1] == "![[Recipes/Bread#Starter]]" and lines[head].lstrip().startswith("┌ ↪")
    assert any(
        line.lstrip().startswith("│") and "Feed the starter" in line for line in lines[head : head + 8]
    )
    assert any("embedded from Recipes/Bread.md#^feed" in line for line in lines)
    assert any("↪ ✗ unresolved embed Nowhere to be found" in line for line in lines)
    assert any("↪ ✗ embed Host not expanded" in line for line in lines)
    assert not any("photo.png" in line and "↪" in line for line in lines)  # a file stays its link line
    data = json.loads(context("Host", "--json")[1])
    statuses = {e["reference"]: e["status"] for e in data["embeds"]}
    assert statuses == {
        "Recipes/Bread#Starter": "embedded",
        "Bread#^feed": "embedded",
        "Nowhere to be found": "missing",
        "photo.png": "file",
        "Host": "cycle",
    }


def test_cli_embedded_text_cannot_act_on_the_terminal(vault: Path) -> None:
    """Escape sequences inside embedded text are shown as visible escapes, in text and JSON alike."""
    out = run_cli(vault, "Evil")
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout and "\u009b" not in out.stdout and "\x07" not in out.stdout
    assert "^[[2J" in out.stdout and "^[]0;owned^G" in out.stdout and "<U+009B>" in out.stdout
    raw = run_cli(vault, "Evil", "--json").stdout
    assert "\x1b" not in raw and "\u009b" not in raw
    (embed,) = json.loads(raw)["embeds"]
    assert "\x1b[2J" in embed["text"]  # the data itself is exact


def test_mcp_get_context_carries_embeds(vault: Path) -> None:
    """An agent's get_context (through the real MCP SDK client) gets the embedded text and its source node_id."""
    from inproc import mcp_client
    from test_mcp import _payload, _run

    async def session() -> None:
        async with mcp_client(vault, "--no-embeddings") as client:
            ctx = _payload(await client.call_tool("get_context", {"target": "Host.md"}))
            embeds = {e["reference"]: e for e in ctx["embeds"]}
            assert embeds["Bread#^feed"]["status"] == "embedded"
            assert embeds["Bread#^feed"]["node_id"] == "Recipes/Bread.md#^feed"
            assert "Feed the starter" in embeds["Bread#^feed"]["text"]
            assert embeds["Nowhere to be found"]["status"] == "missing"

    _run(session())
