"""The multi-pass reranker: early exit, budgets and timeouts, blended scores, movement, and each backend."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from explorer.config import Settings
from explorer.search.rerank import (
    HIGH_GAP,
    INSUFFICIENT,
    PEAKED,
    CrossEncoderBackend,
    LLMBackend,
    LocalNeuralBackend,
    MultiPassReranker,
    RerankBackend,
    RerankBackendError,
    RerankCancelled,
    RerankPolicy,
    VectorCache,
    blend_score,
    build_reranker,
    early_exit_reason,
    fused_shares,
    llm_prompt,
    parse_index_list,
    score_gap,
    score_ratio,
    sentence_windows,
)
from explorer.search.schema import ContextShard, Explanation, SearchResult
from llm_server import FakeLLMServer, error, text

# -- helpers ---------------------------------------------------------------------------------------------


def make_result(
    i: int,
    rrf: float,
    text_: str = "",
    relevance: float = 0.3,
    ranks: tuple[int | None, int | None] = (None, None),
) -> SearchResult:
    """A searched result with an explanation, as the pipeline builds them."""
    path = f"notes/n{i}.md"
    node = f"{path}#Part"
    shard = ContextShard(
        node_id=node,
        path=path,
        cursor=0,
        start=0,
        end=len(text_),
        text=text_ or f"note {i}",
        highlights=(),
        score=rrf,
    )
    ex = Explanation(
        rrf_k=60,
        best_node_id=node,
        contributions=(),
        fused_score=rrf,
        source_weight=1.0,
        pass_=1,
        shards_matched=1,
    )
    return SearchResult(
        document_path=path,
        title=f"Note {i}",
        source_type="note",
        node_id=node,
        rrf_score=rrf,
        score=rrf,
        bm25_rank=ranks[0],
        embedding_rank=ranks[1],
        snippet=text_[:200] or f"note {i}",
        source="search",
        relevance=relevance,
        context_shards=(shard,),
        explanation=ex,
    )


def make_results(n: int) -> list[SearchResult]:
    """n results with falling fused scores (1/(60+rank), like RRF)."""
    return [make_result(i, 1.0 / (60 + i + 1)) for i in range(n)]


class FakeBackend:
    """A scripted backend: unit scores by path, optional delays, call log."""

    name = "fake"

    def __init__(
        self,
        scores: dict[str, float] | None = None,
        *,
        refines: bool = True,
        delay: dict[bool, float] | None = None,
        fail: dict[bool, BaseException] | None = None,
        cooperative: bool = True,
        afford: dict[bool, int] | None = None,
        precise_bonus: dict[str, float] | None = None,
    ) -> None:
        self.scores = scores or {}
        self.refines = refines
        self.delay = delay or {}
        self.fail = fail or {}
        self.cooperative = cooperative
        self.afford = afford or {}
        self.precise_bonus = precise_bonus or {}
        self.calls: list[tuple[bool, list[str]]] = []
        self.cancelled_seen = threading.Event()

    def prepare(self) -> None:
        return None

    def normalize(self, scores: Sequence[float]) -> list[float]:
        return list(scores)

    def affordable(
        self, query: str, candidates: Sequence[SearchResult], budget_ms: float, *, precise: bool
    ) -> int:
        return self.afford.get(precise, len(candidates))

    def score(
        self, query: str, candidates: Sequence[SearchResult], *, precise: bool = True, cancelled=None
    ) -> list[float]:
        self.calls.append((precise, [c.document_path for c in candidates]))
        if precise in self.fail:
            raise self.fail[precise]
        wait = self.delay.get(precise, 0.0)
        if wait:
            end = time.monotonic() + wait
            while time.monotonic() < end:
                if self.cooperative and cancelled is not None and cancelled():
                    self.cancelled_seen.set()
                    raise RerankCancelled()
                time.sleep(0.005)
        bonus = self.precise_bonus if precise else {}
        return [self.scores.get(c.document_path, 0.1) + bonus.get(c.document_path, 0.0) for c in candidates]


def paths(results: Sequence[SearchResult]) -> list[str]:
    return [r.document_path for r in results]


def reranker(backend: Any, **cfg: Any) -> MultiPassReranker:
    return MultiPassReranker(backend, RerankPolicy(**cfg))


# -- early exit: a pure function -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ([0.95, 0.50, 0.45, 0.40], PEAKED),  # ratio 1.9
        ([0.70, 0.69, 0.68, 0.67], None),  # flat
        ([0.90, 0.85, 0.50, 0.45], None),  # bimodal, top two close
        ([0.95, 0.64, 0.60], HIGH_GAP),  # ratio 1.48 <= 1.5 but gap 0.31 > 0.3
        ([0.40, 0.95, 0.50], PEAKED),  # any order
        ([0.6, 0.0], PEAKED),  # runner-up 0: infinitely peaked
        ([0.0, 0.0, 0.0], None),  # nothing scores: no signal
        ([0.9], INSUFFICIENT),
        ([], INSUFFICIENT),
    ],
)
def test_early_exit_reason_on_crafted_distributions(scores: list[float], expected: str | None) -> None:
    assert early_exit_reason(scores, ratio=1.5, gap=0.3) == expected


def test_score_ratio_is_top_over_runner_up_and_thresholds_are_configurable() -> None:
    assert score_ratio([0.5, 1.0, 0.2]) == pytest.approx(2.0)
    assert score_gap([0.5, 1.0, 0.2]) == pytest.approx(0.5)
    assert score_ratio([0.3]) is None and score_gap([0.3]) is None
    assert early_exit_reason([0.95, 0.50], ratio=2.0, gap=0.5) is None
    assert early_exit_reason([0.95, 0.50], ratio=2.0, gap=0.4) == HIGH_GAP
    assert early_exit_reason([0.95, 0.50], ratio=1.8, gap=0.5) == PEAKED


@given(st.lists(st.floats(0.0, 1.0), min_size=2, max_size=30), st.floats(1.0, 3.0), st.floats(0.0, 1.0))
@hsettings(max_examples=200, deadline=None)
def test_no_early_exit_means_neither_signal_fires(scores: list[float], ratio: float, gap: float) -> None:
    reason = early_exit_reason(scores, ratio, gap)
    r, g = score_ratio(scores), score_gap(scores)
    assert r is not None and g is not None
    if reason is None:
        assert r <= ratio and g <= gap
    elif reason == PEAKED:
        assert r > ratio
    else:
        assert reason == HIGH_GAP and g > gap and r <= ratio


# -- the orchestrator ---------------------------------------------------------------------------------------


def test_flat_distribution_runs_both_passes_and_records_metadata() -> None:
    results = make_results(6)
    flat = {r.document_path: 0.5 for r in results}
    backend = FakeBackend(flat, precise_bonus={"notes/n4.md": 0.45})
    out, meta = reranker(backend, blend=0.7).rerank("query", results)
    assert [c[0] for c in backend.calls] == [False, True]
    assert meta.applied is True and meta.backend == "fake"
    assert meta.early_exit is False and meta.early_exit_reason is None
    for name in ("pass1", "pass2"):
        info = getattr(meta, name)
        assert info.applied is True and info.candidates == 6 and info.timed_out is False
        assert isinstance(info.latency_ms, float)
    assert meta.error is None
    json.dumps(meta.to_dict())  # JSON-able
    assert out[0].document_path == "notes/n4.md"  # pass 2 found it
    moved = out[0].explanation.rerank
    assert (moved.rank_before, moved.rank_after, moved.movement, moved.pass_) == (5, 1, 4, 2)
    json.dumps([r.to_dict() for r in out])


def test_peaked_distribution_exits_after_pass_1() -> None:
    results = make_results(5)
    backend = FakeBackend({"notes/n2.md": 0.95, "notes/n0.md": 0.5, "notes/n1.md": 0.45})
    out, meta = reranker(backend).rerank("q", results)
    assert len(backend.calls) == 1
    assert meta.early_exit is True and meta.early_exit_reason == PEAKED
    assert meta.pass2.applied is False and meta.pass2.skipped == "early exit"
    assert meta.score_ratio == pytest.approx(0.95 / 0.5, abs=1e-3)
    assert out[0].document_path == "notes/n2.md"
    assert all(r.explanation.rerank.pass_ == 1 for r in out)


def test_high_gap_exits_after_pass_1() -> None:
    results = make_results(4)
    backend = FakeBackend({"notes/n3.md": 0.95, "notes/n0.md": 0.64, "notes/n1.md": 0.62, "notes/n2.md": 0.6})
    _, meta = reranker(backend).rerank("q", results)
    assert meta.early_exit_reason == HIGH_GAP and len(backend.calls) == 1


@pytest.mark.parametrize("n", [0, 1])
def test_fewer_than_two_results_are_returned_as_they_are(n: int) -> None:
    results = make_results(n)
    backend = FakeBackend()
    out, meta = reranker(backend).rerank("q", results)
    assert out == results and backend.calls == []
    assert meta.applied is False and meta.early_exit is True and meta.early_exit_reason == INSUFFICIENT


def test_final_score_blends_rerank_and_fused_share_and_the_list_is_sorted_by_it() -> None:
    results = make_results(8)
    scores = {r.document_path: s for r, s in zip(results, [0.2, 0.9, 0.4, 0.85, 0.3, 0.5, 0.6, 0.1])}
    out, _ = reranker(FakeBackend(scores, refines=False), blend=0.6, pass2_candidates=0).rerank("q", results)
    shares = dict(zip(paths(results), fused_shares(results)))
    for r in out:
        expected = blend_score(scores[r.document_path], shares[r.document_path], 0.6)
        assert r.score == pytest.approx(expected, abs=1e-6)
        assert r.explanation.final_score == pytest.approx(r.score, abs=1e-6)
        assert r.rrf_score == r.explanation.fused_score  # the fused score itself is untouched
    assert [r.score for r in out] == sorted((r.score for r in out), reverse=True)
    assert sorted(paths(out)) == sorted(paths(results))


def test_scores_are_not_squashed_a_weak_best_match_stays_weak() -> None:
    results = make_results(3)
    weak = {r.document_path: s for r, s in zip(results, [0.10, 0.12, 0.08])}
    out, _ = reranker(FakeBackend(weak), blend=0.7).rerank("q", results)
    assert out[0].score < 0.5  # 0.7 * 0.12 + 0.3 * share: no rescaling to the top


@given(
    st.lists(st.tuples(st.floats(0.0, 1.0), st.floats(0.001, 0.05)), min_size=2, max_size=25),
    st.integers(2, 25),
    st.floats(0.0, 1.0),
)
@hsettings(max_examples=60, deadline=None)
def test_any_rerank_is_a_permutation_sorted_by_final_score_with_consistent_movement(
    pairs: list[tuple[float, float]], depth: int, blend: float
) -> None:
    results = [make_result(i, rrf) for i, (_, rrf) in enumerate(pairs)]
    scores = {r.document_path: s for r, (s, _) in zip(results, pairs)}
    out, meta = reranker(
        FakeBackend(scores),
        pass1_candidates=depth,
        pass2_candidates=depth,
        blend=blend,
        pass1_timeout_ms=0,
        pass2_timeout_ms=0,
    ).rerank("q", results)
    assert sorted(paths(out)) == sorted(paths(results))
    finals = [r.score for r in out]
    assert all(a >= b - 1e-9 for a, b in itertools.pairwise(finals))
    index_of = {p: i for i, p in enumerate(paths(results))}
    for after, r in enumerate(out, 1):
        rr = r.explanation.rerank
        assert rr.rank_after == after and rr.rank_before == index_of[r.document_path] + 1
        assert rr.movement == rr.rank_before - rr.rank_after
    assert meta.applied is True


def test_results_beyond_the_gate_keep_their_order_below_the_reranked_ones() -> None:
    results = make_results(7)
    scores = {"notes/n0.md": 0.5, "notes/n1.md": 0.45, "notes/n2.md": 0.6}  # flat enough to go on
    out, meta = reranker(FakeBackend(scores), pass1_candidates=3, pass2_candidates=0).rerank("q", results)
    assert paths(out)[:3] == ["notes/n2.md", "notes/n0.md", "notes/n1.md"]
    assert paths(out)[3:] == [f"notes/n{i}.md" for i in range(3, 7)]
    assert meta.pass2.skipped == "disabled"
    tail = out[3:]
    assert all(r.explanation.rerank.pass_ is None and r.explanation.rerank.rerank_score is None for r in tail)
    assert [r.score for r in out] == sorted((r.score for r in out), reverse=True)


def test_a_non_refining_backend_scores_only_new_candidates_in_pass_2() -> None:
    results = make_results(6)
    backend = FakeBackend({r.document_path: 0.5 for r in results}, refines=False)
    out, meta = reranker(backend, pass1_candidates=3, pass2_candidates=6).rerank("q", results)
    assert backend.calls[0] == (False, ["notes/n0.md", "notes/n1.md", "notes/n2.md"])
    assert backend.calls[1] == (True, ["notes/n3.md", "notes/n4.md", "notes/n5.md"])
    assert meta.pass2.applied is True and meta.pass2.candidates == 3
    assert all(r.explanation.rerank.rerank_score is not None for r in out)


def test_pass_2_takes_its_candidates_from_pass_1_order() -> None:
    results = make_results(5)
    scores = {
        "notes/n4.md": 0.55,
        "notes/n3.md": 0.54,
        "notes/n0.md": 0.5,
        "notes/n1.md": 0.5,
        "notes/n2.md": 0.5,
    }
    backend = FakeBackend(scores)
    reranker(backend, pass2_candidates=2).rerank("q", results)
    assert backend.calls[1] == (True, ["notes/n4.md", "notes/n3.md"])


def test_pass_1_timeout_keeps_the_incoming_order_and_stops_the_worker() -> None:
    results = make_results(5)
    backend = FakeBackend({"notes/n4.md": 0.9}, delay={False: 5.0})
    out, meta = reranker(backend, pass1_timeout_ms=30).rerank("q", results)
    assert out == results  # the very same records: scores and explanations untouched
    assert meta.applied is False
    assert meta.pass1.timed_out is True and meta.pass1.applied is False
    assert meta.pass2.applied is False and meta.error is None
    assert backend.cancelled_seen.wait(5.0), "the worker was told to stop"


def test_pass_2_timeout_keeps_pass_1_order() -> None:
    results = make_results(5)
    flat = {r.document_path: 0.5 for r in results}
    flat["notes/n3.md"] = 0.6
    backend = FakeBackend(flat, delay={True: 5.0}, precise_bonus={"notes/n1.md": 0.4})
    out, meta = reranker(backend, pass2_timeout_ms=30).rerank("q", results)
    assert meta.pass1.applied is True
    assert meta.pass2.timed_out is True and meta.pass2.applied is False
    assert out[0].document_path == "notes/n3.md"  # pass 1's order, not pass 2's
    assert all(r.explanation.rerank.pass_ == 1 for r in out)
    assert meta.applied is True


def test_a_backend_that_ignores_cancellation_still_cannot_hold_the_search() -> None:
    results = make_results(3)
    backend = FakeBackend(delay={False: 1.0}, cooperative=False)
    out, meta = reranker(backend, pass1_timeout_ms=20).rerank("q", results)
    assert out == results and meta.pass1.timed_out is True


@pytest.mark.parametrize(
    ("backend", "fragment"),
    [
        (FakeBackend(fail={False: RuntimeError("model exploded")}), "model exploded"),
        (FakeBackend(fail={False: RerankBackendError("embedding model off")}), "embedding model off"),
    ],
)
def test_backend_failure_keeps_the_incoming_order_and_says_why(backend: FakeBackend, fragment: str) -> None:
    results = make_results(4)
    out, meta = reranker(backend).rerank("q", results)
    assert out == results
    assert meta.applied is False and fragment in meta.error and meta.error.startswith("fake:")


def test_pass_2_failure_keeps_pass_1_order_and_says_why() -> None:
    results = make_results(4)
    flat = {"notes/n0.md": 0.4, "notes/n1.md": 0.4, "notes/n2.md": 0.5, "notes/n3.md": 0.4}
    backend = FakeBackend(flat, fail={True: ValueError("bad window")})
    out, meta = reranker(backend).rerank("q", results)
    assert meta.pass1.applied and not meta.pass2.applied
    assert "bad window" in meta.error and out[0].document_path == "notes/n2.md"


class WrongCount(FakeBackend):
    def score(
        self, query: str, candidates: Sequence[SearchResult], *, precise: bool = True, cancelled=None
    ) -> list[float]:
        return [0.5]


class NotANumber(FakeBackend):
    def score(
        self, query: str, candidates: Sequence[SearchResult], *, precise: bool = True, cancelled=None
    ) -> list[float]:
        return [float("nan")] * len(candidates)


class BrokenPrepare(FakeBackend):
    def prepare(self) -> None:
        raise OSError("no such model folder")


@pytest.mark.parametrize(
    ("backend", "fragment"),
    [(WrongCount(), "1 scores for 3"), (NotANumber(), "finite"), (BrokenPrepare(), "no such model folder")],
)
def test_malformed_scores_and_setup_failures_fall_back(backend: FakeBackend, fragment: str) -> None:
    results = make_results(3)
    out, meta = reranker(backend).rerank("q", results)
    assert out == results and meta.applied is False and fragment in meta.error


def test_budget_estimates_cut_or_skip_a_pass() -> None:
    results = make_results(6)
    flat = {r.document_path: 0.5 for r in results}
    cut = FakeBackend(flat, afford={True: 3})
    _, meta = reranker(cut).rerank("q", results)
    assert meta.pass2.applied is True and meta.pass2.candidates == 3 and meta.pass2.budget_limited is True
    assert cut.calls[1][0] is True and len(cut.calls[1][1]) == 3
    skip = FakeBackend(flat, afford={True: 1})
    out, meta = reranker(skip).rerank("q", results)
    assert meta.pass2.applied is False and "budget" in meta.pass2.skipped and len(skip.calls) == 1
    assert meta.applied is True  # pass 1's order
    nothing = FakeBackend(flat, afford={False: 1})
    out, meta = reranker(nothing).rerank("q", results)
    assert out == results and meta.pass1.applied is False and "budget" in meta.pass1.skipped
    # no time limit: no estimate is asked for
    free = FakeBackend(flat, afford={False: 0, True: 0})
    _, meta = reranker(free, pass1_timeout_ms=0, pass2_timeout_ms=0).rerank("q", results)
    assert meta.pass1.candidates == 6 and meta.pass2.candidates == 6


def test_a_gate_can_skip_reranking() -> None:
    results = make_results(4)
    backend = FakeBackend()
    out, meta = MultiPassReranker(backend, gate=lambda q, rs: "quality high").rerank("q", results)
    assert out == results and meta.skipped == "quality high" and backend.calls == []


def test_config_comes_from_settings() -> None:
    s = Settings().with_overrides(
        {
            "experimental.rerank_pass1_candidates": 12,
            "experimental.rerank_pass2_timeout_ms": 0,
            "experimental.rerank_blend": 0.4,
        }
    )
    cfg = MultiPassReranker(FakeBackend(), RerankPolicy.from_settings(s)).config
    assert (cfg.pass1_candidates, cfg.pass1_timeout_ms, cfg.pass2_candidates, cfg.pass2_timeout_ms) == (
        12,
        80.0,
        100,
        0.0,
    )
    assert (cfg.early_exit_ratio, cfg.early_exit_gap, cfg.blend) == (1.5, 0.3, 0.4)


# -- sentence windows -----------------------------------------------------------------------------------------


def test_sentence_windows_merge_short_sentences_and_drop_markup() -> None:
    text = (
        "# Syrian hamsters\n\nSyrian hamsters live alone. Keep one per cage! They are nocturnal and need a deep layer of bedding.\n\n"
        "- wheel: 28 cm\n- sand bath\n\n```python\ncage = Cage(width=100)\n```\nThe end."
    )
    windows = sentence_windows(text, min_chars=40)
    assert windows[0].startswith("Syrian hamsters Syrian hamsters live alone.")
    assert not any(w.startswith(("#", "-", "```")) for w in windows)
    assert "cage = Cage(width=100)" in windows  # code is a window of its own
    assert all(len(w) <= 400 for w in windows)
    long_sentence = "word " * 200
    assert sentence_windows(long_sentence) == [long_sentence.strip()]
    assert sentence_windows("") == []


# -- the local neural backend on the real sample index ----------------------------------------------------------


@pytest.fixture(scope="module")
def hamster_results(sample_pipeline) -> list[SearchResult]:
    res = sample_pipeline.search("hamster cage size", k=12, rerank=False, record=False)
    return [r for r in res.results if r.source == "search"]


def test_local_backend_conforms_and_scores_every_candidate(sample_index, hamster_results) -> None:
    backend = LocalNeuralBackend(sample_index)
    assert isinstance(backend, RerankBackend)
    backend.prepare()
    gate = backend.score("hamster cage size", hamster_results, precise=False)
    assert len(gate) == len(hamster_results) and all(isinstance(x, float) and -1.0 <= x <= 1.0 for x in gate)
    assert len(backend.cache) == 0  # the gate uses stored shard vectors only
    precise = backend.score("hamster cage size", hamster_results, precise=True)
    assert len(precise) == len(hamster_results) and all(isinstance(x, float) for x in precise)
    cached = len(backend.cache)
    assert cached > 0
    assert backend.score(
        "how big a cage for a hamster", hamster_results, precise=True
    )  # another query, same windows
    assert len(backend.cache) == cached
    units = backend.normalize([-0.5, 0.1, 0.45, 0.8, 0.99])
    assert (
        units[0] == 0.0 and units[1] == 0.0 and 0.0 < units[2] < 1.0 and units[3] == 1.0 and units[4] == 1.0
    )


def test_local_backend_prefers_the_note_about_the_query(sample_index, sample_pipeline) -> None:
    res = sample_pipeline.search("hamster cage size", k=10, rerank=False, record=False)
    on_topic = [r for r in res.results if "hamster" in r.document_path.lower()][:1]
    off = sample_pipeline.search("sourdough starter feeding", k=3, rerank=False, record=False)
    off_topic = [r for r in off.results if "hamster" not in r.document_path.lower()][:1]
    assert on_topic and off_topic
    backend = LocalNeuralBackend(sample_index)
    for precise in (False, True):
        hit, miss = backend.score("hamster cage size", on_topic + off_topic, precise=precise)
        assert hit > miss


def test_local_backend_budget_estimate_counts_uncached_windows(sample_index, hamster_results) -> None:
    backend = LocalNeuralBackend(sample_index, cache=VectorCache())
    n = len(hamster_results)
    assert backend.affordable("q", hamster_results, 80, precise=False) == n
    cold = backend.affordable("q", hamster_results, 150, precise=True)
    assert cold < n
    backend.score("hamster cage size", hamster_results, precise=True)
    assert backend.affordable("q", hamster_results, 150, precise=True) == n  # everything cached: free


def test_local_backend_scores_notes_not_embedded_yet_within_its_estimate(tmp_path: Path, embedder) -> None:
    from explorer.index.local.vault_index import VaultIndex

    root = tmp_path / "fresh"
    root.mkdir()
    for i, body in enumerate(
        [
            "Hamsters need a large cage with deep bedding.",
            "Sourdough needs a lively starter.",
            "Kites fly in steady wind.",
        ]
    ):
        (root / "notes").mkdir(exist_ok=True)
        (root / "notes" / f"n{i}.md").write_text(f"# Note {i}\n\n{body}\n", encoding="utf-8")
    ix = VaultIndex(root, embedder=embedder)
    ix.open()  # indexed, nothing embedded yet
    try:
        assert len(ix.pending()) > 0
        results = [make_result(i, 1.0 / (61 + i)) for i in range(3)]
        backend = LocalNeuralBackend(ix)
        assert backend.affordable("q", results, 0.001, precise=False) == 0
        assert backend.affordable("q", results, 10_000, precise=False) == 3
        scores = backend.score("hamster cage", results, precise=False)
        assert scores[0] > scores[1] and scores[0] > scores[2]
        assert backend.affordable("q", results, 0.001, precise=False) == 3  # embedded once, cached
    finally:
        ix.close()


def test_local_backend_stops_when_cancelled(sample_index, hamster_results) -> None:
    backend = LocalNeuralBackend(sample_index, cache=VectorCache())
    with pytest.raises(RerankCancelled):
        backend.score("hamster cage", hamster_results, precise=True, cancelled=lambda: True)


def test_a_remembered_query_vector_is_used_as_is(sample_index, hamster_results) -> None:
    import numpy as np

    backend = LocalNeuralBackend(sample_index)
    vec = np.zeros(384, dtype=np.float32)
    vec[0] = 1.0
    backend.remember_query("q", vec)
    # The gate pass scores each candidate by its best shard's cosine with that vector: component 0.
    scores = backend.score("q", hamster_results, precise=False)
    for r, score in zip(hamster_results, scores):
        stored = [sample_index.dense.vector(n) for n in sample_index.shard_ids(r.document_path)]
        assert score == pytest.approx(max(float(v[0]) for v in stored if v is not None), abs=1e-5)


class NoModelIndex:
    model_state = "off"

    def embedder(self):
        return None


def test_local_backend_without_a_model_falls_back() -> None:
    _out, meta = MultiPassReranker(LocalNeuralBackend(NoModelIndex())).rerank("q", make_results(3))  # type: ignore[arg-type]
    assert meta.applied is False and "embedding model off" in meta.error


# -- the pipeline and the CLI ---------------------------------------------------------------------------------


def test_pipeline_reranks_when_asked_and_records_it(sample_pipeline) -> None:
    default = sample_pipeline.search("how big should a hamster cage be", record=False)
    assert default.mode.rerank is sample_pipeline.settings.rerank.enabled
    res = sample_pipeline.search("how big should a hamster cage be", rerank=True, record=False)
    assert res.mode.rerank is True
    meta = res.rerank
    assert meta.backend == "local" and meta.pass1.candidates >= 2
    json.dumps(res.to_dict())
    searched = [r for r in res.results if r.source == "search"]
    if meta.applied:
        assert all(
            r.explanation.rerank is not None and r.explanation.final_score == pytest.approx(r.score)
            for r in searched
        )
        assert [r.score for r in searched] == sorted((r.score for r in searched), reverse=True)
    assert len(searched) <= sample_pipeline.settings.search.top_k
    # the pipeline hands over the query vector it already computed (a new pipeline: nothing cached)
    from explorer.engine import make_pipeline

    fresh = make_pipeline(sample_pipeline.index, sample_pipeline.settings)
    handed: list[str] = []
    remember = fresh.reranker.backend.remember_query
    fresh.reranker.backend.remember_query = lambda query, vector: (
        handed.append(query),
        remember(query, vector),
    )[1]
    fresh.search("how big should a hamster cage be", rerank=True, record=False)
    assert handed == ["how big should a hamster cage be"]
    off = sample_pipeline.search("how big should a hamster cage be", rerank=False, record=False)
    assert off.rerank.to_dict() == {"applied": False} and off.mode.rerank is False
    assert all(r.explanation is None or r.explanation.rerank is None for r in off.results)


def run_cli(*args: str) -> dict[str, Any]:
    from explorer.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(list(args))
    assert code == 0
    return json.loads(buf.getvalue())


def test_cli_rerank_flags(sample_copy: Path, sample_index) -> None:
    on = run_cli("search", "hamster cage", "--vault", str(sample_copy), "--json", "--rerank")
    assert on["mode"]["rerank"] is True and on["rerank"]["backend"] == "local"
    assert {"applied", "pass1", "pass2", "early_exit", "early_exit_reason"} <= set(on["rerank"])
    off = run_cli("search", "hamster cage", "--vault", str(sample_copy), "--json", "--no-rerank")
    assert off["mode"]["rerank"] is False and off["rerank"] == {"applied": False}
    asked = run_cli(
        "search",
        "hamster cage",
        "--vault",
        str(sample_copy),
        "--json",
        "--set",
        "rerank.enabled=false",
        "--rerank",
    )
    assert asked["mode"]["rerank"] is True  # the flag wins over the default
    default = run_cli(
        "search", "hamster cage", "--vault", str(sample_copy), "--json", "--set", "rerank.enabled=false"
    )
    assert default["mode"]["rerank"] is False
    none = run_cli(
        "search",
        "hamster cage",
        "--vault",
        str(sample_copy),
        "--json",
        "--set",
        "rerank.backend=none",
        "--rerank",
    )
    assert none["mode"]["rerank"] is False  # nothing to rerank with


# -- wiring ---------------------------------------------------------------------------------------------------


def test_build_reranker_picks_the_backend_and_says_when_it_falls_back(sample_index, tmp_path: Path) -> None:
    base = Settings()
    assert (
        build_reranker(sample_index, base.with_overrides({"rerank.enabled": False})) is not None
    )  # asked per search
    assert build_reranker(sample_index, base.with_overrides({"rerank.backend": "none"})) is None
    local = build_reranker(sample_index, base)
    assert isinstance(local.backend, LocalNeuralBackend) and local.notes == []
    missing = build_reranker(
        sample_index,
        base.with_overrides(
            {"rerank.backend": "cross-encoder", "rerank.cross_encoder": str(tmp_path / "nope")}
        ),
    )
    assert isinstance(missing.backend, LocalNeuralBackend) and "cross-encoder" in missing.notes[0]
    ce = build_reranker(
        sample_index,
        base.with_overrides({"rerank.backend": "cross-encoder", "rerank.cross_encoder": str(tmp_path)}),
    )
    assert isinstance(ce.backend, CrossEncoderBackend)
    no_llm = build_reranker(sample_index, base.with_overrides({"rerank.backend": "llm"}), None)
    assert isinstance(no_llm.backend, LocalNeuralBackend) and "LLM" in no_llm.notes[0]
    _, meta = no_llm.rerank("q", make_results(1))
    assert meta.notes == no_llm.notes


# -- LLM backend ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "count", "expected"),
    [
        ("2, 0, 1", 3, [2, 0, 1]),
        ("[3], [1]", 4, [3, 1]),
        ("Ranking: 1,1,0,7", 3, [1, 0]),
        ("none of them", 3, []),
        ("", 3, []),
        ("0\n2\n1", 3, [0, 2, 1]),
    ],
)
def test_parse_index_list(reply: str, count: int, expected: list[int]) -> None:
    assert parse_index_list(reply, count) == expected


class ScriptedLLM:
    """An object with the LLMClient chat signature, answering from a list."""

    configured = True

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.messages: list[Any] = []

    def chat(self, messages, max_tokens=None, temperature=None, json=False, budget=None):
        from explorer.search.core.llm import LLMReply

        self.messages.append(messages)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return LLMReply(answer, 42)


def low_quality_results(n: int) -> list[SearchResult]:
    return [make_result(i, 1.0 / (61 + i), f"passage {i}", relevance=0.2) for i in range(n)]


def test_llm_backend_reorders_by_the_reply_and_counts_tokens() -> None:
    llm = ScriptedLLM("2, 0")
    backend = LLMBackend(llm)
    assert isinstance(backend, RerankBackend)
    results = low_quality_results(4)
    scores = backend.score("query", results)
    assert scores == [0.75, 0.5, 1.0, 0.25]  # 2, 0, then the unlisted 1, 3 in incoming order
    prompt = llm.messages[0][-1]["content"]
    assert '"query"' in prompt and "[0] <<<NOTE\nNote 0" in prompt and "[3] <<<NOTE\nNote 3" in prompt
    assert backend.tokens_used == 42


@pytest.mark.parametrize("answer", ["I cannot rank these.", RuntimeError("http 500")])
def test_llm_failure_keeps_the_incoming_order(answer: Any) -> None:
    from explorer.search.rerank import quality_gate

    r = MultiPassReranker(
        LLMBackend(ScriptedLLM(answer)), RerankPolicy(pass2_candidates=0), gate=quality_gate(lambda: True)
    )
    results = low_quality_results(4)
    out, meta = r.rerank("q", results)
    assert out == results and meta.applied is False and meta.backend == "llm"
    assert meta.error.startswith("llm:")


def test_llm_rerank_skips_high_quality_results() -> None:
    from explorer.search.rerank import quality_gate

    llm = ScriptedLLM("1,0")
    r = MultiPassReranker(LLMBackend(llm), RerankPolicy(pass2_candidates=0), gate=quality_gate(lambda: True))
    strong = [make_result(i, 1.0 / (61 + i), "x", relevance=1.0, ranks=(1, 1)) for i in range(3)]
    out, meta = r.rerank("q", strong)
    assert out == strong and "quality high" in meta.skipped and llm.messages == []


def test_llm_rerank_through_the_real_client_and_a_local_server(sample_index) -> None:
    from explorer.search.core.llm import LLMClient

    with FakeLLMServer() as server:
        server.push(text("1, 0, 2"), error(500))
        settings = Settings().with_overrides(
            {
                "llm.base_url": server.base_url,
                "llm.model": "fake-model",
                "llm.timeout_s": 30.0,
                "rerank.backend": "llm",
            }
        )
        client = LLMClient(settings.llm)
        r = build_reranker(sample_index, settings, client)
        assert isinstance(r.backend, LLMBackend) and r.config.pass2_candidates == 0
        results = low_quality_results(3)
        out, meta = r.rerank("which note", results)
        assert paths(out) == ["notes/n1.md", "notes/n0.md", "notes/n2.md"]
        assert meta.applied is True and meta.pass2.skipped == "disabled" and meta.tokens_used > 0
        assert "[2] <<<NOTE\nNote 2" in server.requests[0]["messages"][-1]["content"]
        out2, meta2 = r.rerank("another query", results)
        assert out2 == results and "http 500" in meta2.error


def test_llm_prompt_lists_every_candidate() -> None:
    prompt = llm_prompt("q", low_quality_results(3))
    assert all(f"[{i}] <<<NOTE\nNote {i} (notes/n{i}.md)" in prompt for i in range(3))


# -- cross-encoder backend --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_cross_encoder_backend_scores_with_a_local_model(tmp_path: Path) -> None:
    from transformers import AutoTokenizer, BertForSequenceClassification

    from explorer.index.local.embed import bundled_model_dir

    src = bundled_model_dir()
    if src is None:
        pytest.skip("the bundled MiniLM is not installed")
    folder = tmp_path / "tiny-cross-encoder"
    BertForSequenceClassification.from_pretrained(str(src), num_labels=1).save_pretrained(str(folder))
    AutoTokenizer.from_pretrained(str(src)).save_pretrained(str(folder))
    backend = CrossEncoderBackend(str(folder), batch_size=2)
    assert isinstance(backend, RerankBackend)
    results = [
        make_result(i, 1.0 / (61 + i), f"Hamsters need a cage of {i + 1} square metres.") for i in range(5)
    ]
    backend.prepare()
    scores = backend.score("hamster cage size", results)
    assert len(scores) == 5 and all(isinstance(s, float) for s in scores)
    assert all(0.0 < p < 1.0 for p in backend.normalize(scores))
    out, meta = MultiPassReranker(backend, RerankPolicy(pass1_timeout_ms=0, pass2_timeout_ms=0)).rerank(
        "hamster cage size", results
    )
    assert meta.applied is True and meta.error is None and sorted(paths(out)) == sorted(paths(results))
    with pytest.raises(RerankCancelled):
        backend.score("q", results, cancelled=lambda: True)


def test_cross_encoder_with_a_missing_folder_falls_back(tmp_path: Path) -> None:
    _out, meta = MultiPassReranker(CrossEncoderBackend(str(tmp_path / "missing"))).rerank(
        "q", make_results(3)
    )
    assert meta.applied is False and "not found" in meta.error


EXIT_PROBE = """
import sys
from pathlib import Path
from explorer.engine import make_pipeline
from explorer.config import Settings
from explorer.index.local.vault_index import VaultIndex
s = Settings().with_overrides({"experimental.rerank_pass2_timeout_ms": 5, "experimental.rerank_early_exit_ratio": 100.0, "experimental.rerank_early_exit_gap": 1.0})
ix = VaultIndex(Path(sys.argv[1]), s)
ix.open()
p = make_pipeline(ix, s)
p.reranker.backend.cost.ms = 1e-6  # the estimate lets every window through: the pass must time out inside the model
p.reranker.backend.cache = type(p.reranker.backend.cache)()
r = p.search("hamster cage bedding and wheels", rerank=True)
print(r.rerank.pass2.timed_out)
"""


def test_exit_right_after_a_timed_out_pass_is_clean(sample_copy: Path, sample_index) -> None:
    """A worker still inside the model when the process ends is stopped first (no abort at exit)."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", EXIT_PROBE, str(sample_copy)], capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "True"
