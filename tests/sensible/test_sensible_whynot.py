"""Sensible answers: “why is this note not in my results?” advises what a person could do.

The advice names the query's content words the note lacks (never “how”, “do”, “I”), tries them
alone and together, lists first what moves the note most, and says plainly when no word change can
help and what would instead (a filter left out, a longer list). Every claim is run before it is said.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import make_app, quiet_settings, search, settle, sync, wait_for, write_notes
from explorer.cli import main

NOTES = {
    "Pets/hamster-diet.md": "# Hamster diet\n\nA hamster eats pellets, seeds and fresh greens. Keep fruit rare.\n",
    "Pets/hamster-cage.md": "# Hamster cage\n\nA hamster cage needs deep bedding. Clean the cage weekly and keep "
    "the bedding dry.\n",
    "Pets/cage-cleaning.md": "# Cage cleaning\n\nClean a cage with mild soap; keep it clean and dry. Cage hygiene "
    "for any pet.\n",
    "Pets/hamster-wheel.md": "# Hamster wheel\n\nA hamster wheel of 28 cm keeps a hamster fit. Keep it clean.\n",
    "Pets/bird-cage.md": "# Bird cage\n\nA bird cage must be cleaned; keep perches clean.\n",
    "Pets/hamster-toys.md": "# Hamster toys\n\nTubes and chews keep a hamster busy; clean them monthly.\n",
    **{
        f"Misc/other{i}.md": f"# Other {i}\n\nUnrelated note about topic{i} and gardening{i}.\n"
        for i in range(10)
    },
}
QUERY = "how do I keep a hamster cage clean"
STOP = {"how", "do", "i", "a"}


@pytest.fixture()
def vault(tmp_path: Path) -> Path:
    return write_notes(tmp_path / "vault", NOTES)


def _why(vault: Path, query: str, note: str, k: int, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert (
        main(["why-not", query, note, "--vault", str(vault), "--no-embeddings", "-k", str(k), "--json"]) == 0
    )
    return json.loads(capsys.readouterr().out)


def _words(data: dict[str, Any]) -> list[str]:
    return [c["value"] for c in data["changes"] + data["not_enough"] if c["kind"] == "word"]


def test_the_words_it_lacks_are_content_words_never_stop_words(
    vault: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _why(vault, QUERY, "Pets/hamster-diet.md", 3, capsys)
    lacks = next(f for f in data["facts"] if f.startswith("it lacks"))
    assert "“cage”" in lacks and "“clean”" in lacks
    assert not any(
        f"“{w}”" in lacks.lower() for w in STOP | {"keep", "hamster"}
    )  # keep, hamster: it has them
    tried = {w for value in _words(data) for w in value.lower().split()}
    assert tried == {"cage", "clean"}


def test_two_words_together_are_tried_when_one_is_not_enough(
    vault: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _why(vault, QUERY, "Pets/hamster-diet.md", 3, capsys)
    assert [c["value"] for c in data["changes"]] == ["cage clean"]
    assert all(len(c["value"].split()) == 1 for c in data["not_enough"])
    assert "if it contained “cage” and “clean”, it would rank #" in data["summary"]


def test_the_word_that_moves_it_most_comes_first(vault: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _why(vault, QUERY, "Pets/hamster-diet.md", 3, capsys)
    singles = [c for c in data["not_enough"] if c["kind"] == "word"]
    assert [c["value"] for c in singles] == ["cage", "clean"]
    assert singles[0]["deep_rank"] < singles[1]["deep_rank"] <= data["rank"]
    assert f"#{singles[0]['deep_rank']} in a list of 50" in singles[0]["claim"]


def test_no_word_can_help_a_note_a_filter_leaves_out(vault: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _why(vault, "hamster bedding -cage", "Pets/hamster-cage.md", 3, capsys)
    assert not _words(data)
    assert data["advice"][0] == "No word added to the note can help: -cage leaves it out."
    assert data["advice"][1].startswith("What would: left out by -cage — without it, it would rank #")


def test_a_note_holding_every_word_is_told_so_and_shown_what_would_help(
    vault: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _why(vault, "keep cage clean", "Pets/bird-cage.md", 1, capsys)
    assert data["rank"] is not None and data["rank"] > 1 and not _words(data)
    assert (
        data["advice"][0] == "No word change can help: it already contains every content word of the query."
    )
    assert (
        data["advice"][1]
        == f"What would: a longer list (-k {data['rank']}), where it shows at #{data['rank']}."
    )


def test_a_query_of_common_words_gets_no_word_to_add(vault: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _why(vault, "how do I keep it", "Pets/hamster-diet.md", 1, capsys)
    assert not _words(data)
    assert not any(f.startswith("it lacks") for f in data["facts"])


def test_the_cli_prints_the_advice_under_the_summary(vault: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "why-not",
        "hamster bedding -cage",
        "Pets/hamster-cage.md",
        "--vault",
        str(vault),
        "--no-embeddings",
    ]
    assert main([*args, "-k", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == "No word added to the note can help: -cage leaves it out."


def test_mcp_why_not_gives_the_advice(vault: Path) -> None:
    from inproc import mcp_client
    from test_mcp import _payload, _run

    async def session() -> dict[str, Any]:
        async with mcp_client(vault, "--no-embeddings", "--no-watch") as client:
            return _payload(
                await client.call_tool("why_not", {"query": QUERY, "note": "Pets/hamster-diet.md", "k": 3})
            )

    data = _run(session())
    assert "cage" in json.dumps(data) and not any(
        w in {"how", "do", "I"} for c in data.get("not_enough", []) for w in c.get("value", "").split()
    )
    assert data["changes"][0]["value"] == "cage clean"


@sync
async def test_the_apps_why_not_view_shows_the_advice(vault: Path, tmp_path: Path) -> None:
    from explorer.tui.widgets.why_pane import WhyPane

    app = make_app(vault, None, tmp_path, settings=quiet_settings(**{"index.embeddings": False}))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await search(app, pilot, "hamster bedding -cage")
        why = app.main_screen.query_one(WhyPane)
        why.ask("Pets/hamster-cage.md")
        await wait_for(pilot, lambda: why.proof is not None, timeout=60.0)
        await settle(app, pilot)
        shown = str(why.query_one("#why-not-proof").render())
        assert "No word added to the note can help: -cage leaves it out." in shown
        assert "What would: left out by -cage" in shown
