"""Conversation turns matched word by word (explorer.search.memory.turn_vectors): the real model's token vectors, read by the turn model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import CountingEmbedder, embedded_index, turn_notes, write_notes
from explorer.config import load_settings
from explorer.engine.session import Session
from explorer.index.local.vault_index import VaultIndex
from explorer.search.core.pipeline import SearchPipeline
from explorer.search.memory.turn_vectors import TokenVectors, token_scores, word_matches

_SAID = [
    ("Cleo", "Hey Dan! Long week, I finally got some rest on Sunday."),
    ("Dan", "Good to hear. My weekend was all errands and laundry."),
    ("Cleo", "Yeah, I play clarinet! Started when I was young and it still relaxes me."),
    ("Dan", "That's cool. I mostly listen to podcasts on my commute."),
    ("Cleo", "Play it loud, the commute goes by faster."),
    ("Dan", "Ha, I will. The new job keeps me busy but I like my team."),
    ("Cleo", "My sister gave me a violin for my birthday, I am learning slowly."),
    ("Dan", "I tried guitar once and gave up after a week."),
    ("Cleo", "Let's play a board game next time we meet, I love those."),
    ("Dan", "Sure, and I will bring snacks for everyone."),
    ("Cleo", "We moved the garden beds to the sunny side of the yard."),
    ("Dan", "My dog learned to fetch the newspaper, finally."),
]
TURNS = turn_notes(_SAID)
QUESTION = "What instruments does Cleo play?"


class TokenCounter(CountingEmbedder):
    """The real model, recording also each text whose token vectors are asked for."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.asked: list[str] = []

    def encode_tokens(self, texts: Any, batch_size: int = 32) -> Any:
        self.asked.extend(texts)
        return self.inner.encode_tokens(texts, batch_size)


@pytest.fixture(scope="module")
def counter(embedder) -> TokenCounter:
    return TokenCounter(embedder)


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, counter: TokenCounter):
    with embedded_index(write_notes(tmp_path_factory.mktemp("turns") / "v", TURNS), counter) as ix:
        yield ix


def _search(index: VaultIndex, query: str, **overrides: Any):
    settings = index.settings.with_overrides(overrides) if overrides else index.settings
    res = SearchPipeline(index, settings).search(query, k=12, two_pass=False)
    return [r for r in res.results if r.source == "search"]


def test_token_vectors_match_a_category_word_to_its_instances(embedder) -> None:
    """The model's vector of "clarinet" in its sentence lies nearer "instruments" than other turns' words do."""
    question, *turns = embedder.encode_tokens(
        [QUESTION, "Yeah, I play clarinet! Started when I was young.", "I mostly listen to podcasts."]
    )
    pieces, vecs = question
    assert pieces[:3] == ("what", "instruments", "does")
    assert vecs.shape == (len(pieces), embedder.dim)
    assert np.linalg.norm(vecs, axis=1) == pytest.approx(1.0, abs=1e-5)
    scores = token_scores(question, turns, names={"cleo"})
    assert scores is not None and scores.shape == (2, 2)
    assert scores[0, 0] > scores[1, 0]  # "clarinet" answers "instruments", "podcasts" does not
    assert scores[0, 1] > 0 and scores[1, 1] == 0  # the first turn writes "play" itself
    # a query of stop words and names alone has no word to match
    assert token_scores(embedder.encode_tokens(["What does Cleo do?"])[0], turns, names={"cleo"}) is None


def test_the_turn_model_reads_the_word_matches(index: VaultIndex, embedder) -> None:
    """The turns that name instances of what is asked about score highest on their word matches and come first."""
    on = _search(index, QUESTION)
    said = [r.context_shards[0].text.split(":", 1)[1].strip() for r in on]
    assert "clarinet" in said[0] and "violin" in said[1]
    assert any(c.retriever == "rescore" for r in on for c in r.explanation.contributions)
    matched = word_matches(QUESTION, said, {"cleo", "dan"}, embedder.encode_tokens, TokenVectors())
    assert matched is not None and matched.shape == (len(said), 2)
    assert matched.min(axis=0).tolist() == [0.0, 0.0] and matched.max(axis=0).tolist() == [1.0, 1.0]
    best = said[int(np.argmax(matched[:, 0]))]
    assert any(name in best for name in ("clarinet", "violin", "guitar"))  # an instrument


def test_each_turn_runs_through_the_model_once_per_session(index: VaultIndex, counter: TokenCounter) -> None:
    pipeline = SearchPipeline(index, index.settings)
    start = len(counter.asked)
    first = pipeline.search("Which sports does Dan like?", k=12, two_pass=False)
    asked = counter.asked[start:]
    assert asked and len(set(asked)) == len(asked)
    assert sum(text.startswith("Which sports") for text in asked) == 1
    pipeline.search("Which sports does Dan enjoy?", k=12, two_pass=False)
    # the turns were kept: only the new query ran through the model
    assert counter.asked[start + len(asked) :] == ["Which sports does Dan enjoy?"]
    assert first.results


