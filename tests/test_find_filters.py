"""`explorer find` and MCP `find` honour the search box's filters (tag:, path:, file:, section:), as the app does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from explorer.cli import main
from tests.conftest import write_notes

NOTES = {
    "Pets/hamster.md": "---\ntags: [pets]\n---\n# Hamster\n\nThe hamster wheel must be 30 cm wide.\n",
    "Projects/wheel.md": "---\ntags: [projects]\n---\n# Cart\n\nA wheel for the cart, and a wheel for the hamster.\n",
    "Travel/bike.md": "# Bike\n\nA spare wheel and a pump.\n\n## Tools\n\nThe wheel spanner.\n",
}


def _find(vault: Path, capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["find", *args, "--vault", str(vault), "--no-embeddings", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_find_keeps_only_the_notes_the_filters_allow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)
    everything = _find(vault, capsys, "wheel")
    assert {h["path"] for h in everything["hits"]} == set(NOTES)

    tagged = _find(vault, capsys, "wheel", "tag:pets")
    assert {h["path"] for h in tagged["hits"]} == {"Pets/hamster.md"}
    assert tagged["keywords"] == ["wheel"]  # the filter is not searched as a word
    assert any("tag:pets" in w for w in tagged["warnings"])

    in_folder = _find(vault, capsys, "wheel", "path:Travel", "section:Tools", "--mode", "and")
    assert {h["path"] for h in in_folder["hits"]} == {"Travel/bike.md"}
    assert all(h["cursor"] > 25 for h in in_folder["hits"])  # the Tools section, not the first paragraph

    hashtag = _find(vault, capsys, "wheel", "#projects", "--mode", "fuzzy")
    assert {h["path"] for h in hashtag["hits"]} == {"Projects/wheel.md"}


def test_cli_find_with_filters_alone_says_what_to_add(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)
    assert main(["find", "tag:pets", "--vault", str(vault), "--no-embeddings"]) == 2
    assert "besides the filters" in capsys.readouterr().err
