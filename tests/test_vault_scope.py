"""`vault:` in a query: parsed as a scope, and answered by the local backend with its one vault."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO, write_notes
from explorer.search.core.query import parse_query

NOTES = {
    "astro/holes.md": "# Black holes\n\nA black hole bends light near the event horizon.\n",
    "cook/bread.md": "# Sourdough\n\nFeed the starter twice a day.\n",
}


def test_vault_operator_is_a_scope_not_words() -> None:
    p = parse_query('black hole vault:* vault:bob vault:"team a" vault:bob tag:x')
    assert p.text == "black hole"
    assert p.vaults == ("*", "bob", "team a")
    assert p.tags == ("x",)
    assert p.filters_dict()["vaults"] == ["*", "bob", "team a"]
    assert parse_query("vault: x").vaults == ()  # no name: plain words
    assert parse_query("black hole").vaults == ()


def test_the_local_backend_answers_vault_with_its_one_vault(tmp_path: Path) -> None:
    vault = write_notes(tmp_path / "notes", NOTES)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "EXPLORER_INDEX_CACHE_DIR": str(tmp_path / "cache"),
        "EXPLORER_INDEX_EMBEDDINGS": "false",
    }

    def search(query: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "explorer", "search", "--vault", str(vault), query, "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    out = search("black hole vault:*")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["results"][0]["document_path"] == "astro/holes.md"
    assert any("one vault, 'notes'" in w for w in data["warnings"])
    assert search("black hole vault:notes").returncode == 0
    out = search("black hole vault:bob")
    assert out.returncode != 0
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "vault:bob" in lines[0] and "index.backend = milvus" in lines[0]
