"""Sensible answers: titles that tell a person (or an agent) which note a result is.

A conversation turn is always `turns/turn_NNNNNN/context.md`: its file name says nothing, so it is
titled by who spoke, when, and what. Any other note is titled as Obsidian titles it (its file name,
or its frontmatter `title`), whichever backend answers: a team search on Milvus titles another
vault's note, canvas or PDF exactly as that vault's own search does.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conftest import turn_notes, write_notes
from explorer.cli import main
from explorer.config import Settings
from pdfs import text_pdf

#: A conversation: 16 turns of chat (sessions 1-4), then four that the tests look for (session 5, 2023-05-05).
TURNS = turn_notes(
    [
        ("Caroline" if i % 2 else "Melanie", f"Filler chat number {i} on topic{i} and subject{i}.")
        for i in range(16)
    ]
    + [
        ("Caroline", "I went to the LGBTQ support group yesterday and it was so powerful."),
        ("Melanie", "That is wonderful! I painted a lake at sunrise last week, my best canvas yet."),
        ("Caroline", "Researching adoption agencies now, it is a big step for me."),
        ("Melanie", "Pottery class on Saturday: the kids made bowls out of clay."),
    ]
)
SUPPORT = "Users/Caroline/turns/turn_000017/context.md"
POTTERY = "Users/Melanie/turns/turn_000020/context.md"


def _search(vault: Path, query: str, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    assert main(["search", query, "--vault", str(vault), "--no-embeddings", "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def _titles(data: dict[str, Any]) -> dict[str, str]:
    return {r["document_path"]: r["title"] for r in data["results"]}


# -- conversation turns ---------------------------------------------------------------------------


def test_a_turn_in_search_results_says_who_spoke_when_and_what(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vault = write_notes(tmp_path / "vault", TURNS)
    titles = _titles(_search(vault, "support group", capsys))
    title = titles[SUPPORT]
    assert title.startswith("Caroline, 2023-05-05: I went to the LGBTQ support group")
    assert "context" not in title and "Caroline: I went" not in title  # the speaker is not said twice


def test_two_turns_of_one_day_are_told_apart_by_their_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vault = write_notes(tmp_path / "vault", TURNS)
    titles = _titles(_search(vault, "support group painted lake adoption agencies pottery class", capsys))
    assert len(titles) >= 4 and len(set(titles.values())) == len(titles)
    assert titles[POTTERY].startswith("Melanie, 2023-05-05: Pottery class on Saturday")


def test_a_long_turn_title_is_cut_to_its_first_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long = " ".join(f"word{i}" for i in range(200))
    vault = write_notes(
        tmp_path / "vault",
        turn_notes([("Ann", "wombat " + long)] + [("Bo", f"other{i} words{i}") for i in range(8)]),
    )
    title = _titles(_search(vault, "wombat", capsys))["Users/Ann/turns/turn_000001/context.md"]
    assert title.startswith("Ann, 2023-05-01: wombat word0") and title.endswith("…") and len(title) < 100


def test_a_turn_with_a_topic_is_titled_by_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vault = write_notes(
        tmp_path / "vault",
        {
            "Users/alice/turns/turn_000106/context.md": "---\nturn_id: 106\ntopic: hamster cage sizes\n"
            "date: 2026-11-19\n---\n# Turn 106\n\n## User asked\n\nWhat is the minimum cage size?\n",
        },
    )
    titles = _titles(_search(vault, "minimum cage size", capsys))
    assert titles["Users/alice/turns/turn_000106/context.md"] == "alice, 2026-11-19: hamster cage sizes"


def test_mcp_recent_titles_turns_by_speaker_date_and_first_words(tmp_path: Path) -> None:
    from inproc import mcp_client
    from test_mcp import _payload, _run

    vault = write_notes(tmp_path / "vault", TURNS)

    async def session() -> dict[str, Any]:
        async with mcp_client(vault, "--no-embeddings", "--no-watch") as client:
            return _payload(await client.call_tool("recent", {"user": "Caroline", "n": 2}))

    turns = _run(session())["turns"]
    assert [t["title"] for t in turns] == [
        "Caroline, 2023-05-05: Researching adoption agencies now, it is a big…",
        "Caroline, 2023-05-05: I went to the LGBTQ support group yesterday…",
    ]


def test_find_titles_a_turn_as_search_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vault = write_notes(tmp_path / "vault", TURNS)
    assert main(["find", "pottery", "--vault", str(vault), "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert hits and hits[0]["title"].startswith("Melanie, 2023-05-05: Pottery class")


def test_an_ordinary_note_keeps_its_file_name_as_title(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Obsidian's title: the file name, not the first heading; the frontmatter `title` when set."""
    vault = write_notes(
        tmp_path / "vault",
        {
            "Guides/setup-notes.md": "# Installing the thing\n\nRun the installer twice.\n",
            "Guides/other.md": "---\ntitle: The other guide\n---\n# Heading\n\nThe installer again.\n",
        },
    )
    titles = _titles(_search(vault, "installer", capsys))
    assert titles == {"Guides/setup-notes.md": "setup-notes", "Guides/other.md": "The other guide"}


