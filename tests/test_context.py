"""Context windows: clamping and snapping, resolving node_ids and paths through the index, errors, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import write_notes
from explorer.cli import main
from explorer.config import Settings
from explorer.index.local.classic import run_mode
from explorer.index.local.vault_index import VaultIndex
from explorer.index.targets import ContextError, CursorOutOfRange, NoteNotFound, context_for, resolve_target
from explorer.vault.windows import MAX_CONTEXT_CHARS, get_context_at_cursor

WALL = (
    "# Great Wall\n\n"
    "The Great Wall was built over many centuries. Construction of the Great Wall began under the Qin. ^qin\n\n"
    "## Ming\n\n"
    "The Ming Dynasty rebuilt the wall in brick; the builders used lime mortar.\n\n"
    "## Empty\n"
    "## Sources\n\n"
    "Several chronicles.\n"
)
NOTES = {
    "Knowledge/great-wall.md": WALL,
    "Pets/hamster.md": "# Hamster\n\nA hamster cage needs deep bedding.\n",
}
OFF = {"index.embeddings": False}


@pytest.fixture()
def vault(tmp_path: Path) -> Path:
    return write_notes(tmp_path / "v", NOTES)


@pytest.fixture()
def index(vault: Path):
    ix = VaultIndex(vault, Settings().with_overrides(OFF))
    ix.open()
    yield ix
    ix.close()


# -- the window itself ------------------------------------------------------------------------
TEXT = "alpha beta gamma delta epsilon\nzeta eta theta iota kappa\nlambda mu nu xi omicron"


def test_window_is_clamped_at_note_bounds() -> None:
    w = get_context_at_cursor(TEXT, 3, chars_before=1000, chars_after=1000)
    assert (w.start, w.end, w.text) == (0, len(TEXT), TEXT)
    assert w.notes == () and w.note_chars == len(TEXT)
    w = get_context_at_cursor(TEXT, len(TEXT), chars_before=5, chars_after=50)
    assert w.end == len(TEXT) and w.text == TEXT[w.start :]


def test_window_snaps_to_whole_words_and_lines() -> None:
    cursor = TEXT.index("theta") + 2  # inside a word
    w = get_context_at_cursor(TEXT, cursor, chars_before=3, chars_after=3)
    assert TEXT[w.start - 1] in " \n" and TEXT[w.end] in " \n"
    assert w.text.split() and all(word in TEXT.split() for word in w.text.split())
    # A line start within reach is preferred: the window begins at "zeta".
    assert w.text.startswith("zeta")
    assert get_context_at_cursor(TEXT, cursor, 3, 3, snap=False).text == TEXT[cursor - 3 : cursor + 3]


def test_window_caps_huge_requests_and_says_so() -> None:
    big = "word " * (3 * MAX_CONTEXT_CHARS // 5)
    cursor = len(big) // 2
    w = get_context_at_cursor(big, cursor, chars_before=10**9, chars_after=10**9)
    assert f"window capped at {MAX_CONTEXT_CHARS} characters each side" in w.notes
    assert cursor - w.start <= MAX_CONTEXT_CHARS + 60 and w.end - cursor <= MAX_CONTEXT_CHARS + 60
    assert len(w.text) < len(big)


def test_window_highlights_folded_words_in_note_offsets() -> None:
    w = get_context_at_cursor(WALL, WALL.index("Ming"), 200, 200, words=["walls"])
    assert w.highlights and all(WALL[h.start : h.end].lower() == "wall" for h in w.highlights)
    assert w.to_dict()["highlights"][0]["term"] == "wall"


def test_search_and_context_highlight_the_same_spans(sample_pipeline, sample_copy: Path, capsys) -> None:
    """A result's passage and `explorer context` over the same span mark the same words."""
    res = sample_pipeline.search("syrian hamster cages", two_pass=False, record=False)
    c = res.results[0].context_shards[0]
    assert c.highlights, "the top passage matches the query"
    code = main(
        [
            "context",
            c.path,
            "--vault",
            str(sample_copy),
            "--cursor",
            str(c.start),
            "--before",
            "0",
            "--after",
            str(c.end - c.start),
            "--json",
            "--highlight",
            "syrian",
            "--highlight",
            "hamster",
            "--highlight",
            "cages",
        ]
    )
    assert code == 0
    window = json.loads(capsys.readouterr().out)
    inside = [
        (h["start"], h["end"]) for h in window["highlights"] if c.start <= h["start"] and h["end"] <= c.end
    ]
    assert inside == [(h.start, h.end) for h in c.highlights]


