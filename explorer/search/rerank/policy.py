"""The rerank policy: when and how deep to rerank (gate pass, early exit, precision pass, budgets, blend).

How a result list is reranked (`MultiPassReranker.rerank`):

1. Fewer than two results: nothing to reorder; early exit `insufficient_results`.
2. **Pass 1 (gate)**: the backend scores the first `pass1_candidates` results (default 30) within
   `pass1_timeout_ms` (default 80 ms).
3. **Early exit** (when pass 2 is enabled) on the pass-1 scores, each on the backend's 0-1
   scale, best first (`s1 >= s2 >= ...`):
     - `peaked_distribution`: the score ratio `s1 / s2` exceeds `early_exit_ratio` (default 1.5;
       `s2 <= 0 < s1` counts as infinitely peaked);
     - `high_score_gap`: the score gap `s1 - s2` exceeds `early_exit_gap` (default 0.3).
   The score ratio is always top score over runner-up: `[0.95, 0.50, ...]` (ratio 1.9) is peaked,
   `[0.70, 0.69, ...]` (1.01) is flat and goes on to pass 2.
4. **Pass 2 (precision)**: the backend scores the first `pass2_candidates` results of pass 1's
   order (default 100) within `pass2_timeout_ms` (default 150 ms). A backend that `refines`
   (the local one: sentence windows instead of whole shards) rescores its candidates; the
   others score only candidates pass 1 did not reach.

Budgets. Before a pass the backend estimates from its measured cost how many of the wanted
candidates fit the budget (`affordable`), and the pass takes that prefix (`budget_limited` in
the metadata); fewer than two skips the pass. The pass itself runs in a worker thread and waits
at most its budget; past it the worker is told to stop (backends check between batches) and the
last complete order stays: the fused order when pass 1 times out, pass 1's order when pass 2
does. A timeout of 0 means no limit.

Final score of a reranked result (what `SearchResult.score` becomes; the list is sorted by it):

    final = blend * rerank_score + (1 - blend) * fused_share

`rerank_score` is the backend's score of the result's latest pass on a fixed 0-1 scale (a
calibrated cosine or a probability, never rescaled per list, so a weak best match stays visibly
weak); `fused_share` is the result's fused (RRF) score divided by the best fused score of the
list; `blend` is `RerankPolicy.blend` (default 0.7). Scored results are sorted by final score;
results no pass reached follow in fused order, their final score being the fused part
`(1 - blend) * fused_share` capped at the score above. Each result's explanation records the
rerank score, the fused share, the final score and the movement (rank before -> after, the
rank before being the fused order's).
"""

from __future__ import annotations

import atexit
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from explorer.search.rerank.base import Cancelled, RerankBackend, RerankCancelled
from explorer.search.schema import RerankInfo, RerankMove, RerankPass, SearchResult

if TYPE_CHECKING:
    from explorer.config import Settings
    from explorer.index.backend import Snapshot

#: Early-exit reasons, as they appear in the metadata.
INSUFFICIENT = "insufficient_results"
PEAKED = "peaked_distribution"
HIGH_GAP = "high_score_gap"

#: At interpreter exit, how long to wait for scoring workers to reach a stopping point.
EXIT_GRACE_S = 5.0

#: Results scored by the precision pass (0 would disable it).
PASS2_CANDIDATES = 100


@dataclass(frozen=True, slots=True)
class RerankPolicy:
    """How deep and how long each pass goes, when pass 2 is skipped, and how scores blend.

    The defaults are the measured ones; `from_settings` reads the `experimental.rerank_*` values.
    """

    pass1_candidates: int = 30
    """Results scored by the gate pass."""
    pass1_timeout_ms: float = 80.0
    """Budget of the gate pass; 0 means no limit. On timeout the fused order stays."""
    pass2_candidates: int = PASS2_CANDIDATES
    """Results scored by the precision pass; 0 disables it."""
    pass2_timeout_ms: float = 150.0
    """Budget of the precision pass; 0 means no limit. On timeout the gate pass's order stays."""
    early_exit_ratio: float = 1.5
    """Skip pass 2 when the gate's top score / runner-up score (0-1 scale) exceeds this."""
    early_exit_gap: float = 0.3
    """Skip pass 2 when the gate's top score minus runner-up score (0-1 scale) exceeds this."""
    blend: float = 0.7
    """final = blend * rerank score + (1 - blend) * fused score / best fused score."""

    @classmethod
    def from_settings(cls, settings: Settings) -> RerankPolicy:
        """The policy of `settings` (its `experimental.rerank_*` tuning values)."""
        x = settings.experimental
        return cls(
            pass1_candidates=x.rerank_pass1_candidates,
            pass1_timeout_ms=x.rerank_pass1_timeout_ms,
            pass2_timeout_ms=x.rerank_pass2_timeout_ms,
            early_exit_ratio=x.rerank_early_exit_ratio,
            early_exit_gap=x.rerank_early_exit_gap,
            blend=x.rerank_blend,
        )


