"""One search reads one version: a change batch that lands mid-search shows in the next search, not in this one."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from conftest import write_notes
from explorer.config import Settings
from explorer.engine.watch import VaultWatcher
from explorer.index.local.lexical import BM25Index
from explorer.index.local.vault_index import VaultIndex
from explorer.search.core.pipeline import SearchPipeline
from explorer.search.core.twopass import Analysis
from explorer.text.tokenize import tokenize

pytestmark = pytest.mark.filterwarnings("ignore:Callback with id:RuntimeWarning")
FAST = Settings().with_overrides(
    {"index.embeddings": False, "experimental.watch_debounce_ms": 100, "rerank.enabled": False}
)

NOTES = {
    "harbour.md": "# Harbour\n\nLanterns glow over the harbour at night; the lanterns are lit by hand.\n",
    "market.md": "# Market\n\nThe market sells paper lanterns and candles for the lantern festival.\n",
    "garden.md": "# Garden\n\nTomatoes and basil grow in the garden beside the wall.\n",
}
NEW_NOTE = "# Zephyr\n\nThe zephyr carries the zephyr lanterns across the bay.\n"
CHANGED_HARBOUR = "# Harbour\n\nFishing boats rest in the harbour at night.\n"


def refine_to(query: str):
    """An analyser that always asks for pass 2 on `query`."""

    def analyser(_query: str, _results) -> Analysis:
        return Analysis("REFINE", refined_query=query, reason="test", analyser="test")

    return analyser


def wait_for(condition, timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.02)
    return False


def paths(results) -> list[str]:
    return [r.document_path for r in results.results]


def test_a_batch_landing_between_the_passes_shows_in_the_next_search_only(tmp_path: Path) -> None:
    root = write_notes(tmp_path / "vault", NOTES)
    index = VaultIndex(root, FAST)
    errors: list[str] = []
    watcher = VaultWatcher(index, on_error=errors.append)
    watcher.start()
    try:
        assert watcher.wait_idle(20), errors
        pipeline = SearchPipeline(index, FAST, analyser=refine_to("zephyr lanterns"))
        before = index.version
        applied = threading.Event()

        def hold_between_passes(stage: str, _results) -> None:
            if stage != "pass1":
                return
            # A real batch through watchdog: one note added, one changed, one deleted.
            (root / "zephyr.md").write_text(NEW_NOTE, encoding="utf-8")
            (root / "harbour.md").write_text(CHANGED_HARBOUR, encoding="utf-8")
            (root / "market.md").unlink()
            if wait_for(
                lambda: (
                    index.note("zephyr.md") is not None
                    and index.note("market.md") is None
                    and "Fishing" in index.note("harbour.md").text
                )
            ):
                applied.set()

        out = pipeline.search("lanterns [[zephyr]]", on_stage=hold_between_passes)
        assert applied.is_set(), f"the watcher did not apply the batch while the search waited ({errors})"
        assert index.version > before
        # Pass 2, always-include, the context windows and quality all read the version pass 1 read.
        assert out.stats.index_version == out.trace.version == before
        assert [p.number for p in out.passes] == [1, 2] and out.passes[1].query == "zephyr lanterns"
        assert "zephyr.md" not in paths(out)  # neither pass 2 nor [[zephyr]] (always-include) found it
        assert set(paths(out)) == {"harbour.md", "market.md"}
        by_path = {r.document_path: r for r in out.results}
        assert "lit by hand" in by_path["harbour.md"].context_shards[0].text  # the old text, not the new
        assert "paper lanterns" in by_path["market.md"].context_shards[0].text  # deleted since, still whole
        assert out.stats.total_documents_searched == 3
        # ... and the whole answer is the one the unchanged vault gives.
        twin = VaultIndex(write_notes(tmp_path / "twin", NOTES), FAST)
        twin.open()
        try:
            same = SearchPipeline(twin, FAST, analyser=refine_to("zephyr lanterns")).search(
                "lanterns [[zephyr]]"
            )
        finally:
            twin.close()
        assert paths(out) == paths(same)
        assert [r.score for r in out.results] == pytest.approx([r.score for r in same.results])
        assert out.quality == same.quality and out.analysis == same.analysis
        # The next search reads the new version.
        after = pipeline.search("lanterns [[zephyr]]")
        assert after.stats.index_version == index.version > before
        assert "zephyr.md" in paths(after) and "market.md" not in paths(after)
        assert after.stats.total_documents_searched == 3
        harbour = next((r for r in after.results if r.document_path == "harbour.md"), None)
        assert harbour is None or "Fishing" in harbour.context_shards[0].text
    finally:
        watcher.stop()
        index.close()


def test_a_snapshot_keeps_its_rankings_while_batches_land_and_its_release_lets_rows_be_reused(
    tmp_path: Path,
) -> None:
    root = write_notes(tmp_path / "vault", NOTES)
    index = VaultIndex(root, FAST)
    index.open()
    try:
        snap = index.snapshot()
        top = snap.bm25_top(tokenize("lanterns harbour"), 10)
        allowed = snap.restrict({i for i in snap.shards if snap.shards[i].path != "garden.md"})
        restricted = snap.bm25_top(tokenize("lanterns"), 10, allowed)
        df = snap.lexical.doc_freq("lantern")
        write_notes(root, {"zephyr.md": NEW_NOTE, "harbour.md": CHANGED_HARBOUR})
        (root / "market.md").unlink()
        for _ in range(3):  # several batches while the snapshot is held
            index.refresh()
            write_notes(root, {"zephyr.md": NEW_NOTE + "\nMore lanterns.\n"})
        assert snap.bm25_top(tokenize("lanterns harbour"), 10) == top
        assert snap.bm25_top(tokenize("lanterns"), 10, allowed) == restricted
        assert (
            snap.lexical.doc_freq("lantern") == df
            and snap.lexical.n_docs() == 3
            and set(snap.notes) == set(NOTES)
        )
        assert snap.counts().version < index.version
        snap.release()
        with index.snapshot() as now:
            assert "zephyr.md" in now.notes and "market.md" not in now.notes
            assert {now.shards[k].path for k, _ in now.bm25_top(tokenize("lanterns"), 10)} == {"zephyr.md"}
    finally:
        index.close()


def test_a_forked_bm25_index_scores_as_one_built_fresh_and_leaves_the_original_as_it_was() -> None:
    docs = {
        f"d{i}": tokenize(text)
        for i, text in enumerate(
            [
                "lanterns glow over the harbour",
                "paper lanterns and candles",
                "tomatoes and basil",
                "the harbour wall",
            ]
        )
    }
    base = BM25Index()
    for key, toks in docs.items():
        base.add(key, toks)
    query = tokenize("lanterns harbour wall")
    before = base.top(query, 10)
    fork = base.fork()
    fork.remove("d1")
    fork.add("d0", tokenize("fishing boats in the harbour"))
    fork.add("d9", tokenize("lanterns on the wall"))
    assert base.top(query, 10) == before and base.doc_freq("lantern") == 2
    fresh = BM25Index()
    for key, toks in {
        **{k: v for k, v in docs.items() if k != "d1"},
        "d0": tokenize("fishing boats in the harbour"),
        "d9": tokenize("lanterns on the wall"),
    }.items():
        fresh.add(key, toks)
    assert fork.top(query, 10) == pytest.approx(fresh.top(query, 10))
    assert fork.idf() == pytest.approx(fresh.idf())


@pytest.mark.slow
def test_vectors_read_through_a_snapshot_stay_put_while_shards_are_re_embedded(tmp_path: Path) -> None:
    root = write_notes(tmp_path / "vault", NOTES)
    settings = Settings().with_overrides({"index.embeddings": True})
    index = VaultIndex(root, settings)
    index.open()
    try:
        assert index.embed_pending() > 0
        emb = index.embedder()
        assert emb is not None
        query = emb.encode(["lights at the harbour"])
        with index.snapshot() as snap:
            hits = snap.vector_top(query, 10, 0.0)[0]
            harbour = next(k for k in snap.shards if snap.shards[k].path == "harbour.md")
            vec = snap.vector(harbour)
            write_notes(root, {"harbour.md": CHANGED_HARBOUR, "zephyr.md": NEW_NOTE})
            index.refresh()
            index.embed_pending()
            assert snap.vector_top(query, 10, 0.0)[0] == pytest.approx(hits)
            assert snap.vector(harbour) == pytest.approx(vec)
        with index.snapshot() as now:
            assert now.vector(harbour) is not None and now.vector(harbour) != pytest.approx(vec)
            assert {now.shards[k].path for k, _ in now.vector_top(query, 10, 0.0)[0]} == {
                "harbour.md",
                "market.md",
                "garden.md",
                "zephyr.md",
            }
        # No snapshot held: later changes reuse the rows the held one kept (the matrix does not grow).
        rows = index.dense.rows
        for i in range(4):
            write_notes(root, {"harbour.md": CHANGED_HARBOUR + f"\nEdit {i}.\n"})
            index.refresh()
            index.embed_pending()
        assert index.dense.rows == rows
    finally:
        index.close()


DATED = {
    "alpha.md": "---\ndate: 2024-01-10\nstatus: draft\n---\n# Alpha\n\nLanterns glow over the harbour.\n",
    "beta.md": "---\ndate: 2024-03-05\nstatus: draft\n---\n# Beta\n\nPaper lanterns sell at the market.\n",
    "gamma.md": "---\ndate: 2024-02-01\nstatus: done\n---\n# Gamma\n\nLanterns hang in the garden.\n",
    "delta.md": "---\ndate: 2024-04-01\nstatus: draft\n---\n# Delta\n\nThe ferry leaves at dawn.\n",
}
ALPHA_DONE = "---\ndate: 2023-05-01\nstatus: done\n---\n# Alpha\n\nLanterns glow over the harbour.\n"
DELTA_LATER = "---\ndate: 2024-06-30\nstatus: draft\n---\n# Delta\n\nThe ferry leaves at dawn.\n"


def test_dates_and_properties_a_search_filters_on_are_those_of_its_snapshot(tmp_path: Path) -> None:
    """`[status:draft]`, `after:` and each result's date come from the search's snapshot: a real
    watchdog batch that re-dates notes and changes a property between the passes reaches the next
    search only (delta.md is found by pass 2 alone, so its date is read after the batch landed)."""
    root = write_notes(tmp_path / "vault", DATED)
    index = VaultIndex(root, FAST)
    errors: list[str] = []
    watcher = VaultWatcher(index, on_error=errors.append)
    watcher.start()
    try:
        assert watcher.wait_idle(20), errors
        pipeline = SearchPipeline(index, FAST, analyser=refine_to("ferry"))
        query = "lanterns [status:draft] after:2024-01-01"
        before = index.version
        applied = threading.Event()

        def change_between_passes(stage: str, _results) -> None:
            if stage != "pass1":
                return
            (root / "alpha.md").write_text(ALPHA_DONE, encoding="utf-8")
            (root / "delta.md").write_text(DELTA_LATER, encoding="utf-8")
            if wait_for(
                lambda: (
                    (a := index.note("alpha.md")) is not None
                    and "done" in a.text
                    and (d := index.note("delta.md")) is not None
                    and "06-30" in d.text
                )
            ):
                applied.set()

        out = pipeline.search(query, on_stage=change_between_passes)
        assert applied.is_set(), f"the watcher did not apply the batch while the search waited ({errors})"
        assert index.version > before and out.stats.index_version == before
        assert [p.number for p in out.passes] == [1, 2]
        dates = {r.document_path: r.date for r in out.results}
        # The dates its snapshot holds, for pass 1's notes and pass 2's alike.
        assert dates == {"alpha.md": "2024-01-10", "beta.md": "2024-03-05", "delta.md": "2024-04-01"}
        after = pipeline.search(query)
        assert after.stats.index_version == index.version
        dates = {r.document_path: r.date for r in after.results}
        assert dates == {"beta.md": "2024-03-05", "delta.md": "2024-06-30"}  # alpha: done, and dated before
        done = pipeline.search("lanterns [status:done]")
        assert {r.document_path: r.date for r in done.results} == {
            "alpha.md": "2023-05-01",
            "gamma.md": "2024-02-01",
        }
    finally:
        watcher.stop()
        index.close()


RERANKED = {
    "harbour.md": "# Harbour\n\nLanterns glow over the harbour at night; fishermen light them by hand.\n",
    "market.md": "# Market\n\nThe market sells paper lanterns and candles for the lantern festival.\n",
    "festival.md": "# Festival\n\nAt the lantern festival, lanterns float down the river.\n",
    "garden.md": "# Garden\n\nTomatoes and basil grow in the garden beside the wall.\n",
}


def test_the_reranker_reads_the_search_snapshot(tmp_path: Path, embedder) -> None:
    """The local reranker scores a note's shards as the search's snapshot holds them: a batch that
    rewrites a candidate between pass 1 and the reranking changes nothing in this search's scores."""
    from explorer.search.rerank import build_reranker

    settings = Settings().with_overrides(
        {"experimental.rerank_pass1_timeout_ms": 0, "experimental.rerank_pass2_timeout_ms": 0}
    )

    def pipeline_over(root: Path) -> tuple[VaultIndex, SearchPipeline]:
        index = VaultIndex(root, settings, embedder=embedder)
        index.open()
        index.embed_pending()
        return index, SearchPipeline(index, settings, reranker=build_reranker(index, settings))

    root = write_notes(tmp_path / "vault", RERANKED)
    index, pipeline = pipeline_over(root)
    twin, twin_pipeline = pipeline_over(write_notes(tmp_path / "twin", RERANKED))
    try:
        changed = threading.Event()

        def rewrite(stage: str, _results) -> None:
            if stage == "pass1":
                (root / "festival.md").write_text("# Festival\n\nA quiet walk along the shore.\n")
                index.refresh(
                    paths=["festival.md"], reread=True
                )  # a batch: festival's shard has no vector now
                changed.set()

        out = pipeline.search("lantern festival", rerank=True, two_pass=False, on_stage=rewrite)
        same = twin_pipeline.search("lantern festival", rerank=True, two_pass=False)
        assert changed.is_set() and out.rerank is not None and out.rerank.applied
        assert paths(out) == paths(same)
        assert [r.score for r in out.results] == pytest.approx([r.score for r in same.results], rel=1e-5)
        after = pipeline.search("lantern festival", rerank=True, two_pass=False)
        assert after.stats.index_version > out.stats.index_version
        by_path = {r.document_path: r.score for r in after.results}
        assert (
            by_path.get("festival.md", 0.0)
            < dict(zip(paths(same), [r.score for r in same.results]))["festival.md"]
        )
    finally:
        index.close()
        twin.close()
