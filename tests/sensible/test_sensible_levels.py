"""Sensible answers: the quality level a person reads above the results.

Typing a note's name and getting that note first is the clearest success a search can have: the
level says `high`, never "no good match". A query nothing answers stays `low`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import embedded_index, turn_notes, write_notes
from explorer.cli import main
from explorer.engine import make_pipeline

#: A small documentation vault: short notes named as their subject, and longer ones that use the
#: same words in passing.
DOCS = {
    "Welcome.md": "---\naliases: [Home, Start here]\n---\n# Welcome to the docs\n\n"
    "| Area | Where |\n|---|---|\n| Setup | [[Installation]] |\n| Use | [[Configuration]] |\n",
    "Installation.md": "# Installation\n\n```sh\npip install tool\n```\n",
    "Configuration.md": "---\ntitle: Settings reference\n---\n# Config\n\n`timeout = 30`, `retries = 3`.\n",
    "Guides/first-steps.md": "# First steps\n\nAfter the installation, open the welcome screen; the "
    "installation wizard welcomes new users and explains the settings and configuration of the tool.\n",
    "Guides/upgrade.md": "# Upgrading\n\nAn upgrade is an installation over an older installation: "
    "keep your configuration, read the welcome notes of the release.\n",
    "Guides/troubleshooting.md": "# Troubleshooting\n\nIf the installation fails, check the configuration "
    "file and the settings; the home folder must be writable.\n",
    "Reference/hamster-diet.md": "# Diet\n\nPellets, fresh greens twice a week, no citrus.\n",
    "Reference/pets.md": "# Pets\n\nA hamster eats seeds; its diet matters for a hamster's health.\n",
}


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory, embedder) -> Any:
    """The documentation vault, indexed with the real model, and a search through the default pipeline."""
    vault = write_notes(tmp_path_factory.mktemp("levels") / "docs", DOCS)
    with embedded_index(vault, embedder) as index:
        pipe = make_pipeline(index, index.settings)
        yield lambda query: pipe.search(query, record=False)


@pytest.mark.parametrize(
    ("query", "note"),
    [
        ("Welcome", "Welcome.md"),  # the file name, one word
        ("Installation", "Installation.md"),  # a one-word name other notes use in passing
        ("Home", "Welcome.md"),  # an alias
        ("Settings reference", "Configuration.md"),  # the frontmatter title
        ("hamster diet", "Reference/hamster-diet.md"),  # the file name as typed, without its hyphen
    ],
)
def test_a_notes_exact_name_found_first_is_high(docs, query: str, note: str) -> None:
    res = docs(query)
    assert res.results[0].document_path == note
    assert res.quality.level == "high", res.quality.factors
    assert not res.quality.factors["no_good_match"]


def test_the_cli_says_high_and_no_weak_candidates_for_a_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """BM25 only (no model): the name is still the note asked for."""
    vault = write_notes(tmp_path / "docs", DOCS)
    assert main(["search", "Installation", "--vault", str(vault), "--no-embeddings"]) == 0
    out = capsys.readouterr().out
    assert "quality high" in out.splitlines()[0] and "No good match" not in out
    assert main(["search", "Installation", "--vault", str(vault), "--no-embeddings", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["results"][0]["document_path"] == "Installation.md" and data["quality"]["level"] == "high"


def test_nonsense_stays_low(docs) -> None:
    res = docs("zzqx blorfing")
    assert res.quality.level == "low" and res.quality.factors["no_good_match"]


def test_a_name_that_is_only_part_of_the_query_is_not_enough_for_high(docs) -> None:
    """ "installation wizard welcome screen" names no note: its level is read from the match, as before."""
    res = docs("installation wizard welcome screen")
    assert not res.quality.factors["first_named"]


def test_a_turns_file_name_names_no_turn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every turn is `context.md`: typing "context" does not name one."""
    said = [("Ann", f"Talk {i} about the context of topic{i}.") for i in range(12)]
    vault = write_notes(tmp_path / "chat", turn_notes(said))
    assert main(["search", "context", "--vault", str(vault), "--no-embeddings", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert not data["quality"]["factors"]["first_named"]