def _checked(config: RerankPolicy) -> RerankPolicy:
    """`config` with the blend clamped to 0-1 and the budgets as floats (as the reranker uses them)."""
    return replace(
        config,
        pass1_timeout_ms=float(config.pass1_timeout_ms),
        pass2_timeout_ms=float(config.pass2_timeout_ms),
        early_exit_ratio=float(config.early_exit_ratio),
        early_exit_gap=float(config.early_exit_gap),
        blend=min(max(float(config.blend), 0.0), 1.0),
    )


# -- pure parts ----------------------------------------------------------------------------------------


def score_ratio(scores: Sequence[float]) -> float | None:
    """Top score over runner-up score (any order); None with fewer than two scores.

    `inf` when the runner-up is 0 or less and the top is positive; 1.0 when both are 0 or less.
    """
    if len(scores) < 2:
        return None
    s1, s2 = sorted(scores, reverse=True)[:2]
    if s2 <= 0.0:
        return math.inf if s1 > 0.0 else 1.0
    return s1 / s2


def score_gap(scores: Sequence[float]) -> float | None:
    """Top score minus runner-up score (any order); None with fewer than two scores."""
    if len(scores) < 2:
        return None
    s1, s2 = sorted(scores, reverse=True)[:2]
    return s1 - s2


def early_exit_reason(scores: Sequence[float], ratio: float = 1.5, gap: float = 0.3) -> str | None:
    """Why pass 2 can be skipped after pass 1, or None when it should run.

    Args:
        scores: Pass-1 scores on the 0-1 scale, any order.
        ratio: Peaked when top / runner-up exceeds this.
        gap: High gap when top - runner-up exceeds this.

    Returns:
        `insufficient_results` (fewer than two scores), `peaked_distribution`,
        `high_score_gap` (checked in this order), or None.
    """
    if len(scores) < 2:
        return INSUFFICIENT
    r = score_ratio(scores)
    if r is not None and r > ratio:
        return PEAKED
    g = score_gap(scores)
    if g is not None and g > gap:
        return HIGH_GAP
    return None


def blend_score(rerank_score: float, fused_share: float, blend: float) -> float:
    """`blend * rerank_score + (1 - blend) * fused_share`."""
    return blend * rerank_score + (1.0 - blend) * fused_share


def fused_shares(results: Sequence[SearchResult]) -> list[float]:
    """Each result's fused (RRF) score as a share of the best one in the list (0-1)."""
    top = max((r.rrf_score for r in results), default=0.0)
    if top <= 0.0:
        return [0.0 for _ in results]
    return [max(r.rrf_score, 0.0) / top for r in results]


# -- scoring workers ---------------------------------------------------------------------------------------

_live_lock = threading.Lock()
_live: dict[threading.Thread, threading.Event] = {}


def _stop_workers_at_exit() -> None:
    """Ask running scoring workers to stop and wait briefly, so none is inside a model at exit."""
    with _live_lock:
        items = list(_live.items())
    for _thread, stop in items:
        stop.set()
    deadline = time.monotonic() + EXIT_GRACE_S
    for thread, _stop in items:
        thread.join(max(0.0, deadline - time.monotonic()))


atexit.register(_stop_workers_at_exit)


