"""Conversation turns re-ordered by the turn model (explorer.search.memory.rescore), through the real pipeline and model."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import embedded_index, turn_notes, write_notes
from explorer.config import load_settings
from explorer.index.local.vault_index import VaultIndex
from explorer.search.core.pipeline import SearchPipeline
from explorer.search.memory.rescore import skips_rescore

_SAID = [
    ("Ana", "I went swimming with the kids this morning, the water was cold but lovely."),
    ("Ben", "Nice! What other activities do you do on weekends?"),
    ("Ana", "Pottery! I made a bowl last week and I love it so much."),
    ("Ben", "I only watch football."),
    ("Ana", "We went camping in the mountains, the kids loved the campfire."),
    ("Ben", "Activities like that sound fun. I should find some activities too."),
    ("Ana", "I also started painting sunsets, it calms me down after work."),
    ("Ben", "Do you like running?"),
    ("Ana", "Running is not for me, but I do yoga twice a week."),
    ("Ben", "My new job starts on Monday, I am nervous."),
    ("Ana", "You will do great, I believe in you."),
    ("Ben", "Thanks. The weather is awful today."),
    ("Ana", "Our garden has tomatoes and basil now."),
    ("Ben", "I bought a new bike for the commute."),
]
TURNS = turn_notes(_SAID)


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, embedder):
    with embedded_index(write_notes(tmp_path_factory.mktemp("turns") / "v", TURNS), embedder) as ix:
        yield ix


def _search(index: VaultIndex, query: str, **overrides):
    settings = index.settings.with_overrides(overrides) if overrides else index.settings
    return SearchPipeline(index, settings).search(query, k=10, two_pass=False)


def _searched(res) -> list:
    return [r for r in res.results if r.source == "search"]


def test_a_list_question_reorders_the_turns_and_keeps_the_fused_scores(index: VaultIndex) -> None:
    query = "What activities does Ana do?"
    on = _searched(_search(index, query))
    off = _searched(_search(index, query, **{"experimental.turn_rescore": False}))
    assert [r.document_path for r in on] != [r.document_path for r in off]  # the order moved
    # the scores stay those the fusion gave, each now held by the turn placed there
    assert [r.score for r in on] == pytest.approx([r.score for r in off])
    moved = [r for r in on for c in r.explanation.contributions if c.retriever == "rescore"]
    assert moved
    for r in on:  # the explanation still sums to the score
        assert r.rrf_score == pytest.approx(sum(c.contribution for c in r.explanation.contributions))

    def place(results, text: str) -> int:
        return next(i for i, r in enumerate(results) if text in r.snippet or text in r.context_shards[0].text)

    # Ana's four turns that answer stay in the first six places (the other person's turns that ask
    # about activities rise with them: they match the question's words one by one)
    answers = ("Pottery!", "went swimming", "went camping", "started painting")
    assert max(place(on, text) for text in answers) < 6


def test_when_questions_unnamed_vaults_and_no_model_keep_the_fused_order(index: VaultIndex) -> None:
    assert skips_rescore("When did Ana go camping?")
    assert skips_rescore("In what year did Ben start his job? How long ago?")
    assert not skips_rescore("What activities does Ana do?")
    for query, extra in (
        ("When did Ana go camping?", {}),
        ("What activities does Ana do?", {"experimental.dialog_words": 0.0, "experimental.fusion": "rrf"}),
    ):
        on = _search(index, query, **extra)
        off = _search(index, query, **{**extra, "experimental.turn_rescore": False})
        assert [(r.document_path, r.score) for r in _searched(on)] == [
            (r.document_path, r.score) for r in _searched(off)
        ]
        assert not any(c.retriever == "rescore" for r in _searched(on) for c in r.explanation.contributions)


def test_bm25_only_vault_keeps_the_fused_order(tmp_path: Path) -> None:
    vault = write_notes(tmp_path / "v", TURNS)
    ix = VaultIndex(vault, load_settings(vault, {"index.embeddings": False}))
    ix.open()
    try:
        on = _search(ix, "What activities does Ana do?")
        off = _search(ix, "What activities does Ana do?", **{"experimental.turn_rescore": False})
        assert [r.document_path for r in _searched(on)] == [r.document_path for r in _searched(off)]
    finally:
        ix.close()


def test_a_notes_vault_is_untouched(sample_index) -> None:
    for query in ("hamster diet", "what did I write about sourdough?", "meeting notes"):
        on = SearchPipeline(sample_index, sample_index.settings).search(query, k=10)
        off = SearchPipeline(
            sample_index, sample_index.settings.with_overrides({"experimental.turn_rescore": False})
        ).search(query, k=10)
        assert [(r.document_path, r.score) for r in on.results] == [
            (r.document_path, r.score) for r in off.results
        ]
