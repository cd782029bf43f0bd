"""PDFs and JSON canvases in a vault: read through the index, the CLI and the watcher, hostile files skipped with a reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import write_notes
from explorer.config import Settings
from explorer.index.local.vault_index import VaultIndex
from explorer.text.tokenize import tokenize
from explorer.vault import pdf as pdf_mod
from pdfs import HOSTILE, bomb_pdf, damaged_page_pdf, hostile_text_pdf, many_pages_pdf, text_pdf

LEXICAL = Settings().with_overrides({"index.embeddings": False})
REPO = Path(__file__).resolve().parent.parent
EXPLORER = [sys.executable, "-m", "explorer"]

PAGES = [
    "Hamsters hoard seeds in their cheek pouches.\nThey run at night.",
    "",
    "Sourdough starter wants flour and water daily.",
]

CANVAS = {
    "nodes": [
        {
            "id": "a1b2",
            "type": "text",
            "text": "Plan the hamster habitat #pets\nwith a wheel",
            "x": 0,
            "y": 0,
            "width": 200,
            "height": 100,
        },
        {
            "id": "c3d4",
            "type": "file",
            "file": "Notes/Cages.md",
            "x": 300,
            "y": 0,
            "width": 200,
            "height": 100,
        },
        {"id": "grp1", "type": "group", "label": "Shopping", "x": -50, "y": 200, "width": 600, "height": 300},
        {
            "id": "g7h8",
            "type": "text",
            "text": "### Wheel\nBuy a zeppelin wheel and bedding",
            "x": 0,
            "y": 250,
            "width": 200,
            "height": 100,
        },
        {
            "id": "i9j0",
            "type": "link",
            "url": "https://example.org/hamsters",
            "x": 300,
            "y": 250,
            "width": 200,
            "height": 100,
        },
        {
            "id": "k1",
            "type": "file",
            "file": "Notes/Wheels.md",
            "subpath": "#Size",
            "x": 300,
            "y": 600,
            "width": 200,
            "height": 100,
        },
    ],
    "edges": [
        {"id": "e1", "fromNode": "a1b2", "toNode": "c3d4", "label": "needs"},
        {"id": "e2", "fromNode": "a1b2", "toNode": "g7h8"},
        {"id": "e3", "fromNode": "c3d4", "toNode": "k1", "label": "with"},
        {"id": "e4", "fromNode": "a1b2", "toNode": "missing"},
    ],
}


def _vault(tmp_path: Path, extra: dict[str, bytes] | None = None) -> Path:
    root = write_notes(
        tmp_path / "v",
        {
            "Notes/Cages.md": "# Cages\n\nA cage needs deep bedding. See [[hamsters.pdf#page=1]].\n",
            "Notes/Wheels.md": "# Wheels\n\n## Size\n\nSolid wheels, not wire.\n",
            "board.canvas": json.dumps(CANVAS),
        },
    )
    (root / "Papers").mkdir()
    (root / "Papers/hamsters.pdf").write_bytes(text_pdf(PAGES))
    for rel, data in (extra or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def _finds(index: VaultIndex, words: str) -> list[str]:
    with index.lock:
        return [key for key, _score in index.bm25.top(tokenize(words), 10)]


# -- PDFs --------------------------------------------------------------------------------------
def test_pdf_pages_are_shards_with_obsidian_node_ids(tmp_path: Path) -> None:
    index = VaultIndex(_vault(tmp_path), LEXICAL)
    index.open()
    ids = index.shards_by_path["Papers/hamsters.pdf"]
    assert ids == ["Papers/hamsters.pdf#page=1", "Papers/hamsters.pdf#page=3"]  # page 2 has no text
    assert _finds(index, "cheek pouches")[0] == "Papers/hamsters.pdf#page=1"
    assert _finds(index, "sourdough flour")[0] == "Papers/hamsters.pdf#page=3"
    note = index.note("Papers/hamsters.pdf")
    shard = index.shards["Papers/hamsters.pdf#page=3"]
    assert note.text[shard.start : shard.end] == "Sourdough starter wants flour and water daily."
    assert note.title == "hamsters" and "hamsters.pdf" in note.names
    # `[[hamsters.pdf#page=1]]` in a note is a link to the PDF.
    assert [b.source for b in index.links().backlinks("Papers/hamsters.pdf")] == ["Notes/Cages.md"]
    index.close()


def test_hostile_pdfs_are_skipped_with_a_reason_and_indexing_goes_on(tmp_path: Path) -> None:
    extra = {f"Bad/{name}.pdf": make() for name, make in HOSTILE.items()}
    index = VaultIndex(_vault(tmp_path, extra), LEXICAL)
    started = time.perf_counter()
    index.open()
    took = time.perf_counter() - started
    skipped = index.skipped
    for name in ("truncated", "bomb-200MB", "encrypted", "not-a-pdf", "empty", "deep-nesting"):
        assert f"Bad/{name}.pdf" in skipped, name
    assert skipped["Bad/encrypted.pdf"] == "encrypted PDF (needs a password)"
    assert skipped["Bad/bomb-200MB.pdf"].startswith("broken PDF: page 1 not read: LimitReachedError")
    assert skipped["Bad/truncated.pdf"].startswith("broken PDF:")
    # A page tree that claims a million pages holds one: that page is read.
    assert index.shards_by_path["Bad/claims-10^6-pages.pdf"] == ["Bad/claims-10^6-pages.pdf#page=1"]
    # A page tree that contains itself is refused by the library, never followed round.
    assert "Bad/recursive.pdf" in skipped or "Bad/recursive.pdf" in index.notes
    # 100,000 page references: the first MAX_PDF_PAGES (2,000) at most, within the time budget.
    refs = index.notes["Bad/10^5-page-refs.pdf"]
    assert any(w.startswith("truncated") for w in refs.warnings)
    assert len(index.shards_by_path["Bad/10^5-page-refs.pdf"]) <= 2000
    # Everything else is indexed as usual.
    assert _finds(index, "cheek pouches")[0] == "Papers/hamsters.pdf#page=1"
    assert {"Notes/Cages.md", "Notes/Wheels.md", "board.canvas"} <= set(index.notes)
    assert took < 120  # generous: the point is that it ends
    index.close()


def test_pdf_limits_pages_time_and_size(tmp_path: Path, monkeypatch) -> None:
    root = write_notes(tmp_path / "v", {"a.md": "anchor\n"})
    (root / "five.pdf").write_bytes(text_pdf([f"page number {i} words" for i in range(1, 6)]))
    (root / "many.pdf").write_bytes(many_pages_pdf(kids=3000, count=3000))
    (root / "big.pdf").write_bytes(text_pdf(["x " * 5000] * 3))
    monkeypatch.setattr("explorer.vault.pdf.MAX_PDF_PAGES", 2)
    monkeypatch.setattr("explorer.vault.pdf.PDF_SECONDS", 0.1)
    settings = LEXICAL.with_overrides({"vault.max_pdf_bytes": 20_000})
    index = VaultIndex(root, settings)
    index.open()
    assert index.shards_by_path["five.pdf"] == ["five.pdf#page=1", "five.pdf#page=2"]
    assert index.notes["five.pdf"].warnings == (
        "truncated: only the first 2 of 5 pages are indexed (the limit per PDF)",
    )
    assert (
        index.skipped["big.pdf"].startswith("too large:")
        and "vault.max_pdf_bytes" in index.skipped["big.pdf"]
    )
    index.close()
    # The text read from one PDF is held to a note's size limit, like a note.
    settings = LEXICAL.with_overrides(
        {"vault.max_note_bytes": 12_000, "index.cache_dir": str(tmp_path / "text")}
    )
    index = VaultIndex(root, settings)
    index.open()
    assert len(index.notes["big.pdf"].text) < 12_000 + 10_100  # the page that passed the limit is kept
    assert index.notes["big.pdf"].warnings == (
        (
            "truncated: only the first 2 of 3 pages are indexed: their text passed 12,000 characters "
            "(setting vault.max_note_bytes)"
        ),
    )
    index.close()
    # The time budget is checked between pages: a 3,000-page file stops early, keeping what it read.
    monkeypatch.setattr("explorer.vault.pdf.MAX_PDF_PAGES", 2000)
    settings = LEXICAL.with_overrides({"index.cache_dir": str(tmp_path / "other")})
    index = VaultIndex(root, settings)
    index.open()
    warning = index.notes["many.pdf"].warnings[0]
    assert warning.startswith("truncated: only the first ") and "within 0.1 s (the limit per PDF)" in warning
    assert 1 <= len(index.shards_by_path["many.pdf"]) < 3000
    index.close()


def test_one_page_that_fails_does_not_lose_the_others(tmp_path: Path) -> None:
    root = write_notes(tmp_path / "v", {"a.md": "anchor\n"})
    (root / "three.pdf").write_bytes(damaged_page_pdf(["first words", "second words", "third words"], 2))
    index = VaultIndex(root, LEXICAL)
    index.open()
    assert index.shards_by_path["three.pdf"] == ["three.pdf#page=1", "three.pdf#page=3"]
    assert index.notes["three.pdf"].warnings == (
        "page 2 not read: NotImplementedError: Unsupported filter /Nonsense",
    )
    index.close()


def test_pdfs_setting_off_leaves_them_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from explorer.cli import main

    root = _vault(tmp_path)
    argv = [
        "stats",
        str(root),
        "--coverage",
        "--json",
        "--no-embeddings",
        "--set",
        "vault.pdfs=false",
        "--set",
        "vault.canvases=false",
        "--set",
        f"index.cache_dir={tmp_path / 'off'}",
    ]
    assert main(argv) == 0
    ignored = json.loads(capsys.readouterr().out)["coverage"]["ignored"]
    assert ignored[".pdf files not read (setting vault.pdfs is off)"]["examples"] == ["Papers/hamsters.pdf"]
    assert ignored[".canvas files not read (setting vault.canvases is off)"]["examples"] == ["board.canvas"]
    index = VaultIndex(root, LEXICAL.with_overrides({"vault.pdfs": False, "vault.canvases": False}))
    index.open()
    assert set(index.notes) == {"Notes/Cages.md", "Notes/Wheels.md"}
    assert index.skipped == {}
    index.close()
    # Turned on again: the next open reads them.
    index = VaultIndex(root, LEXICAL)
    report = index.open()
    assert sorted(report.added) == ["Papers/hamsters.pdf", "board.canvas"]
    index.close()


def test_warm_restart_reads_no_pdf_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _vault(tmp_path)
    index = VaultIndex(root, LEXICAL)
    index.open()
    before = {p: list(ids) for p, ids in index.shards_by_path.items()}
    index.close()

    reads: list[str] = []
    real = pdf_mod.read_pdf

    def counting(abspath, settings, *args, **kwargs):
        reads.append(str(abspath))
        return real(abspath, settings, *args, **kwargs)

    monkeypatch.setattr(pdf_mod, "read_pdf", counting)
    index = VaultIndex(root, LEXICAL)
    report = index.open()
    assert report.added == [] and report.changed == [] and reads == []
    assert {p: list(ids) for p, ids in index.shards_by_path.items()} == before
    # Stored text and backlinks come back from the store.
    assert index.note("Papers/hamsters.pdf").text.count("── page") == 3
    assert _finds(index, "cheek pouches")[0] == "Papers/hamsters.pdf#page=1"
    assert "board.canvas" in {b.source for b in index.links().backlinks("Notes/Cages.md")}
    # A changed PDF is read again.
    (root / "Papers/hamsters.pdf").write_bytes(text_pdf(["Gerbils dig tunnels."]))
    report = index.refresh()
    assert report.changed == ["Papers/hamsters.pdf"] and len(reads) == 1
    assert index.shards_by_path["Papers/hamsters.pdf"] == ["Papers/hamsters.pdf#page=1"]
    index.close()


# -- canvases ----------------------------------------------------------------------------------
def test_canvas_cards_are_shards_and_file_cards_and_edges_are_links(tmp_path: Path) -> None:
    index = VaultIndex(_vault(tmp_path), LEXICAL)
    index.open()
    # Text and link cards are shards (first those in no group, then each group's), in reading order;
    # file cards and the group are not. A card in a group has the group's label as its heading path.
    assert index.shards_by_path["board.canvas"] == [
        "board.canvas#a1b2",
        "board.canvas#g7h8",
        "board.canvas#i9j0",
    ]
    assert [index.shards[i].heading_path for i in index.shards_by_path["board.canvas"]] == [
        (),
        ("Shopping",),
        ("Shopping",),
    ]
    assert _finds(index, "zeppelin")[0] == "board.canvas#g7h8"
    assert _finds(index, "shopping")[0] in ("board.canvas#g7h8", "board.canvas#i9j0")
    note = index.note("board.canvas")
    assert note.title == "board" and note.tag_names == ("pets",)
    assert [h.text for h in note.headings] == ["Shopping", "Wheel"]  # a card's own heading stays in the card
    card = index.shards["board.canvas#a1b2"]
    assert card.text.startswith(
        "Plan the hamster habitat #pets\nwith a wheel\n\n- → needs: [[Notes/Cages.md]]"
    )
    graph = index.links()
    # The file cards point to notes; an edge from a text card and an edge between two file cards are links too.
    assert {b.source for b in graph.backlinks("Notes/Cages.md")} == {"board.canvas"}
    assert {b.source for b in graph.backlinks("Notes/Wheels.md")} == {"board.canvas"}
    targets = {(link.target, link.heading, link.embed, link.alias) for link in note.links}
    assert ("Notes/Wheels.md", "Size", True, "") in targets  # the file card with its subpath
    assert ("Notes/Wheels.md", "", False, "") in targets  # the edge "with" from the Cages card
    assert (
        "board.canvas",
        "",
        False,
        "Wheel Buy a zeppelin wheel and bedding",
    ) in targets  # edge to a text card
    assert not any("missing" in link.target for link in note.links)  # an edge to no card is left out
    index.close()


@pytest.mark.parametrize(
    "content, reason",
    [
        ("{not json", "broken canvas: not JSON"),
        ("[" * 200_000 + "]" * 200_000, "broken canvas: JSON nested too deeply"),
        ('["a list"]', "broken canvas: the JSON is a list, not an object"),
    ],
)
def test_broken_canvas_is_skipped_with_a_reason(tmp_path: Path, content: str, reason: str) -> None:
    root = write_notes(tmp_path / "v", {"bad.canvas": content, "good.md": "fine words\n"})
    index = VaultIndex(root, LEXICAL)
    index.open()
    assert index.skipped["bad.canvas"].startswith(reason)
    assert set(index.notes) == {"good.md"}
    index.close()


def test_a_50_mb_canvas_is_skipped_and_odd_cards_are_dropped(tmp_path: Path) -> None:
    big = {
        "nodes": [
            {"id": f"n{i}", "type": "text", "text": "word " * 100, "x": i, "y": 0} for i in range(100_000)
        ]
    }
    odd = {
        "nodes": [
            {"id": 7, "type": "text", "text": "numeric id"},
            {"type": "text", "text": "no id"},
            {"id": "x", "type": "weird", "text": "unknown type"},
            {"id": "y", "type": "text", "text": ["list"]},
            {"id": "z", "type": "text", "text": "kept words", "x": "left"},
            "not a card",
        ],
        "edges": [{"fromNode": "z", "toNode": "z"}, None],
    }
    root = write_notes(tmp_path / "v", {"odd.canvas": json.dumps(odd), "empty.canvas": ""})
    (root / "big.canvas").write_text(json.dumps(big))
    assert (root / "big.canvas").stat().st_size > 50_000_000
    index = VaultIndex(root, LEXICAL)
    index.open()
    assert index.skipped["big.canvas"].startswith("too large:")
    assert index.shards_by_path["odd.canvas"] == ["odd.canvas#z"]
    assert index.shards_by_path["empty.canvas"] == [
        "empty.canvas"
    ]  # no cards: one empty shard finds its name
    index.close()


# -- the CLI, the terminal, the watcher ---------------------------------------------------------
def test_cli_stats_and_search_show_pdfs_and_canvases_safely(tmp_path: Path) -> None:
    root = _vault(
        tmp_path,
        {
            "Bad/encrypted.pdf": HOSTILE["encrypted"](),
            "Bad/escape.pdf": hostile_text_pdf(),
            "Bad/xref.pdf": HOSTILE["broken-xref"](),
            "Bad/bomb.pdf": HOSTILE["bomb-200MB"](),
        },
    )
    (root / "evil.canvas").write_text(
        json.dumps(
            {"nodes": [{"id": "e\x1b[2Jvil", "type": "text", "text": "card \x1b]0;owned\x07 escape title"}]}
        )
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    stats = subprocess.run(
        [*EXPLORER, "stats", str(root)], capture_output=True, text=True, env=env, timeout=120
    )
    assert stats.returncode == 0, stats.stderr
    assert "Bad/encrypted.pdf: encrypted PDF (needs a password)" in stats.stdout
    assert (
        stats.stderr == ""
    )  # the PDF library's own complaints never reach the terminal (they would draw over the app)
    out = subprocess.run(
        [*EXPLORER, "search", "-V", str(root), "--no-embeddings", "--json", "cheek pouches"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    first = json.loads(out.stdout)["results"][0]
    assert first["node_id"] == "Papers/hamsters.pdf#page=1"
    for query in ("escape title", "owned cleared"):
        shown = subprocess.run(
            [*EXPLORER, "search", "-V", str(root), "--no-embeddings", query],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert shown.returncode == 0, shown.stderr
        assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
        assert "escape" in shown.stdout


def test_watcher_follows_pdf_and_canvas_changes(tmp_path: Path) -> None:
    from explorer.engine.watch import VaultWatcher

    root = write_notes(tmp_path / "v", {"keep.md": "steady anchor\n"})
    index = VaultIndex(root, LEXICAL.with_overrides({"experimental.watch_debounce_ms": 100}))
    batches = []
    idle = threading.Event()
    watcher = VaultWatcher(index, on_batch=lambda b: (batches.append(b), idle.set()))
    watcher.start()
    try:
        assert watcher.wait_idle(20)
        (root / "paper.pdf").write_bytes(text_pdf(["quokka census results"]))
        (root / "board.canvas").write_text(
            json.dumps({"nodes": [{"id": "c1", "type": "text", "text": "wombat plan"}]})
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not {"paper.pdf", "board.canvas"} <= set(index.notes):
            time.sleep(0.05)
        assert watcher.wait_idle(20)
        assert _finds(index, "quokka") == ["paper.pdf#page=1"] and _finds(index, "wombat") == [
            "board.canvas#c1"
        ]

        (root / "paper.pdf").write_bytes(text_pdf(["numbat census", "second page"]))
        (root / "board.canvas").write_text(
            json.dumps({"nodes": [{"id": "c2", "type": "text", "text": "bilby plan"}]})
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (_finds(index, "numbat") and _finds(index, "bilby")):
            time.sleep(0.05)
        assert watcher.wait_idle(20)
        assert _finds(index, "quokka") == [] and _finds(index, "numbat") == ["paper.pdf#page=1"]
        assert _finds(index, "wombat") == [] and _finds(index, "bilby") == ["board.canvas#c2"]

        (root / "paper.pdf").unlink()
        (root / "board.canvas").unlink()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and ({"paper.pdf", "board.canvas"} & set(index.notes)):
            time.sleep(0.05)
        assert watcher.wait_idle(20)
        assert set(index.notes) == {"keep.md"}
    finally:
        watcher.stop()
        index.close()


def test_bomb_page_alone_costs_little(tmp_path: Path) -> None:
    """The library's decompression limit stops a 200 MB bomb page (measured in BENCHMARKS.md)."""
    (tmp_path / "bomb.pdf").write_bytes(bomb_pdf(200))
    pages, reason, _warnings = pdf_mod.read_pdf(tmp_path / "bomb.pdf", Settings().vault)
    assert pages is None and "LimitReachedError" in reason


