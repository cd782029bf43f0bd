"""`explorer stats --coverage`: what of the vault folder is indexed, what is not and why, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import write_notes
from explorer.cli import main


def test_stats_coverage_accounts_for_every_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vault = write_notes(
        tmp_path / "v",
        {
            "a.md": "# A\n\nshort note about kites\n",
            "big.md": "# Big\n\n" + "\n\n".join(f"## Part {i}\n\n" + "wind " * 120 for i in range(6)),
            "drafts/wip.md": "# Draft\n\nnot for the index\n",
            ".obsidian/app.json": "{}",
            "img/photo.png": "not really a png",
            "huge.md": "# Huge\n\n" + "x" * 5000,
            ".hidden.md": "# Hidden\n",
            "Users/ana/turns/turn_000001/context.md": "---\nturn_id: 1\n---\nAna: hello\n",
            "Users/ana/turns/turn_000001/metadata.json": '{"topic": "greeting"}',
        },
    )
    argv = [
        "stats",
        str(vault),
        "--coverage",
        "--json",
        "--no-embeddings",
        "--set",
        "vault.max_note_bytes=4000",
        "--set",
        "vault.ignore=drafts/",
    ]
    assert main(argv) == 0
    cov = json.loads(capsys.readouterr().out)["coverage"]
    assert cov["indexed"]["notes"] == 3  # a, big, the turn
    assert cov["indexed"]["vectors"] == 0
    assert sum(g["count"] for g in cov["not_indexed"].values()) == 1
    assert next(iter(cov["not_indexed"].values()))["examples"] == ["huge.md"]
    ignored = cov["ignored"]
    assert ignored["ignore pattern"]["examples"] == ["drafts/"]
    assert ignored["always-ignored folder"]["examples"] == [".obsidian/"]
    assert ignored["not Markdown (.png)"]["examples"] == ["img/photo.png"]
    assert ignored["hidden or temporary file"]["examples"] == [".hidden.md"]
    assert not any(
        "metadata.json" in e for g in ignored.values() for e in g["examples"]
    )  # indexed with its turn
    without = cov["shards_without_vectors"]
    assert without["count"] == cov["indexed"]["shards"] and without["model_state"] == "off"
    assert cov["largest_notes"][0]["path"] == "big.md" and cov["largest_notes"][0]["shards"] > 1
    fresh = cov["freshness"]
    assert fresh["stored_index_written"] is None and fresh["changed_on_disk_since"]["added"] == 3

    # Second run: the stored index exists, nothing changed on disk; the text form names every section.
    assert (
        main(
            [
                "stats",
                str(vault),
                "--coverage",
                "--no-embeddings",
                "--set",
                "vault.max_note_bytes=4000",
                "--set",
                "vault.ignore=drafts/",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "ignored by rule: 4" in text and "largest notes:" in text and "shards without vectors" in text
    assert "0 added, 0 changed, 0 removed" in text and "written never" not in text