@dataclass(slots=True)
class PassOutcome:
    """What one timed pass produced."""

    scores: list[float] | None
    """Raw scores, one per candidate; None when the pass failed or timed out."""
    latency_ms: float
    """How long the pass waited."""
    timed_out: bool
    """The budget ran out first."""
    error: str | None
    """Why the backend failed (None on success or timeout)."""


def run_timed(
    fn: Callable[[Cancelled], Sequence[float]], count: int, timeout_ms: float, name: str = "rerank"
) -> PassOutcome:
    """Run `fn(cancelled)` in a worker thread and wait at most `timeout_ms` (no limit when <= 0).

    On timeout the worker's `cancelled()` turns True and it is left to stop at its next check;
    its result is discarded. Exceptions become `error`; a wrong number of scores or a non-finite
    score is an error too.
    """
    stop = threading.Event()
    done = threading.Event()
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["scores"] = [float(s) for s in fn(stop.is_set)]
        except RerankCancelled:
            box["error"] = "cancelled"
        except Exception as exc:  # noqa: BLE001 - a backend failure must never break a search
            box["error"] = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        finally:
            with _live_lock:
                _live.pop(threading.current_thread(), None)
            done.set()

    t0 = time.perf_counter()
    worker = threading.Thread(target=work, name=f"rerank-{name}", daemon=True)
    with _live_lock:
        _live[worker] = stop
    worker.start()
    finished = done.wait(timeout_ms / 1000.0 if timeout_ms > 0 else None)
    latency = round((time.perf_counter() - t0) * 1000, 3)
    if not finished:
        stop.set()
        return PassOutcome(None, latency, True, None)
    if "error" in box:
        return PassOutcome(None, latency, False, f"{name}: {box['error']}")
    scores = box["scores"]
    if len(scores) != count:
        return PassOutcome(None, latency, False, f"{name}: {len(scores)} scores for {count} candidates")
    if not all(math.isfinite(s) for s in scores):
        return PassOutcome(None, latency, False, f"{name}: a score is not a finite number")
    return PassOutcome(scores, latency, False, None)


# -- the orchestrator ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Scored:
    raw: float
    unit: float
    pass_: int


