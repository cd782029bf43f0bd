"""Sensible answers when something breaks: a PDF that stalls its library, a team engine that goes away.

A person expects indexing to end and to be told which file was left out and why; and a search of
their own notes to keep working while a shared engine is down, saying so in words they understand,
then to stop saying so once it is back. Searching other people's vaults cannot work without the
engine, and says that in one line.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import write_notes
from explorer.cli import main
from explorer.vault import pdf as pdf_mod
from pdfs import repeated_form_pdf, text_pdf

NOTES = {
    "garden/beans.md": "# Beans\n\nRunner beans climb the hazel poles by June.\n",
    "garden/compost.md": "# Compost\n\nTurn the heap every fortnight; keep it damp.\n",
}
DIARY = {"diary/today.md": "# Today\n\nThe plumber fixed the quuxflange under the sink.\n"}


def test_a_pdf_that_stalls_the_library_is_named_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Indexing a vault that holds a small PDF the PDF library cannot finish: indexing ends, `explorer
    stats` names the file and says it took longer than the time limit per PDF, and the rest of the
    vault (another PDF, the notes) is searchable."""
    monkeypatch.setattr(pdf_mod, "PDF_SECONDS", 2.0)  # the limit, lowered to keep the case short
    monkeypatch.setenv("EXPLORER_INDEX_EMBEDDINGS", "false")
    vault = write_notes(tmp_path / "vault", NOTES)
    (vault / "scans").mkdir()
    (vault / "scans" / "brochure.pdf").write_bytes(repeated_form_pdf())
    (vault / "scans" / "seeds.pdf").write_bytes(text_pdf(["Sow parsnips in April, thinly."]))
    assert main(["index", str(vault)]) == 0
    capsys.readouterr()
    assert main(["stats", str(vault)]) == 0
    stats = capsys.readouterr().out
    line = next(x for x in stats.splitlines() if "brochure.pdf" in x)
    assert "too slow" in line and "2 s (the limit per PDF)" in line
    assert main(["search", "-V", str(vault), "--no-embeddings", "parsnips"]) == 0
    assert "scans/seeds.pdf" in capsys.readouterr().out


# -- a shared engine that goes away and comes back ------------------------------------------------
@pytest.fixture(scope="module")
def outage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A Milvus-backed vault whose engine stopped after the vault was indexed; a note was then written."""
    pytest.importorskip("pymilvus", reason="the milvus extra is not installed")
    from explorer.engine import make_pipeline, new_index
    from test_milvus import MILVUS_LITE, LiteServer, milvus_settings

    if not MILVUS_LITE.exists():
        pytest.skip("milvus-lite server is not installed")
    root = tmp_path_factory.mktemp("outage")
    server = LiteServer(root / "engine")
    server.start()
    vault = write_notes(root / "vault", NOTES)
    index = new_index(vault, milvus_settings(server.uri, root / "cache", embeddings=False))
    try:
        index.open()
        index.retry_seconds = 0.3  # type: ignore[attr-defined]
        server.stop()
        write_notes(vault, DIARY)
        index.refresh(["diary/today.md"])
        yield {"server": server, "index": index, "search": make_pipeline(index, index.settings).search}
    finally:
        index.close()
        server.stop()


def test_while_the_engine_is_down_my_new_note_is_found_and_i_am_told_why(outage: dict[str, Any]) -> None:
    """The note I wrote a moment ago is found while the team engine is down, and the first thing said
    above the results is that the engine is unreachable and these are my vault's own notes."""
    res = outage["search"]("quuxflange", record=False)
    assert res.results[0].document_path == "diary/today.md"
    said = res.warnings[0]
    assert outage["server"].uri in said and "unreachable" in said and "this vault's own index" in said
    assert "\n" not in said and "Traceback" not in said


def test_searching_other_vaults_while_the_engine_is_down_says_so_in_one_line(outage: dict[str, Any]) -> None:
    """Other people's notes live only in the engine: a search of every vault fails, in one line naming
    the engine, instead of quietly showing my notes alone."""
    from explorer.index.milvus import BackendError

    with pytest.raises(BackendError) as err:
        outage["search"]("hazel poles vault:*", record=False)
    message = str(err.value)
    assert outage["server"].uri in message and "\n" not in message


def test_once_the_engine_is_back_it_no_longer_says_it_is_down(outage: dict[str, Any]) -> None:
    """After the engine is back and has my changes, the same search finds my note and no longer says the
    engine is unreachable."""
    from explorer.index.milvus import wait_until

    outage["server"].start()
    index = outage["index"]
    assert wait_until(lambda: not index.engine_fault and index.behind == 0, 120), index.engine_fault
    res = outage["search"]("quuxflange", record=False)
    assert res.results[0].document_path == "diary/today.md"
    assert not any("unreachable" in w for w in res.warnings)
