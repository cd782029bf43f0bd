"""Agent-memory ranking signals through the real pipeline: named people, dialog neighbours, "no good match"."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import write_notes
from explorer.config import load_settings
from explorer.index.local.vault_index import VaultIndex
from explorer.search.core.pipeline import SearchPipeline


def _turn(number: int, speaker: str, session: int | None, text: str) -> tuple[str, str]:
    front = (
        f"---\nturn_id: {number}\nspeaker: {speaker}\n"
        + (f"session: {session}\n" if session is not None else "")
        + "---\n"
    )
    return f"Users/{speaker}/turns/turn_{number:06d}/context.md", f"{front}{speaker}: {text}\n"


TURNS = dict(
    [
        _turn(
            1,
            "Ana",
            1,
            "I adopted a greyhound last week, such a calm greyhound, a greyhound from the shelter.",
        ),
        _turn(2, "Ben", 1, "Lovely! What did you call him?"),
        _turn(3, "Ana", 1, "Comet, after the one in the sky."),
        _turn(4, "Ben", 2, "My sister has a greyhound too."),
        _turn(5, "Ana", 2, "I finally finished my pottery course."),
        _turn(6, "Ben", 2, "I am training for the Lisbon marathon in spring."),
        _turn(7, "Ana", 3, "The weather was awful on the coast."),
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


def _paths(res) -> list[str]:
    return [r.document_path for r in res.results if r.source == "search"]


def test_named_person_notes_weigh_more(index: VaultIndex) -> None:
    # Under rank fusion (under score fusion three greyhounds keep a lead that 1.5 does not undo).
    plain = _search(
        index,
        "Ben adopted a shelter greyhound",
        **{"experimental.owner_weight": 1.0, "experimental.fusion": "rrf"},
    )
    assert _paths(plain)[0] == "Users/Ana/turns/turn_000001/context.md"  # three greyhounds beat one
    named = _search(index, "Ben adopted a shelter greyhound", **{"experimental.fusion": "rrf"})
    assert named.stats.named_people == ["ben"]
    assert _paths(named)[0] == "Users/Ben/turns/turn_000004/context.md"
    top = named.results[0]
    assert top.explanation.source_weight == 1.5
    assert top.rrf_score == pytest.approx(sum(c.contribution for c in top.explanation.contributions))


def test_a_turn_is_found_by_the_words_of_the_turns_around_it(index: VaultIndex, monkeypatch) -> None:
    import explorer.search.core.retrievers.lexical as lexical

    comet = "Users/Ana/turns/turn_000003/context.md"
    no_lift: dict[str, object] = {}
    res = _search(index, "what did you call him", **no_lift)
    assert comet in _paths(res)  # its BM25 document holds the question asked just before it
    entry = next(r for r in res.results if r.document_path == comet)
    asked = next(r for r in res.results if r.document_path == "Users/Ben/turns/turn_000002/context.md")
    assert [c.retriever for c in entry.explanation.contributions] == ["bm25"]
    assert 0 < entry.rrf_score < asked.rrf_score  # the turn holding the words itself stays first
    half = entry.explanation.contributions[0].raw_score
    more = next(
        r
        for r in _search(
            index, "what did you call him", **no_lift, **{"experimental.dialog_words": 1.0}
        ).results
        if r.document_path == comet
    )
    assert more.explanation.contributions[0].raw_score > half
    # Turn 4 opens session 2: the words of session 1's last turn are not its own.
    sky = _search(index, "Comet sky", **no_lift)
    assert "Users/Ben/turns/turn_000004/context.md" not in _paths(sky)
    # Two turns away, the words count a quarter (DIALOG_REACH = 2); one step only: not at all.
    scores = {r.document_path: r.rrf_score for r in sky.results}
    first, second, third = (
        f"Users/{who}/turns/turn_00000{n}/context.md" for who, n in (("Ana", 1), ("Ben", 2), ("Ana", 3))
    )
    assert scores[third] > scores[second] > scores[first] > 0
    monkeypatch.setattr(lexical, "DIALOG_REACH", 1)
    assert first not in _paths(_search(index, "Comet sky", **no_lift))
    monkeypatch.undo()
    # Other vaults (rank fusion) keep plain BM25.
    plain = _search(index, "what did you call him", **no_lift, **{"experimental.fusion": "rrf"})
    assert comet not in _paths(plain)


def test_turns_get_a_dialog_context_vector_kept_across_restarts(tmp_path: Path, embedder) -> None:
    from conftest import CountingEmbedder

    vault = write_notes(tmp_path / "v", TURNS)
    first = CountingEmbedder(embedder)
    ix = VaultIndex(vault, load_settings(vault, {}), embedder=first)
    ix.open()
    assert len(ix.pending()) == 7  # each shard once, though 6 of them also lack a context vector
    assert ix.embed_pending() == 7 + 6  # own texts, and the context texts of the 6 turns with a neighbour
    assert ix.pending() == []
    turn = {n: f"Users/{'Ana' if n % 2 else 'Ben'}/turns/turn_{n:06d}/context.md" for n in range(1, 9)}
    in_context = {s.path for node_id, s in ix.shards.items() if node_id in ix.context}
    assert in_context == {turn[n] for n in range(1, 7)}  # turn 7 is alone in session 3
    comet = ix.shards_by_path[turn[3]][0]
    own, ctx = ix.dense.vector(comet), ix.context.vector(comet)
    assert float(own @ ctx) < 0.99
    # The dense ranking takes the better of a turn's two cosines.
    res = SearchPipeline(ix, ix.settings).search("what name did Ana give her new dog", k=7, two_pass=False)
    dense = next(r for r in res.trace.rankings if r.retriever == "dense")
    qvec = ix.encode_query("what name did Ana give her new dog")
    assert dict(dense.items)[comet] == pytest.approx(max(float(own @ qvec), float(ctx @ qvec)), abs=1e-5)
    ix.close()

    second = CountingEmbedder(embedder)
    ix = VaultIndex(vault, load_settings(vault, {}), embedder=second)
    ix.open()
    try:
        assert ix.pending() == [] and len(ix.context) == 6 and second.texts == 0  # loaded from the cache
        path, text = _turn(8, "Ben", 3, "Sorry to hear that, was the beach closed?")
        (vault / path).parent.mkdir(parents=True)
        (vault / path).write_text(text, encoding="utf-8")
        ix.refresh()
        assert {s.path for s in ix.pending()} == {turn[7], turn[8]}
        assert ix.embed_pending() == 2  # turn 8's own text; turns 7 and 8 read together are one context text
        assert len(ix.context) == 8 and ix.pending() == []
        # An edited turn: its own vector and the context of every turn that reads it are redone.
        edited_path, edited = _turn(2, "Ben", 1, "Lovely! Does he like long walks?")
        (vault / edited_path).write_text(edited, encoding="utf-8")
        ix.refresh()
        assert {s.path for s in ix.pending()} == {turn[1], turn[2], turn[3]}
        assert ix.embed_pending() == 4
        assert "long walks" in ix.dialog.text(ix.shards_by_path[turn[3]][0], ix.shards, ix.shards_by_path)
        # A removed turn leaves its neighbours without it.
        (vault / turn[8]).unlink()
        ix.refresh()
        assert turn[7] not in ix.neighbours and len(ix.context) == 6 and ix.pending() == []
    finally:
        ix.close()
    off = VaultIndex(vault, load_settings(vault, {"experimental.dialog_context": False}), embedder=embedder)
    off.open()
    try:
        assert off.pending() == [] and len(off.context) == 0
    finally:
        off.close()


def test_no_good_match_when_only_someone_else_matches(index: VaultIndex) -> None:
    wrong = _search(index, "When did Ana run the Lisbon marathon?")
    assert wrong.quality.factors["named_match"] < 0.5  # the best evidence is Ben's
    assert wrong.quality.factors["no_good_match"] is True
    assert "someone other" in wrong.quality.suggestion
    right = _search(index, "When did Ben run the Lisbon marathon?")
    assert right.quality.factors["named_match"] > 0.9
    assert "someone other" not in right.quality.suggestion
    assert right.quality.score > wrong.quality.score
    assert _search(index, "pottery course").quality.factors["named_match"] == 1.0  # nobody named


def test_named_match_weighs_what_is_asked_not_the_name(index: VaultIndex) -> None:
    # Every turn of Ben's holds "Ben", but only Ana's holds what is asked: none of that evidence is his
    # (counting the name, his turns would hold a quarter of the best BM25 score).
    pottery = _search(index, "Ben pottery course").quality
    assert pottery.factors["named_match"] == 0.0 and pottery.factors["no_good_match"] is True
    sister = _search(index, "Ben sister greyhound").quality
    assert sister.factors["named_match"] > 0.5
    assert _search(index, "Ben").quality.factors["named_match"] == 1.0  # nothing asked but the name


def test_named_coverage_is_what_the_persons_own_results_hold(index: VaultIndex) -> None:
    # Ana's own turns hold none of "Lisbon marathon": the question is about Ben's memory.
    wrong = _search(index, "When did Ana run the Lisbon marathon?").quality
    assert wrong.factors["named_coverage"] < 0.2
    assert wrong.score <= wrong.factors["named_evidence"] ** 2 + 1e-4
    right = _search(index, "When did Ben run the Lisbon marathon?").quality
    assert right.factors["named_coverage"] > 0.5  # all but "run": he said he is training for it
    # Her greyhound is in her turns; the name itself is not counted as something asked.
    assert _search(index, "Ana greyhound shelter").quality.factors["named_coverage"] == 1.0
    assert _search(index, "Ana").quality.factors["named_coverage"] == 1.0
    assert _search(index, "pottery course").quality.factors["named_coverage"] == 1.0  # nobody named


def test_sessions_unrecorded_means_no_neighbours(tmp_path: Path) -> None:
    vault = write_notes(
        tmp_path / "v",
        dict(
            [
                _turn(1, "Ana", None, "What did you call him?"),
                _turn(2, "Ben", None, "Comet, after the one in the sky."),
            ]
        ),
    )
    ix = VaultIndex(vault, load_settings(vault, {"index.embeddings": False}))
    ix.open()
    try:
        assert "Users/Ben/turns/turn_000002/context.md" not in _paths(_search(ix, "what did you call him"))
    finally:
        ix.close()


def test_conversation_turns_fuse_by_score_other_vaults_by_rank(index: VaultIndex, tmp_path: Path) -> None:
    res = _search(index, "greyhound shelter")
    top = res.results[0]
    assert top.explanation.fusion == "score"
    assert top.rrf_score == pytest.approx(sum(c.contribution for c in top.explanation.contributions))
    # BM25 alone (no model here): the best turn's BM25 contribution is its full weight.
    bm25 = [c for c in top.explanation.contributions if c.retriever == "bm25"]
    assert bm25 and bm25[0].rank == 1
    assert bm25[0].contribution == pytest.approx(
        bm25[0].retriever_weight * bm25[0].term_weight * bm25[0].source_weight
    )
    assert (
        _search(index, "greyhound shelter", **{"experimental.fusion": "rrf"}).results[0].explanation.fusion
        == "rrf"
    )
    notes = write_notes(
        tmp_path / "notes",
        {
            "Pets/greyhound.md": "# Greyhound\n\nA calm shelter greyhound.\n",
            "Pets/cat.md": "# Cat\n\nA cat.\n",
        },
    )
    ix = VaultIndex(notes, load_settings(notes, {"index.embeddings": False}))
    ix.open()
    try:
        assert _search(ix, "greyhound shelter").results[0].explanation.fusion == "rrf"
    finally:
        ix.close()


def test_score_fusion_keeps_a_clear_lead_that_rank_fusion_levels() -> None:
    from explorer.search.fusion import rrf, score_fusion
    from explorer.search.schema import Ranking

    lexical = Ranking("q", "bm25", 1.0, 1.0, (("a", 10.0), ("b", 1.0)))
    semantic = Ranking("q", "dense", 1.0, 1.0, (("b", 0.45), ("a", 0.44), ("c", 0.20)))
    by_rank = {f.node_id: f.score for f in rrf([lexical, semantic])}
    assert by_rank["a"] == pytest.approx(by_rank["b"])  # ranks 1 + 2 either way
    fused = score_fusion([lexical, semantic], 0.25)
    scores = {f.node_id: f.score for f in fused}
    assert [f.node_id for f in fused][:2] == ["a", "b"]
    assert scores["a"] == pytest.approx(1.0 + (0.44 - 0.25) / (0.45 - 0.25))
    assert scores["b"] == pytest.approx(0.1 + 1.0)
    assert scores["c"] == 0.0  # below the floor of unrelated texts
    for f in fused:
        assert f.score == pytest.approx(sum(c.contribution for c in f.contributions))


def test_no_good_match_when_someone_elses_results_hold_what_is_asked(index: VaultIndex) -> None:
    theirs = _search(index, "What did Ben learn in his pottery course?")
    assert theirs.stats.named_people == ["ben"]
    f = theirs.quality.factors
    assert f["named"] is True and f["other_coverage"] > f["named_coverage"]  # Ana's turn holds it
    assert f["named_lead"] < 0.08 and f["no_good_match"] is True
    mine = _search(index, "What did Ana learn in her pottery course?")
    g = mine.quality.factors
    assert g["named_coverage"] > g["other_coverage"] and g["no_good_match"] is False


def test_what_a_person_only_asks_or_tells_the_other_about_is_not_theirs(tmp_path: Path) -> None:
    # Ben's turns hold every word of the pottery course, but only in a question to Ana and in a
    # sentence said to her: his statements hold none of it, hers do (explorer.search.memory.stated).
    turns = dict(
        [
            _turn(1, "Ana", 1, "I finally finished my pottery course. The glazing week was the best part."),
            _turn(2, "Ben", 1, "Congrats! How did the glazing week of the pottery course go?"),
            _turn(3, "Ben", 1, "Your glazing week bowl from the pottery course looks great."),
            _turn(4, "Ben", 2, "I am training for the Lisbon marathon in spring."),
            _turn(5, "Ana", 2, "The weather was awful on the coast."),
            _turn(6, "Ben", 2, "My sister adopted a greyhound from the shelter."),
            _turn(7, "Ana", 3, "We watched a film about old lighthouses."),
            _turn(8, "Ben", 3, "The new bakery downtown sells rye bread."),
            _turn(9, "Ana", 3, "My cousin moved to Porto for work."),
            _turn(10, "Ben", 4, "Our team lost the chess match on Sunday."),
        ]
    )
    vault = write_notes(tmp_path / "v", turns)
    ix = VaultIndex(vault, load_settings(vault, {"index.embeddings": False}))
    ix.open()
    try:
        asked_about = _search(ix, "What did Ben like about the glazing week of his pottery course?")
        f = asked_about.quality.factors
        assert f["named"] is True and f["named_coverage"] == 0.0 and f["other_coverage"] > 0.8
        assert f["no_good_match"] is True
        own = _search(ix, "What did Ana like about the glazing week of her pottery course?")
        g = own.quality.factors
        assert g["named_coverage"] > 0.8 and g["other_coverage"] == 0.0  # Ben only asked and told her
        assert g["no_good_match"] is False
        # Rankings read every word: Ben's turns are still found by them.
        assert "Users/Ben/turns/turn_000002/context.md" in _paths(asked_about)
    finally:
        ix.close()


def test_statements_leave_out_questions_and_what_is_said_to_someone() -> None:
    from explorer.search.memory.stated import stated_tokens

    said = stated_tokens(
        "Ben: Congrats on the race! Did you win? Your medal looks great. I ran it too (barely)."
    )
    assert {"congrat", "race", "ran", "bare"} <= said
    assert not {"win", "medal"} & said
    assert "medal" in stated_tokens("My medal and your medal look great.")  # first person: theirs too
    assert stated_tokens("What now?") == set()