def test_a_million_real_page_references_are_refused_quickly(tmp_path: Path) -> None:
    """10^6 entries in one page-tree array: pypdf's array limit (100,000) refuses the file; under a second measured."""
    (tmp_path / "million.pdf").write_bytes(many_pages_pdf(kids=1_000_000, count=1_000_000))
    pages, reason, _warnings = pdf_mod.read_pdf(tmp_path / "million.pdf", Settings().vault)
    assert pages is None and reason == "broken PDF: LimitReachedError: Reached maximum array element count."


def test_any_canvas_document_reads_without_error() -> None:
    """Whatever JSON a canvas holds, reading it never fails, and each card's span lies in the text."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from explorer.vault.canvas import canvas_note
    from explorer.vault.shard import make_shards

    scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=30))
    value = st.recursive(
        scalar,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
        max_leaves=8,
    )
    ids = st.sampled_from(["a", "b", "c", "d e", "#x", ""])
    node = st.fixed_dictionaries(
        {"id": ids, "type": st.sampled_from(["text", "file", "link", "group", "other"])},
        optional={
            "text": st.one_of(st.text(max_size=40), value),
            "file": st.text(max_size=20),
            "subpath": st.text(max_size=10),
            "url": st.text(max_size=20),
            "label": st.text(max_size=20),
            "x": value,
            "y": value,
            "width": value,
            "height": value,
        },
    )
    edge = st.fixed_dictionaries({"fromNode": ids, "toNode": ids}, optional={"label": value})
    doc = st.fixed_dictionaries(
        {},
        optional={
            "nodes": st.one_of(st.lists(st.one_of(node, value), max_size=6), value),
            "edges": st.one_of(st.lists(st.one_of(edge, value), max_size=6), value),
        },
    )

    @settings(max_examples=200, deadline=None)
    @given(doc)
    def check(data) -> None:
        note = canvas_note("b.canvas", data)
        for block in note.blocks:
            assert 0 <= block.start <= block.end <= len(note.text)
        for shard in make_shards(note):
            assert note.text[shard.start : shard.end] == shard.text and shard.node_id.startswith("b.canvas")

    check()
