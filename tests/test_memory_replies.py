"""A question to a named person: the turn that asks lends its score to the reply (explorer.search.memory.signals.lift_answers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import write_notes
from explorer.config import load_settings
from explorer.index.local.vault_index import VaultIndex
from explorer.search.core.pipeline import SearchPipeline
from explorer.search.memory.signals import asks


def _turn(number: int, speaker: str, session: int, text: str, prefix: bool = True) -> tuple[str, str]:
    front = f"---\nturn_id: {number}\nspeaker: {speaker}\nsession: {session}\ndate: 2023-05-0{session}\n---\n"
    said = f"{speaker}: {text}" if prefix else text
    return f"Users/{speaker}/turns/turn_{number:06d}/context.md", f"{front}{said}\n"


ASKED = "Users/Ben/turns/turn_000002/context.md"
REPLY = "Users/Ana/turns/turn_000003/context.md"
TURNS = dict(
    [
        _turn(1, "Ana", 1, "I spent the weekend at home."),
        _turn(2, "Ben", 1, "Cool! Do you play any instruments?"),
        _turn(3, "Ana", 1, "Yes, the clarinet, since school.", prefix=False),  # no word of the query
        _turn(4, "Ben", 1, "Lovely."),
        _turn(5, "Ana", 2, "My sister plays the violin, an instrument I never learnt."),
        _turn(6, "Ben", 2, "I play football on Sundays."),
        _turn(7, "Ana", 2, "The marathon training is hard."),
        _turn(8, "Ben", 2, "We painted the fence green."),
        *(
            _turn(9 + i, ("Ana", "Ben")[i % 2], 3 + i // 4, text)
            for i, text in enumerate(
                [
                    "I read a novel about whales.",
                    "Our garden has tomatoes now.",
                    "The concert hall was loud.",
                    "I fixed my bicycle chain.",
                    "We baked bread with rye.",
                    "The museum was closed.",
                    "A storm broke the old oak.",
                    "My cousin moved to Lisbon.",
                    "The train left late again.",
                    "We adopted a grey kitten.",
                    "The river flooded the meadow.",
                    "I sold the blue sofa.",
                    "Our team lost the quiz.",
                    "The bakery opened a new shop.",
                    "I learnt to knit a scarf.",
                    "The ferry crossed at dawn.",
                    "We climbed the northern ridge.",
                    "My laptop needs a new battery.",
                    "The library extended its hours.",
                    "I planted tulips by the gate.",
                ]
            )
        ),
    ]
)


@pytest.fixture()
def index(tmp_path: Path):
    vault = write_notes(tmp_path / "v", TURNS)
    ix = VaultIndex(vault, load_settings(vault, {"index.embeddings": False}))
    ix.open()
    yield ix
    ix.close()


def _search(index: VaultIndex, query: str, **overrides):
    settings = index.settings.with_overrides(overrides) if overrides else index.settings
    return SearchPipeline(index, settings).search(query, k=10, two_pass=False)


def _rank(results, path: str) -> int | None:
    paths = [r.document_path for r in results.results]
    return paths.index(path) + 1 if path in paths else None


def test_the_reply_to_a_question_asked_of_the_named_person_moves_up_and_the_question_down(
    index: VaultIndex,
) -> None:
    off = _search(index, "What instruments does Ana play?", **{"experimental.answer_weight": 0.0})
    on = _search(index, "What instruments does Ana play?")
    assert _rank(on, REPLY) < _rank(off, REPLY)  # the reply moves up
    assert _rank(on, ASKED) > _rank(off, ASKED)  # and the question down
    reply = next(r for r in on.results if r.document_path == REPLY)
    lent = [c for c in reply.explanation.contributions if c.retriever == "answer"]
    assert len(lent) == 1 and lent[0].term == ASKED
    asked = next(r for r in on.results if r.document_path == ASKED)
    assert [c.retriever for c in asked.explanation.contributions if c.contribution < 0] == ["asks"]
    for r in (reply, asked):  # the explanation still sums to the fused score
        assert r.rrf_score == pytest.approx(sum(c.contribution for c in r.explanation.contributions))
    assert not any(
        c.retriever in ("answer", "asks") for r in off.results for c in r.explanation.contributions
    )


def test_a_reply_no_ranking_found_enters_the_list(index: VaultIndex) -> None:
    # Without the neighbours' words the reply shares no word with the query: only the lift brings it.
    off = _search(
        index,
        "What instruments does Ana play?",
        **{"experimental.dialog_words": 0.0, "experimental.answer_weight": 0.0},
    )
    on = _search(index, "What instruments does Ana play?", **{"experimental.dialog_words": 0.0})
    assert _rank(off, REPLY) is None
    assert _rank(on, REPLY) is not None
    reply = next(r for r in on.results if r.document_path == REPLY)
    assert [c.retriever for c in reply.explanation.contributions] == ["answer"]


def test_nothing_moves_when_nobody_is_named_or_the_named_person_asks(index: VaultIndex) -> None:
    for query in ("what instruments do people play?", "What instruments does Ben play?"):
        on = _search(index, query)
        off = _search(index, query, **{"experimental.answer_weight": 0.0})
        assert [r.document_path for r in on.results] == [r.document_path for r in off.results]
        assert [r.rrf_score for r in on.results] == pytest.approx([r.rrf_score for r in off.results])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Ben: Cool! Do you play any instruments?", True),
        ("Ben: What? I play the piano.", False),
        ("Ana: Did you see it?\n\n(shared an image: a photo of a lake)", True),
        ("Ana: It was great.", False),
    ],
)
def test_a_turn_asks_when_its_first_paragraph_ends_in_a_question_mark(text: str, expected: bool) -> None:
    assert asks(text) is expected


def test_notes_that_are_not_turns_of_a_session_are_left_alone(tmp_path: Path) -> None:
    notes = {
        "Users/Ben/questions.md": "Ben: do you play any instruments?\n",
        "Users/Ben/later.md": "nothing here\n",
        "Users/Ana/answers.md": "Ana: the clarinet\n",
        "Users/Ana/more.md": "Ana: the garden and the lake\n",
    }
    vault = write_notes(tmp_path / "n", notes)
    ix = VaultIndex(vault, load_settings(vault, {"index.embeddings": False}))
    ix.open()
    try:
        res = _search(ix, "What instruments does Ana play?")
        assert res.results
        assert not any(
            c.retriever in ("answer", "asks") for r in res.results for c in r.explanation.contributions
        )
    finally:
        ix.close()