# -- resolving through the index --------------------------------------------------------------
def test_node_id_resolves_to_its_shard_start(index: VaultIndex) -> None:
    shard = index.shards["Knowledge/great-wall.md#Ming"]
    w = context_for(index, "Knowledge/great-wall.md#Ming", chars_before=0, chars_after=40)
    assert w.cursor == shard.start and w.node_id == shard.node_id and w.path == shard.path
    assert w.text.startswith("## Ming")


def test_paths_resolve_with_or_without_extension_and_by_stem(index: VaultIndex) -> None:
    # The bare path is also the node_id of the note's first shard.
    assert resolve_target(index, "Knowledge/great-wall.md").kind == "shard"
    for target in ("Knowledge/great-wall", "great-wall", "  great-wall  ", "knowledge/GREAT-WALL.md"):
        found = resolve_target(index, target)
        assert (found.path, found.cursor, found.kind) == ("Knowledge/great-wall.md", 0, "note")
    w = context_for(index, "great-wall", chars_after=12)
    assert w.start == 0 and w.text.startswith("# Great Wall") and w.node_id == "Knowledge/great-wall.md"


def test_block_ids_and_headings_resolve(index: VaultIndex) -> None:
    note = index.notes["Knowledge/great-wall.md"]
    block = next(b for b in note.blocks if b.id == "qin")
    found = resolve_target(index, "Knowledge/great-wall.md#^qin")
    assert (found.cursor, found.kind) == (block.start, "block")
    w = context_for(index, "great-wall#^qin", chars_before=0, chars_after=20)
    assert w.cursor == block.start and w.text.startswith("The Great Wall was built")
    # "## Empty" has no text of its own, so no shard: it resolves as a heading.
    found = resolve_target(index, "Knowledge/great-wall.md#Empty")
    assert (found.kind, WALL[found.cursor : found.cursor + 8]) == ("heading", "## Empty")
    # Headings match case-insensitively, by their own text or their path.
    ming = index.shards["Knowledge/great-wall.md#Ming"].start
    assert resolve_target(index, "great-wall#ming").cursor == ming
    assert resolve_target(index, "great-wall#Sources").cursor == WALL.index("## Sources")


def test_search_hit_cursor_opens_at_the_match(index: VaultIndex) -> None:
    hit = run_mode(index, "tfidf", ["mortar"]).hits[0]
    w = context_for(index, hit.node_id, hit.cursor, chars_before=30, chars_after=30, words=["mortar"])
    assert w.cursor == hit.cursor and w.node_id == "Knowledge/great-wall.md#Ming"
    rel = hit.cursor - w.start
    assert w.text[rel : rel + len(hit.match)] == hit.match == "mortar"
    assert [(h.start, h.end) for h in w.highlights] == [(hit.cursor, hit.cursor + 6)]
    # The path works as well as the node_id.
    assert context_for(index, hit.path, hit.cursor, 30, 30).text == w.text


# -- bad input --------------------------------------------------------------------------------
def test_cursor_beyond_the_note_is_refused_or_clamped(index: VaultIndex) -> None:
    n = len(WALL)
    with pytest.raises(
        CursorOutOfRange, match=f"beyond the end of Knowledge/great-wall.md \\({n} characters\\)"
    ):
        context_for(index, "Knowledge/great-wall.md", n + 1)
    w = context_for(index, "Knowledge/great-wall.md", n + 500, chars_before=20, clamp=True)
    assert w.cursor == n and w.end == n and any("clamped" in note for note in w.notes)
    assert context_for(index, "Knowledge/great-wall.md", n).cursor == n  # the end itself is a valid cursor