# -- the same titles on every backend ------------------------------------------------------------------

CANVAS = json.dumps(
    {
        "nodes": [
            {
                "id": "g1",
                "type": "group",
                "label": "Launch plan",
                "x": 0,
                "y": 0,
                "width": 800,
                "height": 600,
            },
            {
                "id": "c1",
                "type": "text",
                "text": "Print the telescope brochure before the launch.",
                "x": 20,
                "y": 20,
                "width": 200,
                "height": 100,
            },
        ],
        "edges": [],
    }
)
TEAM_NOTES = {
    "docs/install-guide.md": "# Getting started with the telescope\n\nMount the telescope on its tripod.\n",
    "docs/named.md": "---\ntitle: Telescope care\n---\n# Cleaning\n\nWipe the telescope lens gently.\n",
    "boards/roadmap.canvas": CANVAS,
    "Users/Caroline/turns/turn_000001/context.md": "---\nturn_id: 1\nspeaker: Caroline\ndate: 2023-05-01\n---\n"
    "Caroline: My telescope arrived today, the optics are lovely.\n",
}


def _milvus(uri: str, cache: Path, name: str) -> Settings:
    s = Settings()
    return replace(
        s,
        index=replace(
            s.index, backend="milvus", milvus_uri=uri, cache_dir=str(cache), vault_name=name, embeddings=False
        ),
    )


def test_a_team_search_titles_another_vaults_notes_as_that_vault_does(tmp_path: Path) -> None:
    pytest.importorskip("pymilvus", reason="the milvus extra is not installed")
    from explorer.engine import make_pipeline, new_index

    (tmp_path / "engine").mkdir()
    uri = str(tmp_path / "engine" / "milvus.db")
    mine = write_notes(tmp_path / "mine", {"sky/moon.md": "# Moon\n\nThe moon through a telescope.\n"})
    theirs = write_notes(tmp_path / "theirs", TEAM_NOTES)
    (theirs / "docs" / "lens-manual.pdf").write_bytes(text_pdf(["The telescope lens manual, page one."]))

    local = new_index(theirs, replace(Settings(), index=replace(Settings().index, embeddings=False)))
    local.open()
    try:
        pipe = make_pipeline(local, local.settings)
        own = {r.document_path: r.title for r in pipe.search("telescope", k=20, record=False).results}
    finally:
        local.close()
    assert own["docs/install-guide.md"] == "install-guide" and own["boards/roadmap.canvas"] == "roadmap"
    assert own["docs/lens-manual.pdf"] == "lens-manual" and own["docs/named.md"] == "Telescope care"

    bob = new_index(theirs, _milvus(uri, tmp_path / "cb", "bob"))
    alice = new_index(mine, _milvus(uri, tmp_path / "ca", "alice"))
    bob.open()
    alice.open()
    try:
        pipe = make_pipeline(alice, alice.settings)
        team = {
            r.document_path.removeprefix("vault:bob/"): r.title
            for r in pipe.search("telescope vault:bob", k=20, record=False).results
        }
    finally:
        alice.close()
        bob.close()
    assert team == own
