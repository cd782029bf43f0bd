"""The hybrid pipeline: fusion arithmetic, weights, always-include, filters, progressive and BM25-only states, JSON, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import write_notes
from explorer.config import Settings
from explorer.index.local.vault_index import VaultIndex
from explorer.search.core.pipeline import QueryError, SearchPipeline
from explorer.search.core.query import parse_query
from explorer.search.core.terms import SearchTerms, clamp_terms, offline_terms
from explorer.search.fusion import Ranking, rrf

REPO = Path(__file__).resolve().parent.parent

NOTES = {
    "Knowledge/kites.md": "# Kites\n\nA kite needs steady wind between 10 and 30 km/h to fly well.",
    "Journal/beach.md": "# Beach day\n\nWe flew a kite at the beach; the wind was steady and strong.",
    "Recipes/bread.md": "# Bread\n\nSourdough bread needs flour, water, salt and a lively starter. #baking",
    "Recipes/pizza.md": "# Pizza\n\nPizza dough uses flour, water, salt and yeast; bake very hot. #baking/italian",
    "Projects/garden.md": "# Garden\n\n## Tomatoes\n\nTomatoes need sun and regular water.\n\n## Herbs\n\nBasil grows well beside tomatoes.",
}


@pytest.fixture()
def small(tmp_path: Path, embedder):
    index = VaultIndex(write_notes(tmp_path / "v", NOTES), embedder=embedder)
    index.open()
    index.embed_pending()
    yield index
    index.close()


def _pipe(index, **overrides) -> SearchPipeline:
    settings = index.settings.with_overrides(overrides) if overrides else index.settings
    return SearchPipeline(index, settings)


def test_rrf_contributions_sum_to_fused_score() -> None:
    rankings = [
        Ranking("q", "bm25", 1.0, 1.5, (("a", 9.0), ("b", 3.0))),
        Ranking("q", "dense", 1.0, 1.5, (("b", 0.8), ("a", 0.7), ("c", 0.5))),
        Ranking("t", "bm25", 2.0, 1.0, (("c", 1.0),)),
    ]
    fused = rrf(rankings, k=60, source_weight=lambda n: 1.5 if n == "a" else 1.0)
    by = {f.node_id: f for f in fused}
    assert by["a"].score == pytest.approx(1.5 * 1.5 / 61 + 1.5 * 1.5 / 62)
    assert by["c"].score == pytest.approx(1.5 / 63 + 2.0 / 61)
    for f in fused:
        assert f.score == pytest.approx(sum(c.contribution for c in f.contributions))
    assert [f.node_id for f in fused] == sorted(by, key=lambda n: -by[n].score)


def test_rrf_ties_break_deterministically() -> None:
    r1 = Ranking("q", "bm25", 1.0, 1.0, (("x", 1.0), ("y", 1.0)))
    r2 = Ranking("q", "dense", 1.0, 1.0, (("y", 1.0), ("x", 1.0)))
    assert [f.node_id for f in rrf([r1, r2])] == ["x", "y"]
    assert [f.node_id for f in rrf([r2, r1])] == ["x", "y"]


def test_explanations_sum_to_scores_in_real_searches(small) -> None:
    res = _pipe(small).search("kite wind", two_pass=False)
    assert res.results
    for r in res.results:
        ex = r.explanation
        assert ex is not None
        assert ex.fused_score == pytest.approx(sum(c.contribution for c in ex.contributions), rel=1e-12)
        # The note's score: its best shard plus the damped second best.
        assert r.rrf_score == pytest.approx(ex.fused_score + ex.second_weight * ex.second_score, rel=1e-12)
        for c in ex.contributions:
            assert c.contribution == pytest.approx(
                c.retriever_weight * c.term_weight * c.source_weight / (ex.rrf_k + c.rank)
            )
    retrievers = {c.retriever for c in res.results[0].explanation.contributions}
    assert {"bm25", "dense", "feedback"} <= retrievers


def test_knowledge_weight_and_k_change_the_scores(small) -> None:
    base = _pipe(small, **{"experimental.knowledge_first": False}).search("kite wind", two_pass=False)
    flat = _pipe(
        small, **{"experimental.knowledge_first": False, "experimental.source_weights": {"fact": 1.0}}
    ).search("kite wind", two_pass=False)
    kb = {r.document_path: r for r in base.results}["Knowledge/kites.md"]
    kf = {r.document_path: r for r in flat.results}["Knowledge/kites.md"]
    assert kb.rrf_score == pytest.approx(kf.rrf_score * 1.5)
    assert kb.explanation.source_weight == 1.5
    k10 = _pipe(small, **{"experimental.rrf_k": 10}).search("kite wind", two_pass=False)
    assert k10.results[0].rrf_score > base.results[0].rrf_score


def test_query_weighs_more_than_generated_terms(small) -> None:
    assert _pipe(small).search("flour water salt starter", two_pass=False).search_terms_used == [
        "flour water salt starter"
    ]

    def writer(query: str) -> SearchTerms:  # a term writer (an LLM's place) adding three terms
        return SearchTerms(query, ("flour", "water salt", "starter"), "llm")

    pipe = SearchPipeline(small, small.settings, term_writer=writer)
    res = pipe.search("flour water salt starter", two_pass=False)
    contribs = res.results[0].explanation.contributions
    q = [c for c in contribs if c.term == res.search_terms_used[0]]
    others = [c for c in contribs if c.term != res.search_terms_used[0]]
    assert q and others
    assert all(c.term_weight == 1.5 for c in q) and all(c.term_weight == 1.0 for c in others)


def test_dense_floor_applies(small) -> None:
    res = _pipe(small).search("kite wind", two_pass=False)
    for r in res.results:
        for c in r.explanation.contributions:
            if c.retriever == "dense":
                assert c.raw_score >= 0.40


def test_feedback_ranking_moves_toward_semantic_matches(small) -> None:
    res = _pipe(small).search("kite wind", two_pass=False)
    rankings = res.trace.rankings
    dense = next(r for r in rankings if r.retriever == "dense" and r.term == "kite wind")
    feedback = next(r for r in rankings if r.retriever == "feedback")
    # Built from the best fused passages that are semantic matches, one per note.
    assert 1 <= len(feedback.sources) <= 3
    semantic = {nid for nid, _ in dense.items}
    assert set(feedback.sources) <= semantic
    assert len({small.shards[n].path for n in feedback.sources}) == len(feedback.sources)
    assert res.stats.feedback_from == list(feedback.sources)
    # Chosen in the order of the other rankings fused without source weights (a knowledge note's
    # 1.5 must not make a weak semantic match a feedback passage): the first semantic match per note.
    expected, notes = [], set()
    for f in rrf([r for r in rankings if r.retriever != "feedback"], 60):
        path = small.shards[f.node_id].path
        if f.node_id in semantic and path not in notes and len(expected) < 3:
            expected.append(f.node_id)
            notes.add(path)
    assert list(feedback.sources) == expected
    # It searches like a query: cosines to the moved vector, above the floor, best first.
    assert feedback.items and all(c >= 0.40 for _, c in feedback.items)
    assert [c for _, c in feedback.items] == sorted((c for _, c in feedback.items), reverse=True)
    q = small.embedder().encode(["kite wind"])[0]
    vecs = [small.dense.vector(n) for n in feedback.sources]
    moved = q + np.mean(vecs, axis=0)
    moved /= np.linalg.norm(moved)
    listed = {nid for nid, _ in feedback.items}
    for nid, cos in feedback.items:
        assert cos == pytest.approx(float(small.dense.vector(nid) @ moved), abs=1e-5)
    # Each source's own vector is in the moved query: it is listed again, near the top.
    assert set(feedback.sources) <= listed
    top = res.results[0].explanation.contributions
    assert any(c.retriever == "feedback" and c.retriever_weight == 1.0 for c in top)


def test_feedback_can_be_turned_off_and_needs_a_semantic_match(small) -> None:
    off = _pipe(small, **{"experimental.feedback_shards": 0}).search("kite wind", two_pass=False)
    assert all(r.retriever != "feedback" for r in off.trace.rankings)
    assert off.stats.feedback_from == []
    # Words no note is about: BM25 finds "flour", nothing passes the cosine floor, so nothing to move toward.
    res = _pipe(small, **{"experimental.dense_threshold": 0.99}).search("flour", two_pass=False)
    assert res.results and all(r.retriever != "feedback" for r in res.trace.rankings)


def test_candidate_depth_counts_notes_not_shards(tmp_path: Path, embedder) -> None:
    root = tmp_path / "v"
    root.mkdir()
    # One long note cut into many shards that all match, and short notes that match less.
    sections = "\n\n".join(
        f"## Part {i}\n\nRiver otters play in the river water, part {i}." for i in range(12)
    )
    (root / "long.md").write_text("# Otters\n\n" + sections, encoding="utf-8")
    for i in range(6):
        (root / f"short{i}.md").write_text(
            f"# Note {i}\n\nAn otter was seen once, note {i}.", encoding="utf-8"
        )
    index = VaultIndex(root, embedder=embedder)
    index.open()
    try:
        assert len(index.shards_by_path["long.md"]) >= 12
        res = _pipe(index, **{"experimental.candidates": 4}).search("otter river", two_pass=False, k=10)
        bm25 = next(r for r in res.trace.rankings if r.retriever == "bm25")
        paths = [index.shards[n].path for n, _ in bm25.items]
        assert len(set(paths)) == 4
        assert paths.count("long.md") >= 12
        assert len(res.results) == 4
    finally:
        index.close()


def test_entries_are_unique_by_path_with_best_shard(small) -> None:
    res = _pipe(small).search("tomatoes basil water", two_pass=False)
    paths = [r.document_path for r in res.results]
    assert len(paths) == len(set(paths))
    garden = next(r for r in res.results if r.document_path == "Projects/garden.md")
    assert garden.node_id.startswith("Projects/garden.md#")
    assert garden.context_shards[0].node_id == garden.node_id
    for c in garden.context_shards:
        note = small.notes[c.path].text
        assert note[c.start : c.end] == c.text
        for h in c.highlights:
            assert c.start <= h.start < h.end <= c.end


@pytest.mark.parametrize(
    ("query", "expect"),
    [
        ("tag:baking flour", {"Recipes/bread.md", "Recipes/pizza.md"}),
        ("tag:baking/italian flour", {"Recipes/pizza.md"}),
        ("path:Recipes water", {"Recipes/bread.md", "Recipes/pizza.md"}),
        ("file:pizza water", {"Recipes/pizza.md"}),
        ("section:Herbs water basil", {"Projects/garden.md"}),
        ("water -yeast", None),
    ],
)
def test_filters(small, query: str, expect: set[str] | None) -> None:
    res = _pipe(small).search(query, two_pass=False)
    got = {r.document_path for r in res.results if r.source == "search"}
    if expect is None:
        assert "Recipes/pizza.md" not in got and got
    else:
        assert got == expect
    assert res.filters


def test_a_phrase_ranks_exact_passages_first_without_hiding_near_misses(small) -> None:
    res = _pipe(small).search('"steady wind"', two_pass=False)
    got = [r.document_path for r in res.results if r.source == "search"]
    assert got[0] == "Knowledge/kites.md"  # has the phrase
    assert "Journal/beach.md" in got  # "the wind was steady": same words, other order
    assert res.filters["phrases"] == ["steady wind"]


def test_filter_only_query_browses(small) -> None:
    res = _pipe(small).search("tag:baking")
    assert {r.document_path for r in res.results} == {"Recipes/bread.md", "Recipes/pizza.md"}
    assert res.mode.browse


def test_unknown_operator_is_text_and_odd_queries_answer(small) -> None:
    assert parse_query("colour:red kite").text == "colour:red kite"
    pipe = _pipe(small)
    for q in [
        "colour:red kite",
        "(.*)+[a-z]{2,}?$ kite",
        "kite 🪁🌬️",
        'unbalanced "quote kite',
        "the and of to",
        "x" * 10_000,
    ]:
        res = pipe.search(q, two_pass=False)
        assert isinstance(res.results, list)
    assert any("unbalanced" in w for w in pipe.search('unbalanced "quote', two_pass=False).warnings)
    assert any("cut to" in w for w in pipe.search("kite " * 3000, two_pass=False).warnings)


def test_empty_query_is_a_clear_error(small) -> None:
    with pytest.raises(QueryError, match="empty query"):
        _pipe(small).search("   ")


def test_no_match_is_empty_not_error(small) -> None:
    res = _pipe(small).search("zzzqqq", two_pass=False)
    assert res.results == [] or all(r.source == "always_include" for r in res.results)
    assert res.quality.level == "low"


def test_always_include_rules(sample_pipeline) -> None:
    res = sample_pipeline.search("what should I buy for the hamster, and what about that?", two_pass=False)
    always = {r.document_path: r for r in res.results if r.source == "always_include"}
    searched = {r.document_path for r in res.results if r.source == "search"}
    assert res.include_preferences and res.include_n_minus_1
    prefs = [p for p, n in sample_pipeline.index.notes.items() if n.source_type == "preference"]
    assert prefs and all(p in always or p in searched for p in prefs)
    from explorer.search.core.always import latest_turn

    latest = latest_turn(sample_pipeline.index.notes)
    assert latest in always or latest in searched
    for r in always.values():
        assert r.reason and r.source == "always_include"
    # Appended after the searched results.
    kinds = [r.source for r in res.results]
    assert kinds == sorted(kinds, key=lambda s: s != "search")


def test_explicit_reference_is_included(sample_pipeline) -> None:
    res = sample_pipeline.search("zebra finch song [[sourdough-bread]]", two_pass=False)
    refs = [r for r in res.results if r.source == "always_include" and "referenced" in r.reason]
    assert refs and refs[0].document_path.endswith("sourdough-bread.md")


def test_bm25_only_when_model_cannot_load(tmp_path: Path) -> None:
    root = tmp_path / "v"
    root.mkdir()
    (root / "a.md").write_text("# Kites\n\nkites fly in wind", encoding="utf-8")
    settings = Settings().with_overrides({"index.model": str(tmp_path / "no-such-model")})
    index = VaultIndex(root, settings)
    index.open()
    res = SearchPipeline(index, settings).search("kites", two_pass=False)
    assert res.results[0].document_path == "a.md"
    assert res.mode.dense is False and res.mode.model_state == "unavailable"
    assert any("BM25 only" in w for w in res.warnings)
    assert index.stats().model_state == "unavailable" and "no-such-model" in index.model_error
    index.close()


def test_progressive_lexical_before_vectors(tmp_path: Path, embedder) -> None:
    root = tmp_path / "v"
    root.mkdir()
    for i in range(6):
        (root / f"n{i}.md").write_text(f"# N{i}\n\nkites and wind number {i}", encoding="utf-8")
    index = VaultIndex(root, embedder=embedder)
    index.open()
    pipe = SearchPipeline(index)
    before = pipe.search("kites", two_pass=False)
    assert before.stats.shards_without_vectors == 6
    assert before.results and all(r.embedding_rank is None for r in before.results)
    index.embed_pending()
    after = pipe.search("kites", two_pass=False)
    assert after.stats.shards_without_vectors == 0
    assert any(r.embedding_rank for r in after.results)
    index.close()


def test_terms_offline_and_clamping() -> None:
    t = offline_terms("find syrian hamsters for sale online")
    assert t.source == "keywords" and t.terms == ()  # without an LLM, the query alone
    assert t.all_terms[0] == "find syrian hamsters for sale online"
    assert t.include_preferences
    kept, warns = clamp_terms([f"t{i}" for i in range(50)])
    assert kept == ["t0", "t1", "t2", "t3", "t4"] and warns
    kept, warns = clamp_terms(["", "  ", "a", "a"])
    assert kept == ["a"]


def test_json_schema_keys_and_types(sample_pipeline) -> None:
    data = json.loads(json.dumps(sample_pipeline.search("pour over coffee ratio").to_dict()))
    assert set(data) >= {
        "search_terms_used",
        "results",
        "stats",
        "context_shards",
        "quality",
        "passes",
        "timings_ms",
        "rerank",
        "analysis",
    }
    assert isinstance(data["search_terms_used"], list) and all(
        isinstance(t, str) for t in data["search_terms_used"]
    )
    assert set(data["stats"]) >= {
        "total_documents_searched",
        "bm25_matches",
        "embedding_matches",
        "final_results",
    }
    assert data["stats"]["final_results"] == len(data["results"])
    r = data["results"][0]
    types = {
        "document_path": str,
        "source_type": str,
        "node_id": str,
        "rrf_score": float,
        "snippet": str,
        "source": str,
    }
    for key, typ in types.items():
        assert isinstance(r[key], typ), key
    assert r["source"] in ("search", "always_include")
    assert r["bm25_rank"] is None or isinstance(r["bm25_rank"], int)
    assert r["embedding_rank"] is None or isinstance(r["embedding_rank"], int)
    assert len(r["snippet"]) <= 202
    shard = data["context_shards"][0]
    assert set(shard) >= {"node_id", "cursor", "start", "end", "text", "highlights"}
    assert isinstance(data["timings_ms"]["total"], float)
    assert data["quality"]["level"] in ("high", "medium", "low")


def test_cli_search_json_and_exit_codes(sample_copy: Path, sample_index) -> None:
    exe = [sys.executable, "-m", "explorer"]
    out = subprocess.run(
        [*exe, "search", "syrian hamster cage", "--vault", str(sample_copy), "--json", "-k", "5"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert 1 <= len([r for r in data["results"] if r["source"] == "search"]) <= 5
    assert data["mode"]["dense"] is True
    empty = subprocess.run(
        [*exe, "search", "   ", "--vault", str(sample_copy)], capture_output=True, text=True, timeout=120
    )
    assert empty.returncode == 2 and "empty query" in empty.stderr
    nomatch = subprocess.run(
        [*exe, "search", "qqqzzzxxx", "--vault", str(sample_copy), "--lexical"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert nomatch.returncode == 0
    bad = subprocess.run(
        [*exe, "search", "x", "--vault", str(sample_copy / "Welcome.md")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "not a folder" in bad.stderr
    human = subprocess.run(
        [*exe, "search", "sourdough starter", "--vault", str(sample_copy), "--explain", "-k", "3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert human.returncode == 0 and "sourdough" in human.stdout.lower() and "contrib" in human.stdout