def test_negative_cursor_is_refused_or_clamped(index: VaultIndex) -> None:
    with pytest.raises(CursorOutOfRange, match="negative"):
        context_for(index, "Knowledge/great-wall.md#Ming", -1)
    w = context_for(index, "Knowledge/great-wall.md#Ming", -7, chars_after=10, clamp=True)
    assert w.cursor == 0 and w.start == 0 and w.notes


def test_note_deleted_since_the_search(index: VaultIndex, vault: Path) -> None:
    hit = run_mode(index, "and", ["hamster", "cage"]).hits[0]
    (vault / hit.path).unlink()
    # Not yet noticed by the index: the file check catches it.
    with pytest.raises(NoteNotFound, match="deleted or renamed since it was indexed"):
        context_for(index, hit.node_id, hit.cursor)
    index.refresh()
    with pytest.raises(NoteNotFound, match=r"no note 'Pets/hamster.md' in the index"):
        context_for(index, hit.node_id, hit.cursor)
    with pytest.raises(NoteNotFound):
        context_for(index, hit.path)


def test_unknown_targets_and_bad_sizes(index: VaultIndex, vault: Path) -> None:
    with pytest.raises(ContextError, match="empty target"):
        context_for(index, "  ")
    with pytest.raises(ContextError, match=r"no block \^nope in Knowledge/great-wall.md"):
        context_for(index, "Knowledge/great-wall.md#^nope")
    with pytest.raises(ContextError, match=r"no section 'Nowhere' in Knowledge/great-wall.md"):
        context_for(index, "Knowledge/great-wall.md#Nowhere")
    with pytest.raises(ContextError, match="chars_before"):
        context_for(index, "great-wall", chars_before=-1)
    (vault / "broken.md").write_bytes(b"\xff\xfe\x00bad \x00 bytes")
    index.refresh()
    with pytest.raises(NoteNotFound, match=r"broken.md is not indexed"):
        context_for(index, "broken.md")


def test_huge_context_requests_are_capped_through_the_index(index: VaultIndex) -> None:
    w = context_for(index, "great-wall", 10, chars_before=10**8, chars_after=10**8)
    assert f"window capped at {MAX_CONTEXT_CHARS} characters each side" in w.notes
    assert w.text == WALL


# -- CLI --------------------------------------------------------------------------------------
def _cli(vault: Path, *args: str) -> list[str]:
    return ["context", "--vault", str(vault), "--no-embeddings", *args]


def test_cli_context_json_and_human(vault: Path, capsys) -> None:
    assert main(_cli(vault, "Knowledge/great-wall.md#^qin", "--before", "0", "--after", "30", "--json")) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["path"] == "Knowledge/great-wall.md" and data["cursor"] == WALL.index("The Great Wall was")
    assert data["text"].startswith("The Great Wall was built") and data["note_chars"] == len(WALL)

    assert main(_cli(vault, "great-wall#Ming", "--highlight", "mortar", "--after", "200")) == 0
    out = capsys.readouterr().out
    assert out.startswith("Knowledge/great-wall.md  cursor ") and "node: Knowledge/great-wall.md#Ming" in out
    assert "«mortar»" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["great-wall", "--cursor", "99999"], "beyond the end"),
        (["great-wall", "--cursor", "-4"], "negative"),
        (["missing-note"], "no note 'missing-note'"),
        (["great-wall#^zzz"], "no block"),
        (["great-wall", "--before", "-1"], "chars_before"),
    ],
)
def test_cli_context_bad_input_exits_2(vault: Path, capsys, args, message) -> None:
    assert main(_cli(vault, *args)) == 2
    assert message in capsys.readouterr().err


def test_cli_context_huge_request_says_capped(vault: Path, capsys) -> None:
    assert main(_cli(vault, "great-wall", "--before", "999999999", "--after", "999999999")) == 0
    assert f"note: window capped at {MAX_CONTEXT_CHARS} characters each side" in capsys.readouterr().out
