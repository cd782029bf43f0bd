"""The time limit per PDF holds inside a page: a small PDF whose page keeps the library busy for minutes
is stopped at the limit, listed as skipped with the reason, and indexing goes on.

The hostile file (`pdfs.repeated_form_pdf`, 7 KB) draws a form that draws a form: pypdf's text
extraction parses the inner form again for each of its 5,000 drawings and spent 142 s on its one
page here. The tests lower the limit (`PDF_SECONDS`) to 2 s; the reading process reads it from each
request, so the lowered limit is the one it keeps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import write_notes
from explorer.cli.entry import main
from explorer.config import Settings
from explorer.vault import pdf as pdf_mod
from pdfs import repeated_form_pdf, text_pdf

REPO = Path(__file__).resolve().parent.parent
LIMIT = 2.0


@pytest.fixture()
def short_limit(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setattr(pdf_mod, "PDF_SECONDS", LIMIT)
    return LIMIT


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "EXPLORER_INDEX_EMBEDDINGS": "false",
        "EXPLORER_INDEX_CACHE_DIR": str(tmp_path / "cache"),
    }


def test_a_page_that_stalls_the_pdf_library_is_skipped_at_the_limit(
    tmp_path: Path, short_limit: float, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`explorer index` on a vault holding the stalling PDF, a PDF whose second page stalls, and a plain
    one: the first is skipped with the reason, the second keeps its first page with a warning, the plain
    PDF and the notes are searchable, and `explorer stats` (another process) lists both reasons."""
    vault = write_notes(tmp_path / "vault", {"notes/otters.md": "# Otters\n\nOtters hold hands asleep.\n"})
    (vault / "papers").mkdir()
    (vault / "papers" / "stall.pdf").write_bytes(repeated_form_pdf())
    (vault / "papers" / "half.pdf").write_bytes(
        repeated_form_pdf(first_page="Beavers build lodges of mud and sticks.")
    )
    (vault / "papers" / "plain.pdf").write_bytes(text_pdf(["Herons stand still in the shallows."]))
    for key, value in _env(tmp_path).items():
        monkeypatch.setenv(key, value)
    assert main(["index", str(vault), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    stalled = f"too slow: page 1 was still being read after {short_limit:g} s (the limit per PDF)"
    assert report["skipped"] == {"papers/stall.pdf": stalled}

    stats = subprocess.run(
        [sys.executable, "-m", "explorer", "stats", str(vault), "--json"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
    )
    assert stats.returncode == 0, stats.stderr
    out = json.loads(stats.stdout)
    assert out["skipped"] == {"papers/stall.pdf": stalled}
    assert out["warnings"]["papers/half.pdf"] == [
        f"truncated: only the first 1 of 2 pages were read within {short_limit:g} s (the limit per PDF)"
    ]
    found = subprocess.run(
        [
            *(sys.executable, "-m", "explorer", "search", "-V", str(vault), "--no-embeddings", "--json"),
            "beavers lodges herons shallows otters",
        ],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
    )
    assert found.returncode == 0, found.stderr
    ids = {r["node_id"] for r in json.loads(found.stdout)["results"]}
    assert {"papers/half.pdf#page=1", "papers/plain.pdf#page=1", "notes/otters.md"} <= ids


def test_the_next_pdf_is_read_after_a_stalled_one(tmp_path: Path, short_limit: float) -> None:
    """The reading process stopped at the limit is replaced: the PDFs after it are read in full, with the
    same text and warnings as a reading in this process."""
    stall, plain = tmp_path / "stall.pdf", tmp_path / "plain.pdf"
    stall.write_bytes(repeated_form_pdf())
    plain.write_bytes(text_pdf([f"page {i} about kingfishers" for i in range(1, 6)], compress=True))
    settings = Settings().vault
    pages, reason, _ = pdf_mod.read_pdf(stall, settings)
    assert pages is None and reason.startswith("too slow: page 1 was still being read")
    got = pdf_mod.read_pdf(plain, settings)
    assert got == pdf_mod.read_pdf_here(plain, pdf_mod.pdf_limits(settings))
    assert got[0] is not None and len(got[0]) == 5 and "kingfishers" in got[0][4]
