"""Sensible answers: which vault a command works on when none is named.

As git finds its repository and Obsidian its vault: the vault named, else $EXPLORER_VAULT, else the
folder you stand in or its nearest parent holding `.obsidian/` or `.explorer/`, else a one-line
answer saying how to name one (exit 2). Never the checkout's sample_vault, never an index written
into a folder the person did not name or stand in.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import SAMPLE_VAULT, write_notes
from inproc import run_cli

Run = Callable[..., subprocess.CompletedProcess]


@pytest.fixture()
def explorer(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    """`explorer ARGS` run from `cwd` with the environment's EXPLORER_VAULT replaced by `env`'s, through
    its main() in this process (tests/inproc.py): the vault found is the one these tests are about."""

    def run(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
        with monkeypatch.context() as m:
            m.delenv("EXPLORER_VAULT", raising=False)
            for name, value in env.items():
                m.setenv(name, value)
            m.chdir(cwd)
            code, out, err = run_cli(capsys, *args)
        return subprocess.CompletedProcess(args, code, out, err)

    return run


def _sample_vault_state() -> list[tuple[str, int]]:
    """What the checkout's sample_vault/.explorer holds (names and modification times): must not change."""
    folder = SAMPLE_VAULT / ".explorer"
    if not folder.exists():
        return []
    return sorted((p.name, p.stat().st_mtime_ns) for p in folder.iterdir())


@pytest.fixture()
def garden(tmp_path: Path) -> Path:
    """A person's Obsidian vault (it has `.obsidian/`) with a subfolder."""
    root = write_notes(
        tmp_path / "garden",
        {
            "Tomatoes.md": "# Tomatoes\n\nPinch out the side shoots of cordon tomatoes every week.\n",
            "Beds/compost.md": "# Compost\n\nTurn the heap monthly; a warm heap kills weed seeds.\n",
        },
    )
    (root / ".obsidian").mkdir()
    return root


@pytest.fixture()
def nowhere(tmp_path: Path) -> Path:
    """A folder that is no vault and lies in none."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    return folder


def _paths(proc: subprocess.CompletedProcess) -> list[str]:
    assert proc.returncode == 0, proc.stderr
    return [r["document_path"] for r in json.loads(proc.stdout)["results"]]


def test_a_search_from_inside_a_vault_searches_that_vault(explorer: Run, garden: Path) -> None:
    before = _sample_vault_state()
    proc = explorer("search", "side shoots", "--json", "--no-embeddings", cwd=garden)
    assert _paths(proc)[0] == "Tomatoes.md"
    assert (garden / ".explorer" / "index.sqlite").is_file()  # its index went where the person stands
    assert _sample_vault_state() == before  # and nothing into the checkout's sample_vault


def test_a_subfolder_of_a_vault_finds_the_vault_above_it(explorer: Run, garden: Path) -> None:
    proc = explorer("search", "weed seeds", "--json", "--no-embeddings", cwd=garden / "Beds")
    assert _paths(proc)[0] == "Beds/compost.md"
    assert not (garden / "Beds" / ".explorer").exists()  # no second index in the subfolder


def test_index_run_inside_a_vault_names_the_vault_it_found(explorer: Run, garden: Path) -> None:
    proc = explorer("index", "--no-embeddings", cwd=garden)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "Indexed . (garden)"  # not a bare "."


def test_opening_a_note_of_the_vault_you_stand_in(explorer: Run, garden: Path) -> None:
    """The case that went wrong: `open NOTE --print` from inside a vault answered from sample_vault."""
    before = _sample_vault_state()
    proc = explorer("open", "Tomatoes.md", "--print", "--no-embeddings", cwd=garden / "Beds")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "obsidian://open?vault=garden&file=Tomatoes.md"
    assert _sample_vault_state() == before


def test_a_vault_explorer_indexed_is_found_by_its_index_folder(explorer: Run, tmp_path: Path) -> None:
    """A plain folder of notes (no Obsidian) becomes findable once `explorer index` named it."""
    root = write_notes(tmp_path / "notes", {"kites.md": "# Kites\n\nA delta kite flies in light wind.\n"})
    (root / "deep" / "er").mkdir(parents=True)
    assert explorer("index", str(root), "--no-embeddings", cwd=tmp_path).returncode == 0
    proc = explorer("search", "delta kite", "--json", "--no-embeddings", cwd=root / "deep" / "er")
    assert _paths(proc) == ["kites.md"]


def test_the_nearest_vault_wins(explorer: Run, garden: Path) -> None:
    """A vault kept inside another folder that is a vault: standing in the inner one searches it alone."""
    inner = write_notes(garden / "Projects" / "pond", {"pond.md": "# Pond\n\nFrogspawn in March.\n"})
    (inner / ".obsidian").mkdir()
    proc = explorer("search", "frogspawn tomatoes", "--json", "--no-embeddings", cwd=inner)
    assert _paths(proc) == ["pond.md"]


def test_explorer_vault_is_used_from_anywhere(explorer: Run, garden: Path, nowhere: Path) -> None:
    proc = explorer(
        "search", "side shoots", "--json", "--no-embeddings", cwd=nowhere, EXPLORER_VAULT=str(garden)
    )
    assert _paths(proc)[0] == "Tomatoes.md"
    assert not (nowhere / ".explorer").exists()


def test_a_named_vault_beats_the_one_you_stand_in(explorer: Run, garden: Path, tmp_path: Path) -> None:
    other = write_notes(tmp_path / "other", {"bees.md": "# Bees\n\nSide shoots of lavender feed bees.\n"})
    proc = explorer("search", "side shoots", "--vault", str(other), "--json", "--no-embeddings", cwd=garden)
    assert _paths(proc) == ["bees.md"]


@pytest.mark.parametrize(
    ("args", "how"),
    [
        (("search", "side shoots"), "explorer search --vault PATH"),
        (("stats",), "explorer stats PATH"),
        (("open", "Tomatoes.md", "--print"), "explorer open --vault PATH"),
        ((), "explorer PATH"),  # the app
    ],
)
def test_nowhere_a_command_says_in_one_line_how_to_name_a_vault(
    explorer: Run, nowhere: Path, args: tuple[str, ...], how: str
) -> None:
    before = _sample_vault_state()
    proc = explorer(*args, "--no-embeddings", cwd=nowhere)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("explorer: no vault here") and how in line and "EXPLORER_VAULT" in line
    assert ".obsidian/" in line  # what makes a folder a vault
    assert "sample_vault" not in line
    assert not (nowhere / ".explorer").exists()
    assert _sample_vault_state() == before


def test_help_says_that_explorer_vault_opens_the_app(explorer: Run, nowhere: Path) -> None:
    proc = explorer("--help", cwd=nowhere)
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "explorer VAULT` opens the app" in text
    assert "$EXPLORER_VAULT" in text and ".obsidian/" in text