def test_a_session_warms_the_turns_so_its_first_search_runs_only_the_query(tmp_path: Path, embedder) -> None:
    counter = TokenCounter(embedder)
    vault = write_notes(tmp_path / "v", TURNS)
    session = Session(vault, load_settings(vault), embedder=counter)
    session.open()
    session.start(watch=False, embed=True, serve=False)
    try:
        assert session.embedding is not None and session.embedding.wait_idle(60)
        warmed = list(counter.asked)
        assert len(warmed) == len(TURNS) == len(set(warmed))
        assert "Yeah, I play clarinet! Started when I was young and it still relaxes me." in warmed
        assert session.pipeline is not None
        first = session.pipeline.search(QUESTION, k=12, two_pass=False)
        assert counter.asked[len(warmed) :] == [QUESTION]
    finally:
        session.close()
    # the same answer as a session that made the vectors while searching
    with embedded_index(vault, embedder) as ix:
        cold = SearchPipeline(ix, ix.settings).search(QUESTION, k=12, two_pass=False)
    # (the model ran the turns in other batches there: scores at a tolerance, as another CPU's kernels need)
    assert [r.node_id for r in first.results] == [r.node_id for r in cold.results]
    assert [r.score for r in first.results] == pytest.approx([r.score for r in cold.results], rel=1e-6)


def test_when_questions_and_notes_vaults_ask_for_no_token_vectors(
    index: VaultIndex, counter: TokenCounter, sample_index, monkeypatch: pytest.MonkeyPatch
) -> None:
    start = len(counter.asked)
    _search(index, "When did Cleo start the clarinet?")
    _search(index, QUESTION, **{"experimental.turn_rescore": False})
    assert counter.asked[start:] == []
    model = sample_index.embedder()
    asked: list[str] = []
    real = model.encode_tokens

    def counted(texts: Any, batch_size: int = 32) -> Any:
        asked.extend(texts)
        return real(texts, batch_size)

    monkeypatch.setattr(model, "encode_tokens", counted)
    for query in ("hamster diet", "what did I write about sourdough?", "What does the owner like?"):
        SearchPipeline(sample_index, sample_index.settings).search(query, k=10)
    assert asked == []


def test_without_token_vectors_the_turn_model_orders_without_them(tmp_path: Path, embedder) -> None:
    pooled_only = CountingEmbedder(embedder)  # the real model's vectors, and no token vectors
    assert not hasattr(pooled_only, "encode_tokens")
    with embedded_index(write_notes(tmp_path / "v", TURNS), pooled_only) as ix:
        on = _search(ix, QUESTION)
        off = _search(ix, QUESTION, **{"experimental.turn_rescore": False})
        assert any(c.retriever == "rescore" for r in on for c in r.explanation.contributions)
        assert [r.score for r in on] == pytest.approx([r.score for r in off])  # re-ordered, scores kept
        # the word matches (0 for every turn here) are what put the clarinet first
        assert "clarinet" not in on[0].context_shards[0].text


def test_the_kept_vectors_are_bounded() -> None:
    made: list[str] = []

    def encode(texts):
        made.extend(texts)
        return [((t,), np.ones((1, 4), np.float32)) for t in texts]

    kept = TokenVectors(limit=3)
    kept.get(encode, ["a", "b", "c"])
    kept.get(encode, ["a", "d"])  # "a" is used again, "b" (the oldest unused) goes
    kept.get(encode, ["a", "c", "b"])
    assert made == ["a", "b", "c", "d", "b"]
    assert [p for p, _ in kept.get(encode, ["c", "b", "a"])] == [("c",), ("b",), ("a",)]


def test_a_text_pushed_out_by_another_search_meanwhile_is_still_given() -> None:
    """Two searches share the kept vectors: while one runs the model, the other may push out a text the
    first found kept; the first still gets that text's vectors (as it found them)."""
    kept = TokenVectors(limit=2)

    def encode(texts):
        return [((t,), np.full((1, 4), len(t), np.float32)) for t in texts]

    kept.get(encode, ["a"])

    def encode_while_another_search_runs(texts):
        kept.get(encode, ["cc", "dd"])  # the other search: "a" is pushed out
        return encode(texts)

    got = kept.get(encode_while_another_search_runs, ["a", "b"])
    assert [p for p, _ in got] == [("a",), ("b",)]
    assert [float(v[0, 0]) for _, v in got] == [1.0, 1.0]
    assert kept.missing(["a", "b", "cc", "dd"]) == ["cc", "dd"]  # the two this search used are the newest
