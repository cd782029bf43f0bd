"""Two-pass search: the deterministic analyser, the merge of pass 2, the repeat check, knowledge-first early return."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import write_notes
from explorer.config import Settings
from explorer.engine import make_pipeline
from explorer.index.local.vault_index import VaultIndex
from explorer.search.core.pipeline import SearchPipeline
from explorer.search.core.twopass import Analysis, heuristic_analysis, merge_passes, repeats_query
from explorer.search.schema import ContextShard, SearchResult, SearchResults

GARDEN = {
    "Garden/plan.md": "# Garden plan\n\n## Tomatoes\n\nTomatoes want full sun and deep water.\n\n"
    "## Herbs\n\nBasil and thyme grow beside the path.",
    "Kitchen/pesto.md": "# Pesto\n\nBasil, pine nuts, garlic and parmesan, pounded.",
    "Garden/shade.md": "# Shade\n\nFerns and hostas like shade; tomatoes would sulk here without sun.",
    "Music/scales.md": "# Scales\n\nA major scale has seven notes; practice slowly with a metronome.",
}

FILLER_TOPICS = [
    ("volleyball", "Beach volleyball tournament on Saturday; our team lost the final."),
    ("chess", "Chess openings: the Italian game and the Sicilian defence."),
    ("rowing", "Rowing technique: drive with the legs, then swing the back."),
    ("ceramics", "Glazing ceramics needs a kiln at cone six."),
    ("origami", "Origami crane: fold the square diagonally, then squash."),
    ("astronomy", "Saturn rings are best seen with a small telescope."),
    ("cycling", "Pump bicycle tyres to the pressure on the sidewall."),
    ("knitting", "Knitting a scarf takes two skeins of merino."),
    ("tea", "Green tea brews at eighty degrees for two minutes."),
    ("hiking", "Hiking boots need breaking in before a long trail."),
    ("painting", "Watercolour washes dry lighter than they look wet."),
    ("running", "Easy runs should feel conversational."),
]


@pytest.fixture()
def garden(tmp_path: Path):
    settings = Settings().with_overrides({"index.embeddings": False, "rerank.enabled": False})
    index = VaultIndex(write_notes(tmp_path / "v", GARDEN), settings)
    index.open()
    yield index, settings
    index.close()


def refine_to(query: str):
    """An offline analyser (no budget parameter) that always asks for `query`."""

    def analyse(original: str, results: SearchResults) -> Analysis:
        return Analysis("REFINE", refined_query=query, reason="test", analyser="test")

    return analyse


# -- merge ---------------------------------------------------------------------------------------


def _shard(path: str, text: str, pass_: int) -> ContextShard:
    return ContextShard(
        node_id=f"{path}#{text[:5]}",
        path=path,
        cursor=0,
        start=0,
        end=len(text),
        text=text,
        highlights=(),
        score=0.0,
        pass_=pass_,
    )


def _res(path: str, score: float, pass_: int, *texts: str) -> SearchResult:
    return SearchResult(
        document_path=path,
        title=path,
        source_type="note",
        node_id=f"{path}#x",
        rrf_score=score,
        score=score,
        bm25_rank=1,
        embedding_rank=None,
        snippet="",
        source="search",
        pass_=pass_,
        context_shards=tuple(_shard(path, t, pass_) for t in texts),
    )


def test_merge_keeps_paths_unique_pass1_context_first_and_shards_unique() -> None:
    first = [_res("a.md", 0.10, 1, "alpha one"), _res("b.md", 0.08, 1, "beta one")]
    second = [
        _res("b.md", 0.05, 2, "beta  one", "beta two"),  # same passage (whitespace aside) + a new one
        _res("c.md", 0.04, 2, "gamma"),
        _res("d.md", 0.03, 2, "alpha one"),  # only repeats a passage already shown
    ]
    merged, added = merge_passes(first, second, scale=2.0)
    assert added == 1
    assert [r.document_path for r in merged] == ["a.md", "b.md", "c.md"]
    b = merged[1]
    assert b.pass_ == 1 and [c.text for c in b.context_shards] == ["beta one", "beta two"]
    assert [c.pass_ for c in b.context_shards] == [1, 2]
    c = merged[2]
    assert c.pass_ == 2 and c.score == pytest.approx(0.08) and c.rrf_score == 0.04
    assert first[1].context_shards == (first[1].context_shards[0],), "inputs are not modified"


def test_repeats_query_compares_content_words() -> None:
    assert repeats_query("Kite WIND", "the wind, a kite")
    assert repeats_query("kites winds", "kite wind")
    assert not repeats_query("kite wind speed", "kite wind")


# -- the pipeline's two passes ----------------------------------------------------------------------


def test_pass_2_merges_new_entries_and_new_passages(garden) -> None:
    index, settings = garden
    pipe = SearchPipeline(index, settings, analyser=refine_to("basil thyme"))
    res = pipe.search("tomatoes sun")
    assert [p.number for p in res.passes] == [1, 2]
    p2 = res.passes[1]
    assert p2.query == "basil thyme" and p2.entries == 5 and p2.shards == 2 and p2.new == 1
    by_path = {r.document_path: r for r in res.results}
    assert len(by_path) == len(res.results)
    pesto = by_path["Kitchen/pesto.md"]
    assert pesto.pass_ == 2 and pesto.explanation.pass_ == 2
    assert all(c.pass_ == 2 for c in pesto.context_shards)
    plan = by_path["Garden/plan.md"]
    assert plan.pass_ == 1
    assert "Tomatoes" in plan.context_shards[0].text and plan.context_shards[0].pass_ == 1
    assert any("Basil" in c.text and c.pass_ == 2 for c in plan.context_shards)
    texts = [c.text for r in res.results for c in r.context_shards]
    assert len(texts) == len(set(texts))
    scores = [r.score for r in res.results if r.source == "search"]
    assert scores == sorted(scores, reverse=True)
    data = json.loads(json.dumps(res.to_dict()))
    assert [p["number"] for p in data["passes"]] == [1, 2]
    assert {r["pass"] for r in data["results"]} == {1, 2}


@pytest.mark.parametrize(
    ("refined", "why"), [("Sun, TOMATOES!", "repeats the original"), ("   ", "without a query")]
)
def test_pass_2_skipped_when_it_would_repeat_pass_1(garden, refined: str, why: str) -> None:
    index, settings = garden
    res = SearchPipeline(index, settings, analyser=refine_to(refined)).search("tomatoes sun")
    assert [p.number for p in res.passes] == [1]
    assert why in res.analysis.skipped
    assert all(r.pass_ == 1 for r in res.results)


def test_offline_mode_names_keywords_and_heuristic(garden) -> None:
    index, settings = garden
    data = SearchPipeline(index, settings).search("tomatoes sun").to_dict()
    assert data["mode"]["terms"] == "keywords" and data["mode"]["analyser"] == "heuristic"
    assert (
        data["analysis"]["decision"] in ("SUFFICIENT", "REFINE")
        and data["analysis"]["analyser"] == "heuristic"
    )
    assert data["quality"]["level"] in ("high", "medium", "low") and data["passes"][0]["entries"] == 15


def test_failing_analyser_falls_back_to_the_heuristic(garden) -> None:
    index, settings = garden

    def broken(query: str, results: SearchResults) -> Analysis:
        raise RuntimeError("boom")

    res = SearchPipeline(index, settings, analyser=broken).search("tomatoes sun")
    assert res.analysis.analyser.endswith("->heuristic") and "boom" in res.analysis.reason
    assert res.results


def test_analyser_setting_heuristic_overrides_a_given_analyser(garden) -> None:
    index, settings = garden
    settings = settings.with_overrides({"experimental.analyser": "heuristic"})
    res = SearchPipeline(index, settings, analyser=refine_to("basil thyme")).search("tomatoes sun")
    assert res.analysis.analyser == "heuristic"


# -- the heuristic analyser ---------------------------------------------------------------------------


def test_heuristic_refines_a_medium_query_deterministically(sample_pipeline, sample_index) -> None:
    query = "carbon dating of fossils"
    pass1 = sample_pipeline.search(query, two_pass=False)
    with sample_index.snapshot() as snap:
        a = heuristic_analysis(query, pass1, snap)
        b = heuristic_analysis(query, pass1, snap)
    fresh = make_pipeline(sample_index, sample_index.settings).search(query, two_pass=False)
    with sample_index.snapshot() as snap:
        c = heuristic_analysis(query, fresh, snap)
    assert a == b == c
    assert a.decision == "REFINE" and a.analyser == "heuristic"
    assert a.refined_query.startswith(query + " ")
    extra = a.refined_query[len(query) :].split()
    assert 1 <= len(extra) <= 3 and not set(extra) & set(query.split())
    assert "quality medium" in a.reason and "relevant" in a.reason
    full = sample_pipeline.search(query)
    assert [p.number for p in full.passes] == [1, 2] and full.passes[1].query == a.refined_query
    assert full.analysis.analyser == "heuristic" and full.mode.analyser == "heuristic"


def test_heuristic_is_sufficient_when_quality_is_high_or_nothing_matched(
    sample_pipeline, sample_index
) -> None:
    high = sample_pipeline.search("how big should a syrian hamster cage be")
    assert high.analysis.decision == "SUFFICIENT" and "quality high" in high.analysis.reason
    assert [p.number for p in high.passes] == [1]
    none = sample_pipeline.search("zxqv blorptang quux")
    assert none.analysis.decision == "SUFFICIENT" and "no results" in none.analysis.reason
    weak = sample_pipeline.search("what is the capital of australia", two_pass=False)
    with sample_index.snapshot() as snap:
        verdict = heuristic_analysis("what is the capital of australia", weak, snap)
    assert verdict.decision == "SUFFICIENT" and "no relevant result" in verdict.reason


# -- knowledge first ----------------------------------------------------------------------------------

KNOWLEDGE = {
    "Knowledge/starter-feeding.md": "# Starter feeding\n\nFeed the sourdough starter equal weights of flour and water every day.",
    "Knowledge/starter-storage.md": "# Starter storage\n\nA sourdough starter kept in the fridge needs feeding once a week.",
    "Knowledge/starter-revival.md": "# Starter revival\n\nRevive a sleepy sourdough starter with two feedings at room temperature.",
    "Knowledge/starter-flour.md": "# Starter flour\n\nRye flour makes feeding a sourdough starter livelier.",
    "Journal/bake-day.md": "# Bake day\n\nThe sourdough loaf rose well; the beach volleyball match was cancelled.",
    "Journal/trip.md": "# Trip\n\nWe watched a beach volleyball final at the seaside on holiday.",
}


@pytest.fixture(params=[False, True], ids=["bm25", "vectors"])
def kb_pipeline(request, tmp_path: Path):
    notes = dict(KNOWLEDGE)
    for name, body in FILLER_TOPICS:
        notes[f"Misc/{name}.md"] = f"# {name.title()}\n\n{body}"
    root = write_notes(tmp_path / "kb", notes)
    settings = Settings().with_overrides({"index.embeddings": request.param, "rerank.enabled": False})
    embedder = request.getfixturevalue("embedder") if request.param else None
    index = VaultIndex(root, settings, embedder=embedder)
    index.open()
    index.embed_pending()
    yield SearchPipeline(index, settings)
    index.close()


def test_knowledge_first_returns_early_when_knowledge_fills_the_page(kb_pipeline) -> None:
    res = kb_pipeline.search("sourdough starter feeding", k=3)
    assert res.early_return is True and res.searched_sources == ["fact"]
    searched = [r for r in res.results if r.source == "search"]
    assert len(searched) == 3 and all(r.source_type == "fact" for r in searched)
    assert res.quality.level == "high"
    assert [p.number for p in res.passes] == [1]
    assert "early return" in res.analysis.skipped
    data = res.to_dict()
    assert data["early_return"] is True and data["searched_sources"] == ["fact"]


def test_knowledge_first_searches_everything_when_knowledge_is_weak(kb_pipeline) -> None:
    res = kb_pipeline.search("beach volleyball final", k=3)
    assert res.early_return is False and res.searched_sources == ["fact", "all"]
    assert res.results[0].document_path in ("Journal/trip.md", "Misc/volleyball.md")


def test_knowledge_first_needs_enough_relevant_notes(kb_pipeline) -> None:
    # Four knowledge notes answer; a page of ten is not filled by them.
    res = kb_pipeline.search("sourdough starter feeding", k=10)
    assert res.early_return is False and res.searched_sources == ["fact", "all"]
    assert "Journal/bake-day.md" in {r.document_path for r in res.results}


def test_knowledge_first_can_be_turned_off(kb_pipeline) -> None:
    settings = kb_pipeline.settings.with_overrides({"experimental.knowledge_first": False})
    res = SearchPipeline(kb_pipeline.index, settings).search("sourdough starter feeding", k=3)
    assert res.early_return is False and res.searched_sources == ["all"]
