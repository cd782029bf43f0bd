"""Time in a query to an agent's memory: dates read from its words, and turns recorded then ranked up."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from conftest import write_notes
from explorer.config import load_settings
from explorer.index.local.vault_index import VaultIndex
from explorer.search.core.pipeline import SearchPipeline
from explorer.search.memory.when import closeness, mentions


def _spans(query: str) -> list[tuple[date, date, bool]]:
    return [(s.start, s.end, s.any_year) for s in mentions(query)]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What did Gina find on 1 February, 2023?", [(date(2023, 2, 1), date(2023, 2, 1), False)]),
        (
            "What painting did she show on October 13, 2023?",
            [(date(2023, 10, 13), date(2023, 10, 13), False)],
        ),
        ("What setback did Melanie face in October 2023?", [(date(2023, 10, 1), date(2023, 10, 31), False)]),
        ("When did Melanie go camping in June?", [(date(2000, 6, 1), date(2000, 6, 30), True)]),
        ("Which state did Joanna visit in summer 2021?", [(date(2021, 6, 1), date(2021, 8, 31), False)]),
        (
            "What did Maria do the weekend before April 10, 2023?",
            [(date(2023, 4, 1), date(2023, 4, 9), False)],
        ),
        ("What happened in 2022?", [(date(2022, 1, 1), date(2022, 12, 31), False)]),
        ("minutes of 2023-05-08", [(date(2023, 5, 8), date(2023, 5, 8), False)]),
    ],
)
def test_dates_are_read_from_the_words_of_a_query(query: str, expected) -> None:
    assert _spans(query) == expected


@pytest.mark.parametrize(
    "query", ["May I ask Jan about it?", "she may march on", "talk to Jan", "room 2023", "last week"]
)
def test_words_that_only_look_like_dates_are_not_dates(query: str) -> None:
    assert mentions(query) == []


def test_a_turn_fits_on_the_day_and_less_and_less_after_it() -> None:
    spans = mentions("on 8 May, 2023")
    assert closeness(date(2023, 5, 8), spans, 7) == 1.0
    assert closeness(date(2023, 5, 7), spans, 7) == 0.0  # told before it happened: no
    assert 0.0 < closeness(date(2023, 5, 12), spans, 7) < 1.0
    assert closeness(date(2023, 5, 20), spans, 7) == 0.0
    june = mentions("in June")
    assert closeness(date(2021, 6, 3), june, 7) == 1.0 and closeness(date(2024, 6, 30), june, 7) == 1.0


def _turn(number: int, speaker: str, session: int, day: str, text: str) -> tuple[str, str]:
    front = f"---\nturn_id: {number}\nspeaker: {speaker}\nsession: {session}\ndate: {day}\n---\n"
    return f"Users/{speaker}/turns/turn_{number:06d}/context.md", f"{front}{speaker}: {text}\n"


TURNS = dict(
    [
        _turn(1, "Ana", 1, "2023-03-02", "We went to the lake with the kids, a lovely trip."),
        _turn(2, "Ben", 1, "2023-03-02", "Sounds great."),
        _turn(3, "Ana", 2, "2023-05-09", "Another trip to the lake yesterday, the kids loved it."),
        _turn(4, "Ben", 2, "2023-05-09", "Nice, the weather was good."),
        _turn(5, "Ana", 3, "2023-08-20", "A trip to the lake again, with the kids and the dog."),
        _turn(6, "Ben", 3, "2023-08-20", "Fun."),
        *(
            _turn(7 + i, ("Ana", "Ben")[i % 2], 4 + i // 2, f"2023-09-{10 + i // 2:02d}", text)
            for i, text in enumerate(
                [
                    "I started a pottery course.",
                    "My sister plays the violin.",
                    "The marathon training is hard.",
                    "We painted the fence green.",
                    "I read a novel about whales.",
                    "Our garden has tomatoes now.",
                    "The concert was loud.",
                    "I fixed my bicycle chain.",
                    "We baked bread on Sunday.",
                    "The museum was closed.",
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
    return SearchPipeline(index, settings).search(query, k=5, two_pass=False)


def test_a_turn_recorded_when_the_query_says_comes_first(index: VaultIndex) -> None:
    may = "Users/Ana/turns/turn_000003/context.md"
    off = _search(
        index, "What trip to the lake did Ana take on 8 May, 2023?", **{"experimental.date_weight": 0.0}
    )
    on = _search(index, "What trip to the lake did Ana take on 8 May, 2023?")
    trips = {f"Users/Ana/turns/turn_{n:06d}/context.md" for n in (1, 3, 5)}
    first = next(r for r in on.results if r.document_path in trips)
    assert first.document_path == may
    assert (
        next(r for r in off.results if r.document_path in trips).document_path != may
    )  # the date made the difference
    lift = [c for c in first.explanation.contributions if c.retriever == "date"]
    assert lift and lift[0].term == "8 May, 2023" and lift[0].raw_score == pytest.approx(1 - 1 / 7, abs=1e-3)
    assert first.rrf_score == pytest.approx(sum(c.contribution for c in first.explanation.contributions))


def test_dates_change_nothing_outside_conversation_turns(tmp_path: Path) -> None:
    notes = {
        "a.md": "---\ndate: 2023-05-08\n---\nlake trip notes\n",
        "b.md": "---\ndate: 2022-01-01\n---\nlake trip plans and notes\n",
    }
    vault = write_notes(tmp_path / "n", notes)
    ix = VaultIndex(vault, load_settings(vault, {"index.embeddings": False}))
    ix.open()
    try:
        with_date = _search(ix, "lake trip notes on 8 May, 2023")
        assert not any(c.retriever == "date" for r in with_date.results for c in r.explanation.contributions)
    finally:
        ix.close()
