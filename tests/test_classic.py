"""Classic cursor search tools: TF-IDF, boolean AND, fuzzy, exact phrase; fallbacks, cursors, updates, CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import write_notes
from explorer.cli import main
from explorer.config import Settings
from explorer.index.local.classic import (
    DEFAULTS,
    MAX_RESULTS,
    MAX_SNIPPET_CHARS,
    ClassicIndex,
    ClassicQueryError,
    ClassicResult,
    run_mode,
)
from explorer.index.local.vault_index import VaultIndex

NOTES = {
    "Knowledge/great-wall.md": (
        "# Great Wall\n\n"
        "The Great Wall was built over many centuries. Construction of the Great Wall began under the Qin. ^qin\n\n"
        "## Ming\n\n"
        "The Ming Dynasty rebuilt the wall in brick; the builders used lime mortar.\n"
    ),
    "History/walls.md": "# Walls\n\nA wall is great when it is tall. Hadrian's Wall stands in Britain and its construction took six years.\n",
    "Pets/hamster.md": (
        "# Hamster\n\nA hamster cage needs deep bedding. Hamsters love tunnels and a birdcage is too small.\n\n"
        "## Food\n\nSeeds and fresh vegetables.\n"
    ),
    "Journal/day.md": "# Day\n\nI saw the GREAT\n    WALL in a film. The moon over the lake was bright.\n",
    "Journal/night.md": "# Night\n\nLater we walked to the lake under the moon.\n",
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


def assert_exact(index: VaultIndex, result: ClassicResult) -> None:
    """Every hit's cursor points at its match; snippet and highlights are the note's text."""
    for h in result.hits:
        text = index.notes[h.path].text
        assert text[h.cursor : h.cursor + len(h.match)].casefold() == h.match.casefold()
        assert h.match
        assert text[h.snippet_start : h.snippet_end] == h.snippet
        assert h.snippet_start <= h.cursor < h.snippet_end
        for hl in h.highlights:
            assert h.snippet_start <= hl.start < hl.end <= h.snippet_end
        shard = index.shard_at(h.path, h.cursor)
        assert shard is not None and h.node_id == shard.node_id


# -- TF-IDF -----------------------------------------------------------------------------------
def test_tfidf_ranks_the_location_with_both_units_first(index: VaultIndex) -> None:
    res = index.classic().search_context(["Great Wall", "construction"])
    assert res.stage == "tfidf" and res.stages_tried == ("tfidf",) and not res.warnings
    assert_exact(index, res)
    top = res.hits[0]
    assert top.path == "Knowledge/great-wall.md"
    assert top.keywords == ("Great Wall", "construction")
    assert top.match == "Great Wall" and top.cursor == 2
    # "Great Wall" is one unit: matched side by side (across a line break too), never as separate words.
    rest = {h.path: h for h in res.hits[1:]}
    assert set(rest) == {"History/walls.md", "Journal/day.md"}
    assert rest["History/walls.md"].keywords == ("construction",)
    assert rest["Journal/day.md"].match == "GREAT\n    WALL"
    idf = math.log(1 + 5 / 2)  # 5 notes, each unit in 2 of them
    assert top.score == pytest.approx(idf * (1 + math.log(3)) + idf)
    assert rest["History/walls.md"].score == pytest.approx(idf)
    assert [h.path for h in res.hits[1:]] == ["History/walls.md", "Journal/day.md"]  # ties: by path


def test_tfidf_rare_term_outweighs_common_one(index: VaultIndex) -> None:
    res = index.classic().search_context(["wall", "mortar"], context_chars=60)
    assert_exact(index, res)
    top = res.hits[0]
    assert top.node_id == "Knowledge/great-wall.md#Ming"
    assert top.match == "wall" and top.keywords == ("wall", "mortar")
    assert top.score == pytest.approx(math.log(1 + 5 / 3) + math.log(1 + 5 / 1))
    assert {(hl.term) for hl in top.highlights} >= {"wall", "mortar"}
    assert all(h.score <= top.score for h in res.hits)


def test_fallback_order_tfidf_then_and_then_fuzzy(index: VaultIndex) -> None:
    c = index.classic()
    # "tall wall" never stands side by side, but both words are near each other in one note.
    res = c.search_context(["tall wall"])
    assert res.stage == "and" and res.stages_tried == ("tfidf", "and")
    assert "tfidf: no match" in res.warnings
    assert [h.path for h in res.hits] == ["History/walls.md"]
    assert_exact(index, res)
    # A typo: neither TF-IDF nor AND find it, fuzzy does.
    res = c.search_context(["hamstr"])
    assert res.stage == "fuzzy" and res.stages_tried == ("tfidf", "and", "fuzzy")
    assert res.warnings[:2] == ("tfidf: no match", "and: no match")
    assert res.hits[0].path == "Pets/hamster.md"
    assert dict(res.expansions)["hamstr"][0] == "hamster"
    assert_exact(index, res)
    # Nothing anywhere: every stage tried, no hits, no error.
    res = c.search_context(["zzyzx"])
    assert res.stage == "none" and res.hits == () and res.total == 0
    assert res.stages_tried == ("tfidf", "and", "fuzzy")


# -- exact phrase -----------------------------------------------------------------------------
def test_phrase_is_case_insensitive_and_whitespace_tolerant(index: VaultIndex) -> None:
    c = index.classic()
    res = c.search_exact_phrase(["great", "wall"], context_chars=0)
    assert res.stage == "phrase"
    assert_exact(index, res)
    matches = sorted((h.path, h.match) for h in res.hits)
    assert matches == [
        ("Journal/day.md", "GREAT\n    WALL"),
        ("Knowledge/great-wall.md", "Great Wall"),
        ("Knowledge/great-wall.md", "Great Wall"),
        ("Knowledge/great-wall.md", "Great Wall"),
    ]
    # More occurrences in a note rank it higher; within a note, earlier first.
    assert res.hits[0].path == "Knowledge/great-wall.md"
    assert [h.cursor for h in res.hits[:3]] == sorted(h.cursor for h in res.hits[:3])
    # With the default 4000-character snippets, nearby occurrences fold into one hit.
    wide = c.search_exact_phrase(["great wall"])
    assert [h.path for h in wide.hits] == ["Knowledge/great-wall.md", "Journal/day.md"]
    assert len(wide.hits[0].highlights) == 3


def test_phrase_matches_whole_words_only(index: VaultIndex) -> None:
    res = index.classic().search_exact_phrase(["wall"], context_chars=0)
    assert res.hits and all(h.match.casefold() == "wall" for h in res.hits)
    assert_exact(index, res)


def test_phrase_falls_back_to_proximity_preferring_phrase_order(index: VaultIndex) -> None:
    res = index.classic().search_exact_phrase(["moon lake"])
    assert res.stage == "proximity" and res.stages_tried == ("phrase", "proximity")
    assert "phrase: no match" in res.warnings
    assert_exact(index, res)
    assert [h.path for h in res.hits] == ["Journal/day.md", "Journal/night.md"]
    # "moon over the lake" (in order, 4 words) beats "lake under the moon" (reversed, 4 words).
    assert res.hits[0].score == pytest.approx(2 / 4)
    assert res.hits[1].score == pytest.approx(2 / 4 * 0.8)
    assert res.hits[0].match == "moon" and res.hits[1].match == "lake"


# -- boolean AND ------------------------------------------------------------------------------
def test_and_requires_every_word_within_the_window(index: VaultIndex) -> None:
    c = index.classic()
    # "deep bedding. Hamsters love": the two words side by side (any form, any order).
    assert c.search_boolean_and(["hamster", "bedding"], window=1).hits == ()
    res = c.search_boolean_and(["hamster", "bedding"], window=2)
    assert [h.path for h in res.hits] == ["Pets/hamster.md"]
    h = res.hits[0]
    assert h.match == "bedding" and h.score == pytest.approx(1.0)
    assert {hl.term for hl in h.highlights} >= {"hamster", "bed"}
    # "cage needs deep bedding" is a window of 4 words: out with 3, in with 4.
    assert c.search_boolean_and(["cage", "bedding"], window=3).hits == ()
    res = c.search_boolean_and(["cage", "bedding"], window=4)
    assert res.hits[0].match == "cage" and res.hits[0].score == pytest.approx(2 / 4)
    assert_exact(index, res)
    assert c.search_boolean_and(["hamster", "mortar"]).hits == ()


def test_and_scores_proximity_and_completeness(index: VaultIndex) -> None:
    res = index.classic().search_boolean_and(["Great Wall", "construction"])
    assert_exact(index, res)
    assert [h.path for h in res.hits] == ["Knowledge/great-wall.md", "History/walls.md"]
    # "Construction of the Great Wall": 3 words over 5, "Great Wall" intact.
    assert res.hits[0].score == pytest.approx(3 / 5)
    assert res.hits[0].match == "Construction"
    # "great when it is tall. Hadrian's Wall stands in Britain and its construction": 3 over 13,
    # one keyword of two intact ("Great Wall" is not).
    assert res.hits[1].score == pytest.approx(3 / 13 * 0.75)


# -- fuzzy ------------------------------------------------------------------------------------
def test_fuzzy_tolerates_typos_inflections_and_partial_words(index: VaultIndex) -> None:
    c = index.classic()
    swapped = c.search_fuzzy(["bedidng"])  # adjacent letters swapped
    assert swapped.hits[0].match == "bedding"
    inflected = c.search_fuzzy(["tunneling"])
    assert inflected.hits[0].match == "tunnels"
    part = c.search_fuzzy(["bird"])  # contained in a longer word
    assert part.hits[0].match == "birdcage"
    for res in (swapped, inflected, part):
        assert res.stage == "fuzzy"
        assert res.hits[0].path == "Pets/hamster.md"
        assert_exact(index, res)


def test_fuzzy_is_an_or_of_keywords_and_ranks_more_matches_higher(index: VaultIndex) -> None:
    c = index.classic()
    res = c.search_fuzzy(["hamstr", "qqqzzz"])
    assert res.hits and res.hits[0].keywords == ("hamstr",)
    both = c.search_fuzzy(["hamstr", "bedidng"])
    assert both.hits[0].keywords == ("hamstr", "bedidng")
    assert both.hits[0].score > max(h.score for h in res.hits)
    assert dict(both.expansions) == {"hamstr": ("hamster",), "bedidng": ("bedding",)}


# -- the index itself -------------------------------------------------------------------------
def test_postings_are_char_spans_of_folded_tokens(index: VaultIndex) -> None:
    c = index.classic()
    text = index.notes["Pets/hamster.md"].text
    spans = c.postings("Pets/hamster.md")["hamster"]
    assert [text[s:e] for s, e in spans] == ["Hamster", "hamster", "Hamsters"]
    assert c.df("hamster") == 1 and c.df("wall") == 3
    assert c.postings("missing.md") == {}


def test_updates_with_each_batch_one_note_at_a_time(index: VaultIndex, vault: Path, monkeypatch) -> None:
    c = index.classic()
    assert len(c) == 5
    calls: list[str] = []
    original = ClassicIndex.add_note

    def spy(self: ClassicIndex, note) -> None:
        calls.append(note.path)
        original(self, note)

    monkeypatch.setattr(ClassicIndex, "add_note", spy)
    (vault / "Pets/hamster.md").write_text("# Hamster\n\nOur gerbil shares the cage now.\n", encoding="utf-8")
    index.refresh(["Pets/hamster.md"])
    res = run_mode(index, "tfidf", ["gerbil"])
    assert calls == ["Pets/hamster.md"]
    assert [h.path for h in res.hits] == ["Pets/hamster.md"]
    assert_exact(index, res)
    assert c.search_boolean_and(["bedding"]).hits == ()
    (vault / "Knowledge/great-wall.md").unlink()
    index.refresh()
    assert c.df("mortar") == 0 and len(c) == 4
    assert c.search_boolean_and(["mortar"]).hits == ()
    assert index.classic() is c


def test_standalone_index_add_and_remove(index: VaultIndex) -> None:
    c = ClassicIndex()
    note = index.notes["History/walls.md"]
    c.add_note(note)
    c.add_note(note)  # replacing keeps counts right
    assert c.df("wall") == 1 and len(c) == 1
    res = c.search_context(["Hadrian"])
    assert res.hits[0].node_id == "" and res.hits[0].match == "Hadrian's"
    assert c.remove_note("History/walls.md") and not c.remove_note("History/walls.md")
    assert c.df("wall") == 0 and c.search_context(["Hadrian"]).hits == ()


# -- bad input --------------------------------------------------------------------------------
@pytest.mark.parametrize("keywords", [[], [""], ["   ", "\t"], "", ["!!", "...", "—"]])
def test_empty_or_punctuation_keywords_are_refused(index: VaultIndex, keywords) -> None:
    for mode in ("tfidf", "phrase", "and", "fuzzy"):
        with pytest.raises(ClassicQueryError) as err:
            run_mode(index, mode, keywords)
        assert "keyword" in str(err.value)


def test_punctuation_keywords_among_words_are_dropped_with_a_warning(index: VaultIndex) -> None:
    res = run_mode(index, "tfidf", ["!!", "mortar"])
    assert res.keywords == ("mortar",) and res.hits
    assert any("'!!'" in w for w in res.warnings)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_results": 0}, "max_results"),
        ({"context_chars": -1}, "context_chars"),
        ({"window": 0}, "window"),
        ({"max_results": 2.5}, "whole number"),
    ],
)
def test_bad_parameters_are_refused(index: VaultIndex, kwargs, message) -> None:
    with pytest.raises(ClassicQueryError, match=message):
        run_mode(index, "and", ["wall"], **kwargs)


def test_huge_requests_are_capped_and_said_so(index: VaultIndex) -> None:
    res = run_mode(index, "tfidf", ["wall"], max_results=10**9, context_chars=10**9, window=10**9)
    assert f"max_results capped at {MAX_RESULTS}" in res.warnings
    assert f"context_chars capped at {MAX_SNIPPET_CHARS}" in res.warnings
    assert any(w.startswith("window capped") for w in res.warnings)
    assert res.hits and all(h.snippet == index.notes[h.path].text for h in res.hits)


def test_run_mode_dispatches_and_knows_defaults(index: VaultIndex) -> None:
    c = index.classic()
    assert run_mode(index, "and", ["wall", "great"]) == c.search_boolean_and(["wall", "great"])
    assert run_mode(c, "phrase", ["great wall"]) == c.search_exact_phrase(["great wall"])
    assert run_mode(index, "fuzzy", "hamstr").keywords == ("hamstr",)
    assert DEFAULTS["phrase"] == (10, 4000) and DEFAULTS["tfidf"] == (15, 300)
    with pytest.raises(ClassicQueryError, match="unknown mode"):
        run_mode(index, "regex", ["wall"])


# -- CLI --------------------------------------------------------------------------------------
def _cli(vault: Path, *args: str) -> list[str]:
    return ["find", "--vault", str(vault), "--no-embeddings", *args]


def test_cli_find_json_and_human(vault: Path, capsys) -> None:
    assert main(_cli(vault, "--mode", "phrase", "great wall", "--json")) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["stage"] == "phrase" and data["hits"][0]["path"] == "Knowledge/great-wall.md"
    text = (vault / data["hits"][0]["path"]).read_text(encoding="utf-8")
    hit = data["hits"][0]
    assert text[hit["cursor"] : hit["cursor"] + len(hit["match"])] == hit["match"]

    assert main(_cli(vault, "--mode", "and", "hamster", "bedding", "--window", "5", "-n", "1")) == 0
    out = capsys.readouterr().out
    assert "and: 1 result for ['hamster', 'bedding'] — stage and" in out
    assert "cursor 37" in out and "node: Pets/hamster.md" in out and "«bedding». «Hamsters»" in out


def test_cli_find_no_match_is_success(vault: Path, capsys) -> None:
    assert main(_cli(vault, "zzyzx", "--json")) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["hits"] == [] and data["stage"] == "none"
    assert main(_cli(vault, "--mode", "and", "zzyzx")) == 0
    assert "No match" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "at least one keyword"),
        (["  "], "at least one keyword"),
        (["!!", "?"], "no searchable words"),
        (["wall", "-n", "0"], "-n must be 1 or more"),
        (["wall", "--window", "0"], "--window must be 1 or more"),
        (["wall", "--context-chars", "-3"], "--context-chars must be 0 or more"),
    ],
)
def test_cli_find_bad_input_exits_2(vault: Path, capsys, args, message) -> None:
    assert main(_cli(vault, *args)) == 2
    assert message in capsys.readouterr().err


def test_cli_find_real_subprocess(vault: Path) -> None:
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "explorer"),
            "find",
            "--vault",
            str(vault),
            "--no-embeddings",
            "--mode",
            "fuzzy",
            "hamstr",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["stage"] == "fuzzy" and data["hits"][0]["path"] == "Pets/hamster.md"
    assert data["expansions"]["hamstr"][0] == "hamster"


def test_stop_words_are_dropped_from_tfidf_when_other_words_remain(index: VaultIndex) -> None:
    res = index.classic().search_context(["the", "mortar"])
    assert "tfidf: ignored stop-words the" in res.warnings
    assert res.hits[0].keywords == ("mortar",) and res.hits[0].match == "mortar"
    only = index.classic().search_context(["the"])
    assert only.stage == "tfidf" and only.hits and not any("stop-words" in w for w in only.warnings)