class MultiPassReranker:
    """Reranks fused results in two passes with early exit (see the module docstring).

    Implements the pipeline's `Reranker` protocol: `rerank(query, results) -> (results, meta)`.
    Never raises for a backend failure: the last complete order is kept and `meta.error`
    says why.
    """

    def __init__(
        self,
        backend: RerankBackend,
        config: RerankPolicy | None = None,
        gate: Callable[[str, list[SearchResult]], str | None] | None = None,
        notes: Sequence[str] = (),
    ) -> None:
        """
        Args:
            backend: What scores the candidates.
            config: Candidates, budgets, early-exit thresholds, blend (a RerankPolicy).
            gate: Called before pass 1; a returned reason skips reranking (`meta.skipped`).
            notes: Remarks copied into every metadata (e.g. a backend fallback at setup).
        """
        self.backend = backend
        self.config = _checked(config or RerankPolicy())
        self.gate = gate
        self.notes = list(notes)

    def rerank(
        self,
        query: str,
        results: list[SearchResult],
        query_vector: np.ndarray | None = None,
        snapshot: Snapshot | None = None,
    ) -> tuple[list[SearchResult], RerankInfo]:
        """Reorder `results`; returns the new list and a `RerankInfo` of what was done.

        `query_vector`, the query's embedding when the caller has it, saves a backend that
        embeds queries (the local one) from doing it again. `snapshot`, the snapshot the search
        reads, is the one a backend that reads the index (the local one) reads too
        (`RerankBackend.reading`), so a batch landing meanwhile is invisible to the reranking too.

        The info carries `applied`, `backend`, `pass1` and `pass2` (`applied`, `candidates`,
        `latency_ms`, `timed_out`; `budget_limited` when the backend's cost estimate cut the
        candidates; `skipped` with a reason when the pass did not run), `early_exit`,
        `early_exit_reason`, `score_ratio` and `score_gap` (of pass 1), `blend`, `error`, and
        `skipped` / `notes` / `prepare_ms` / `tokens_used` when they apply.
        """
        cfg = self.config
        results = list(results)
        meta = RerankInfo(backend=self.backend.name, blend=cfg.blend)
        if self.notes:
            meta.notes = list(self.notes)
        if min(max(cfg.pass1_candidates, 0), len(results)) < 2:
            meta.early_exit, meta.early_exit_reason = True, INSUFFICIENT
            meta.pass1.skipped = meta.pass2.skipped = "fewer than 2 candidates"
            return results, meta
        if self.gate is not None:
            why = self.gate(query, results)
            if why:
                meta.skipped = why
                return results, meta
        backend = self.backend
        if snapshot is not None and hasattr(backend, "reading"):
            backend = backend.reading(snapshot)
        if query_vector is not None and hasattr(backend, "remember_query"):
            backend.remember_query(query, query_vector)
        t0 = time.perf_counter()
        try:
            backend.prepare()
        except Exception as exc:  # noqa: BLE001 - setup failure: keep the order, say why
            meta.error = f"{self.backend.name}: {type(exc).__name__}: {exc}"
            return results, meta
        prepare_ms = (time.perf_counter() - t0) * 1000
        if prepare_ms >= 1.0:
            meta.prepare_ms = round(prepare_ms, 3)
        tokens_before = int(getattr(self.backend, "tokens_used", 0) or 0)
        try:
            return self._passes(backend, query, results, meta)
        finally:
            if hasattr(self.backend, "tokens_used"):
                meta.tokens_used = int(getattr(self.backend, "tokens_used", 0) or 0) - tokens_before

    def _passes(
        self, backend: RerankBackend, query: str, results: list[SearchResult], meta: RerankInfo
    ) -> tuple[list[SearchResult], RerankInfo]:
        cfg = self.config
        shares = fused_shares(results)
        scored: dict[int, _Scored] = {}

        # pass 1: the gate, on the first results of the fused order
        wanted1 = list(range(min(cfg.pass1_candidates, len(results))))
        head1 = self._affordable(backend, query, results, wanted1, cfg.pass1_timeout_ms, False)
        if len(head1) < 2:
            meta.pass1 = RerankPass(
                False, len(head1), 0.0, False, skipped="the budget allows fewer than 2 candidates"
            )
            meta.pass2.skipped = "pass 1 did not run"
            return results, meta
        out1 = self._timed(backend, query, [results[i] for i in head1], False, cfg.pass1_timeout_ms)
        meta.pass1 = RerankPass(
            out1.scores is not None, len(head1), out1.latency_ms, out1.timed_out, len(head1) < len(wanted1)
        )
        if out1.scores is None:
            meta.error = out1.error
            meta.pass2.skipped = "pass 1 did not complete"
            return results, meta
        unit1 = _clip01(backend.normalize(out1.scores))
        scored.update({i: _Scored(raw, u, 1) for i, raw, u in zip(head1, out1.scores, unit1)})
        order = self._order(len(results), scored, shares)
        meta.applied = True
        meta.score_ratio = _json_float(score_ratio(unit1))
        meta.score_gap = _json_float(score_gap(unit1))
        if cfg.pass2_candidates <= 0:
            meta.pass2.skipped = "disabled"
            return self._assemble(results, order, scored, shares), meta
        reason = early_exit_reason(unit1, cfg.early_exit_ratio, cfg.early_exit_gap)
        if reason is not None:
            meta.early_exit, meta.early_exit_reason = True, reason
            meta.pass2.skipped = "early exit"
            return self._assemble(results, order, scored, shares), meta

        # pass 2: precision, on the first results of pass 1's order
        head2 = order[: min(cfg.pass2_candidates, len(results))]
        wanted2 = head2 if backend.refines else [i for i in head2 if i not in scored]
        if not wanted2 or len(head2) < 2:
            meta.pass2.skipped = "no candidates beyond pass 1"
            return self._assemble(results, order, scored, shares), meta
        todo = self._affordable(backend, query, results, wanted2, cfg.pass2_timeout_ms, True)
        if not todo or (backend.refines and len(todo) < 2):
            meta.pass2 = RerankPass(
                False, len(todo), 0.0, False, True, skipped="the budget allows too few candidates"
            )
            return self._assemble(results, order, scored, shares), meta
        out2 = self._timed(backend, query, [results[i] for i in todo], True, cfg.pass2_timeout_ms)
        meta.pass2 = RerankPass(
            out2.scores is not None, len(todo), out2.latency_ms, out2.timed_out, len(todo) < len(wanted2)
        )
        if out2.scores is None:
            if out2.error:
                meta.error = out2.error
            return self._assemble(results, order, scored, shares), meta
        unit2 = _clip01(backend.normalize(out2.scores))
        scored.update({i: _Scored(raw, u, 2) for i, raw, u in zip(todo, out2.scores, unit2)})
        return self._assemble(results, self._order(len(results), scored, shares), scored, shares), meta

    # -- helpers -------------------------------------------------------------------------------
    def _affordable(
        self,
        backend: RerankBackend,
        query: str,
        results: list[SearchResult],
        wanted: list[int],
        timeout_ms: float,
        precise: bool,
    ) -> list[int]:
        """The prefix of `wanted` the backend expects to score within the budget."""
        if timeout_ms <= 0 or not wanted:
            return wanted
        try:
            n = int(backend.affordable(query, [results[i] for i in wanted], timeout_ms, precise=precise))
        except Exception:  # noqa: BLE001 - an estimate must not stop a pass; the timeout still guards it
            n = len(wanted)
        return wanted[: max(0, min(n, len(wanted)))]

    def _timed(
        self,
        backend: RerankBackend,
        query: str,
        candidates: list[SearchResult],
        precise: bool,
        timeout_ms: float,
    ) -> PassOutcome:
        def fn(cancelled: Cancelled) -> Sequence[float]:
            return backend.score(query, candidates, precise=precise, cancelled=cancelled)

        return run_timed(fn, len(candidates), timeout_ms, backend.name)

    def _final(self, i: int, scored: dict[int, _Scored], shares: list[float]) -> float:
        return blend_score(scored[i].unit, shares[i], self.config.blend)

    def _order(self, count: int, scored: dict[int, _Scored], shares: list[float]) -> list[int]:
        """Scored results by final score (ties keep the fused order), then the others in fused order."""
        head = sorted(scored, key=lambda i: (-self._final(i, scored, shares), i))
        return head + [i for i in range(count) if i not in scored]

    def _assemble(
        self, results: list[SearchResult], order: list[int], scored: dict[int, _Scored], shares: list[float]
    ) -> list[SearchResult]:
        """Results in `order` with final scores, rerank explanations and movement recorded.

        An unscored result's final score is its fused part, `(1 - blend) * fused_share`, capped
        at the score of the result above it, so the list stays sorted by score.
        """
        blend = self.config.blend
        out: list[SearchResult] = []
        floor = math.inf
        for after, i in enumerate(order):
            s = scored.get(i)
            final = self._final(i, scored, shares) if s is not None else min((1.0 - blend) * shares[i], floor)
            floor = min(floor, final)
            info = RerankMove(
                backend=self.backend.name,
                pass_=s.pass_ if s is not None else None,
                raw_score=_json_float(s.raw) if s is not None else None,
                rerank_score=_json_float(s.unit) if s is not None else None,
                fused_share=round(shares[i], 4),
                final_score=round(final, 4),
                rank_before=i + 1,
                rank_after=after + 1,
                movement=i - after,
            )
            r = results[i]
            ex = r.explanation
            if ex is not None:
                ex = replace(ex, rerank=info, final_score=round(final, 6))
            out.append(replace(r, score=round(final, 6), explanation=ex))
        return out


def _clip01(values: Sequence[float]) -> list[float]:
    return [min(max(float(v), 0.0), 1.0) if math.isfinite(v) else 0.0 for v in values]


def _json_float(value: float | None) -> float | str | None:
    if value is None:
        return None
    if math.isinf(value):
        return "inf"
    return round(float(value), 4)


def quality_gate(dense: Callable[[], bool]) -> Callable[[str, list[SearchResult]], str | None]:
    """A gate that skips reranking when the incoming results' quality is already high."""
    from explorer.search.quality import assess

    def gate(_query: str, results: list[SearchResult]) -> str | None:
        level = assess(results, dense()).level
        return "quality high: LLM rerank not needed" if level == "high" else None

    return gate
