"""Multi-pass reranking: a gate pass, a precision pass, early exit, blended scores, pluggable backends.

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
list; `blend` is `rerank.blend` (default 0.7). Scored results are sorted by final score;
results no pass reached follow in fused order, their final score being the fused part
`(1 - blend) * fused_share` capped at the score above. Each result's explanation records the
rerank score, the fused share, the final score and the movement (rank before -> after, the
rank before being the fused order's).
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from explorer.config import RerankSettings
from explorer.index.backend import ModelState
from explorer.search.prompt import DATA_RULE, quote_note
from explorer.search.schema import RerankInfo, RerankMove, RerankPass, SearchResult
from explorer.text.lru import LRUCache

if TYPE_CHECKING:
    from explorer.config import Settings
    from explorer.index.backend import IndexBackend

#: Early-exit reasons, as they appear in the metadata.
INSUFFICIENT = "insufficient_results"
PEAKED = "peaked_distribution"
HIGH_GAP = "high_score_gap"

#: Candidates the LLM backend sees at most (each costs prompt tokens).
LLM_CANDIDATES = 20
#: Characters of each candidate shown to the LLM.
LLM_SNIPPET_CHARS = 200
#: Completion tokens of an LLM ranking (a list of indices).
LLM_MAX_TOKENS = 120
#: Characters of a candidate's passage given to a cross-encoder.
CROSS_ENCODER_CHARS = 1200
#: At interpreter exit, how long to wait for scoring workers to reach a stopping point.
EXIT_GRACE_S = 5.0

Cancelled = Callable[[], bool]


class RerankCancelled(Exception):
    """The pass that asked for these scores has stopped waiting (its budget ran out)."""


class RerankBackendError(RuntimeError):
    """A backend cannot score; the message says why (it becomes the metadata's `error`)."""


def _never() -> bool:
    return False


@runtime_checkable
class RerankBackend(Protocol):
    """Scores candidates for a query; higher is more relevant.

    Attributes:
        name: Short name for metadata (`local`, `cross-encoder`, `llm`).
        refines: True when the precision pass scores at a finer grain than the gate pass (so
            pass 2 rescores every candidate); False when a score does not depend on the pass.
    """

    name: str
    refines: bool

    def prepare(self) -> None:
        """Load what scoring needs (a model); called before pass 1, outside the pass budgets."""
        ...

    def score(
        self,
        query: str,
        candidates: Sequence[SearchResult],
        *,
        precise: bool = True,
        cancelled: Cancelled | None = None,
    ) -> list[float]:
        """One raw score per candidate, in candidate order.

        Args:
            query: The query text (filters removed).
            candidates: The results to score.
            precise: False for the gate pass (cheaper scoring allowed), True for the precision pass.
            cancelled: Polled between batches of work; once it returns True the backend should
                raise RerankCancelled.
        """
        ...

    def normalize(self, scores: Sequence[float]) -> list[float]:
        """Raw scores mapped to 0-1 on a fixed scale (the same for every list)."""
        ...

    def affordable(
        self, query: str, candidates: Sequence[SearchResult], budget_ms: float, *, precise: bool
    ) -> int:
        """How many of the first candidates the backend expects to score within `budget_ms`."""
        ...


# -- configuration -----------------------------------------------------------------------------------


def _checked(config: RerankSettings) -> RerankSettings:
    """`config` with the blend clamped to 0-1 and the early-exit thresholds as floats."""
    return replace(
        config,
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


def parse_index_list(text: str, count: int) -> list[int]:
    """Indices in `[0, count)` from a reply such as `3, 1, 0, 2`, first occurrence kept, in order.

    Brackets and words around the numbers are tolerated (`[3], [1]`, `Ranking: 3,1`).
    """
    out: list[int] = []
    seen: set[int] = set()
    for m in re.finditer(r"(?<!\d)\d{1,6}(?!\d)", text or ""):  # a 5,000-digit "index" is no index
        n = int(m.group())
        if 0 <= n < count and n not in seen:
            seen.add(n)
            out.append(n)
    return out


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


class CostModel:
    """A running estimate of milliseconds per unit of work (a window, a pair), thread-safe."""

    def __init__(self, initial_ms: float, weight: float = 0.3) -> None:
        self.ms = initial_ms
        self.weight = weight
        self._lock = threading.Lock()

    def observe(self, elapsed_ms: float, units: int) -> None:
        """Fold a measurement into the estimate (exponential moving average)."""
        if units <= 0:
            return
        with self._lock:
            self.ms = (1.0 - self.weight) * self.ms + self.weight * (elapsed_ms / units)

    def fits(self, units: int, budget_ms: float, share: float = 0.6) -> bool:
        """True when `units` are expected to take at most `share` of `budget_ms`."""
        return units * self.ms <= budget_ms * share


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
        config: RerankSettings | None = None,
        gate: Callable[[str, list[SearchResult]], str | None] | None = None,
        notes: Sequence[str] = (),
    ) -> None:
        """
        Args:
            backend: What scores the candidates.
            config: Candidates, budgets, early-exit thresholds, blend (the `[rerank]` settings).
            gate: Called before pass 1; a returned reason skips reranking (`meta.skipped`).
            notes: Remarks copied into every metadata (e.g. a backend fallback at setup).
        """
        self.backend = backend
        self.config = _checked(config or RerankSettings())
        self.gate = gate
        self.notes = list(notes)

    def rerank(
        self, query: str, results: list[SearchResult], query_vector: np.ndarray | None = None
    ) -> tuple[list[SearchResult], RerankInfo]:
        """Reorder `results`; returns the new list and a `RerankInfo` of what was done.

        `query_vector`, the query's embedding when the caller has it, saves a backend that
        embeds queries (the local one) from doing it again.

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
        if query_vector is not None and hasattr(self.backend, "remember_query"):
            self.backend.remember_query(query, query_vector)
        t0 = time.perf_counter()
        try:
            self.backend.prepare()
        except Exception as exc:  # noqa: BLE001 - setup failure: keep the order, say why
            meta.error = f"{self.backend.name}: {type(exc).__name__}: {exc}"
            return results, meta
        prepare_ms = (time.perf_counter() - t0) * 1000
        if prepare_ms >= 1.0:
            meta.prepare_ms = round(prepare_ms, 3)
        tokens_before = int(getattr(self.backend, "tokens_used", 0) or 0)
        try:
            return self._passes(query, results, meta)
        finally:
            if hasattr(self.backend, "tokens_used"):
                meta.tokens_used = int(getattr(self.backend, "tokens_used", 0) or 0) - tokens_before

    def _passes(
        self, query: str, results: list[SearchResult], meta: RerankInfo
    ) -> tuple[list[SearchResult], RerankInfo]:
        cfg = self.config
        backend = self.backend
        shares = fused_shares(results)
        scored: dict[int, _Scored] = {}

        # pass 1: the gate, on the first results of the fused order
        wanted1 = list(range(min(cfg.pass1_candidates, len(results))))
        head1 = self._affordable(query, results, wanted1, cfg.pass1_timeout_ms, False)
        if len(head1) < 2:
            meta.pass1 = RerankPass(
                False, len(head1), 0.0, False, skipped="the budget allows fewer than 2 candidates"
            )
            meta.pass2.skipped = "pass 1 did not run"
            return results, meta
        out1 = self._timed(query, [results[i] for i in head1], False, cfg.pass1_timeout_ms)
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
        todo = self._affordable(query, results, wanted2, cfg.pass2_timeout_ms, True)
        if not todo or (backend.refines and len(todo) < 2):
            meta.pass2 = RerankPass(
                False, len(todo), 0.0, False, True, skipped="the budget allows too few candidates"
            )
            return self._assemble(results, order, scored, shares), meta
        out2 = self._timed(query, [results[i] for i in todo], True, cfg.pass2_timeout_ms)
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
        self, query: str, results: list[SearchResult], wanted: list[int], timeout_ms: float, precise: bool
    ) -> list[int]:
        """The prefix of `wanted` the backend expects to score within the budget."""
        if timeout_ms <= 0 or not wanted:
            return wanted
        try:
            n = int(self.backend.affordable(query, [results[i] for i in wanted], timeout_ms, precise=precise))
        except Exception:  # noqa: BLE001 - an estimate must not stop a pass; the timeout still guards it
            n = len(wanted)
        return wanted[: max(0, min(n, len(wanted)))]

    def _timed(
        self, query: str, candidates: list[SearchResult], precise: bool, timeout_ms: float
    ) -> PassOutcome:
        def fn(cancelled: Cancelled) -> Sequence[float]:
            return self.backend.score(query, candidates, precise=precise, cancelled=cancelled)

        return run_timed(fn, len(candidates), timeout_ms, self.backend.name)

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


# -- local neural backend ----------------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_MARKUP = re.compile(r"^\s*(?:#{1,6}\s+|[-*+]\s+(?:\[[ xX]\]\s+)?|\d+[.)]\s+|>\s*)+")
_FENCE = re.compile(r"^\s*(```|~~~)")


def sentence_windows(text: str, min_chars: int = 60, max_chars: int = 400) -> list[str]:
    """Sentence windows of a passage: its lines cut into sentences, short ones merged.

    List, heading and quote marks are dropped; code blocks form windows of their own. A window
    grows by merging until it reaches `min_chars`, never past `max_chars` (one long sentence
    stays whole); a short remainder joins the window before it.
    """
    blocks: list[list[str]] = [[]]
    in_code = False
    for line in text.splitlines():
        if _FENCE.match(line):
            in_code = not in_code
            blocks.append([])
            continue
        if in_code:
            if line.strip():
                blocks[-1].append(line.strip())
            continue
        line = _MARKUP.sub("", line).strip()
        if line and not set(line) <= set("-=*_|: "):
            blocks[-1].extend(p.strip() for p in _SENTENCE_END.split(line) if p.strip())
    windows: list[str] = []
    for pieces in blocks:
        current = ""
        group: list[str] = []
        for p in pieces:
            if not current:
                current = p
            elif len(current) < min_chars and len(current) + 1 + len(p) <= max_chars:
                current = f"{current} {p}"
            else:
                group.append(current)
                current = p
        if current:
            if group and len(current) < min_chars // 2 and len(group[-1]) + 1 + len(current) <= max_chars:
                group[-1] = f"{group[-1]} {current}"
            else:
                group.append(current)
        windows.extend(group)
    return windows


@functools.lru_cache(maxsize=8192)
def _windows_of(text: str) -> tuple[str, ...]:
    """`sentence_windows(text)`, memoised (shard texts repeat from search to search)."""
    return tuple(sentence_windows(text))


class VectorCache(LRUCache[str, np.ndarray]):
    """Thread-safe LRU of embedding vectors keyed by a hash of the embedded text."""

    def __init__(self, capacity: int = 20_000) -> None:
        super().__init__(capacity)

    @staticmethod
    def key(text: str) -> str:
        """The cache key of a text."""
        return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class _Best:
    """The best shard of a candidate for the query."""

    cosine: float
    """Its cosine with the query."""
    text: str
    """Its raw text (cut into windows by the precision pass)."""


class LocalNeuralBackend:
    """The offline default: the bundled MiniLM, scoring at a finer grain than retrieval.

    Gate pass (`precise=False`): the query's cosine with every shard of the candidate's note,
    from the stored shard vectors (no model call but the query's, cached per query text); the
    best shard's cosine is the score. Retrieval saw only shards that made a ranking, as ranks;
    this sees every shard with its cosine.

    Precision pass (`precise=True`): the candidate's first `window_shards` context shards (the
    passages fusion ranked best, the ones shown; else its best shard) are cut into sentence
    windows (`sentence_windows`); each window is embedded once and cached by text hash (window
    vectors do not depend on the query, so the cache serves every later search). Score:
    `window_weight * best window cosine + (1 - window_weight) * best shard cosine`. Windows are
    embedded in batches of `batch_size`, best candidates first, with `cancelled` checked between
    batches; what was embedded before a timeout stays cached.

    `normalize` maps a cosine to 0-1 linearly between COS_FLOOR and COS_CEIL (a fixed
    calibration of this model).
    """

    name = "local"
    refines = True
    COS_FLOOR = 0.1
    COS_CEIL = 0.8

    def __init__(
        self,
        index: IndexBackend,
        window_weight: float = 0.5,
        window_shards: int = 2,
        batch_size: int = 8,
        cache: VectorCache | None = None,
    ) -> None:
        """
        Args:
            index: The index whose embedder and shard vectors are used.
            window_weight: Share of the best window cosine in the precision score.
            window_shards: Context shards of a candidate cut into windows.
            batch_size: Windows per model call (the granularity of cancellation).
            cache: Window vector cache (a private one by default).
        """
        self.index = index
        self.window_weight = window_weight
        self.window_shards = window_shards
        self.cost = CostModel(initial_ms=6.0)
        """Milliseconds per embedded window, measured."""
        self.batch_size = batch_size
        self.cache = cache or VectorCache()
        self._queries: LRUCache[str, np.ndarray] = LRUCache(128)

    def prepare(self) -> None:
        """Load the embedding model (raises when none is available)."""
        if self.index.embedder() is None:
            raise RerankBackendError(f"embedding model {self.index.model_state}")

    def normalize(self, scores: Sequence[float]) -> list[float]:
        """Cosine -> 0-1, linear between COS_FLOOR and COS_CEIL, clipped."""
        span = self.COS_CEIL - self.COS_FLOOR
        return [min(max((s - self.COS_FLOOR) / span, 0.0), 1.0) for s in scores]

    def affordable(
        self, query: str, candidates: Sequence[SearchResult], budget_ms: float, *, precise: bool
    ) -> int:
        """The prefix of `candidates` whose texts still to embed fit the budget.

        Gate: shards without a stored vector (notes not embedded yet). Precision: sentence
        windows not in the cache. Each costs the measured time per embedded text; a candidate
        with nothing left to embed costs nothing.
        """
        pending: set[str] = set()
        for n, r in enumerate(candidates):
            texts = (
                self._unembedded_shards(r)
                if not precise
                else [
                    w
                    for c in r.context_shards[: self.window_shards]
                    if c.text.strip()
                    for w in _windows_of(c.text)
                ]
            )
            for t in texts:
                k = VectorCache.key(t)
                if k not in pending and self.cache.get(k) is None:
                    pending.add(k)
            if not self.cost.fits(len(pending), budget_ms):
                return n
        return len(candidates)

    def _unembedded_shards(self, r: SearchResult) -> list[str]:
        with self.index.snapshot() as snap:
            return [
                snap.shards[n].search_text
                for n in snap.shard_ids(r.document_path)
                if n in snap.shards and snap.vector(n) is None
            ]

    def score(
        self,
        query: str,
        candidates: Sequence[SearchResult],
        *,
        precise: bool = True,
        cancelled: Cancelled | None = None,
    ) -> list[float]:
        """Best shard cosine (gate) or the window/shard mix (precision), per candidate."""
        cancelled = cancelled or _never
        emb = self.index.embedder()
        if emb is None:
            raise RerankBackendError(f"embedding model {self.index.model_state}")
        qvec = self._query_vector(query, emb)
        best = self._best_shards(qvec, candidates, emb, cancelled)
        if not precise:
            return [b.cosine for b in best]
        windows = [self._windows(r, b) for r, b in zip(candidates, best)]
        self._embed_missing([w for ws in windows for w in ws], emb, cancelled)
        w = self.window_weight
        out: list[float] = []
        for b, ws in zip(best, windows):
            cos = [float(v @ qvec) for v in (self.cache.get(VectorCache.key(t)) for t in ws) if v is not None]
            out.append(w * max(cos) + (1.0 - w) * b.cosine if cos else b.cosine)
        return out

    def warm(self, results: Sequence[SearchResult], query: str, cancelled: Cancelled | None = None) -> int:
        """Embed the windows the precision pass would need for `results`; returns how many were new."""
        emb = self.index.embedder()
        if emb is None:
            return 0
        cancelled = cancelled or _never
        before = len(self.cache)
        try:
            best = self._best_shards(self._query_vector(query, emb), results, emb, cancelled)
            windows = [w for r, b in zip(results, best) for w in self._windows(r, b)]
            self._embed_missing(windows, emb, cancelled)
        except RerankCancelled:
            pass
        return max(0, len(self.cache) - before)

    def remember_query(self, query: str, vector: np.ndarray) -> None:
        """Use `vector` as the embedding of `query` (the pipeline already computed it)."""
        vec = np.asarray(vector, dtype=np.float32).reshape(-1)
        self._queries.put(query, vec)

    # -- parts -----------------------------------------------------------------------------------------
    def _windows(self, r: SearchResult, best: _Best) -> list[str]:
        texts = [c.text for c in r.context_shards[: self.window_shards] if c.text.strip()] or [best.text]
        return list(dict.fromkeys(w for t in texts for w in _windows_of(t)))

    def _query_vector(self, query: str, emb: Any) -> np.ndarray:
        vec = self._queries.get(query)
        if vec is None:
            vec = np.asarray(emb.encode([query])[0], dtype=np.float32)
            self._queries.put(query, vec)
        return vec

    def _best_shards(
        self, qvec: np.ndarray, candidates: Sequence[SearchResult], emb: Any, cancelled: Cancelled
    ) -> list[_Best]:
        """Per candidate, its best shard: stored vectors, else shards embedded now, else its passages."""
        stored: list[list[tuple[np.ndarray, str]]] = []
        unembedded: list[list[str]] = []
        with self.index.snapshot() as snap:
            for r in candidates:
                have: list[tuple[np.ndarray, str]] = []
                lack: list[str] = []
                for node_id in snap.shard_ids(r.document_path):
                    sh = snap.shards.get(node_id)
                    if sh is None:
                        continue
                    v = snap.vector(node_id)
                    if v is not None:
                        have.append((v, sh.text))
                    else:
                        lack.append(sh.search_text)
                if not have and not lack:  # gone from the index since: use the passages shown
                    lack = [c.text for c in r.context_shards if c.text.strip()]
                stored.append(have)
                unembedded.append(lack)
        if any(unembedded):
            self._embed_missing([t for ts in unembedded for t in ts], emb, cancelled)
        out: list[_Best] = []
        for have, lack in zip(stored, unembedded):
            pairs = [(float(v @ qvec), text) for v, text in have]
            for t in lack:
                v = self.cache.get(VectorCache.key(t))
                if v is not None:
                    pairs.append((float(v @ qvec), t))
            if pairs:
                cos, text = max(pairs, key=lambda p: p[0])
                out.append(_Best(cos, text))
            else:
                out.append(_Best(0.0, ""))
        return out

    def _embed_missing(self, texts: Sequence[str], emb: Any, cancelled: Cancelled) -> None:
        todo: list[tuple[str, str]] = []
        seen: set[str] = set()
        for t in texts:
            k = VectorCache.key(t)
            if k not in seen and self.cache.get(k) is None:
                seen.add(k)
                todo.append((k, t))
        for i in range(0, len(todo), self.batch_size):
            if cancelled():
                raise RerankCancelled()
            chunk = todo[i : i + self.batch_size]
            t0 = time.perf_counter()
            vecs = emb.encode([t for _, t in chunk], batch_size=self.batch_size)
            self.cost.observe((time.perf_counter() - t0) * 1000, len(chunk))
            for (k, _), v in zip(chunk, vecs):
                self.cache.put(k, np.asarray(v, dtype=np.float32))


# -- cross-encoder backend ---------------------------------------------------------------------------------


class CrossEncoderBackend:
    """A sentence-transformers `CrossEncoder` from a local model folder.

    Each candidate is scored as the pair (query, title + its first context passages). Raw
    scores are the model's logits; `normalize` is the logistic function (the usual reading of a
    one-label relevance cross-encoder). `prepare` loads the model (importing torch takes
    seconds) on the first search, outside the pass budgets.
    """

    name = "cross-encoder"
    refines = False

    def __init__(self, model_path: str, batch_size: int = 8, max_length: int | None = 256) -> None:
        self.model_path = model_path
        self.batch_size = batch_size
        self.max_length = max_length
        self.cost = CostModel(initial_ms=15.0)
        """Milliseconds per scored pair, measured."""
        self._model: Any = None
        self._lock = threading.Lock()

    def affordable(
        self, query: str, candidates: Sequence[SearchResult], budget_ms: float, *, precise: bool
    ) -> int:
        """The number of pairs the measured time per pair lets through the budget."""
        return min(len(candidates), int(budget_ms * 0.6 / max(self.cost.ms, 1e-3)))

    def prepare(self) -> None:
        """Load the model once."""
        with self._lock:
            if self._model is not None:
                return
            folder = Path(self.model_path).expanduser() if self.model_path else None
            if folder is None or not folder.is_dir():
                raise RerankBackendError(f"cross-encoder model folder not found: {self.model_path!r}")
            from sentence_transformers import CrossEncoder

            self._model = CrossEncoder(
                str(folder), device="cpu", local_files_only=True, max_length=self.max_length
            )

    def normalize(self, scores: Sequence[float]) -> list[float]:
        """Logit -> probability."""
        return [1.0 / (1.0 + math.exp(-max(min(s, 50.0), -50.0))) for s in scores]

    def score(
        self,
        query: str,
        candidates: Sequence[SearchResult],
        *,
        precise: bool = True,
        cancelled: Cancelled | None = None,
    ) -> list[float]:
        """Logits of (query, passage) pairs, batch by batch with cancellation between batches."""
        cancelled = cancelled or _never
        self.prepare()
        import torch

        pairs = [(query, _passage(r, CROSS_ENCODER_CHARS)) for r in candidates]
        out: list[float] = []
        for i in range(0, len(pairs), self.batch_size):
            if cancelled():
                raise RerankCancelled()
            chunk = pairs[i : i + self.batch_size]
            t0 = time.perf_counter()
            logits = self._model.predict(
                chunk,
                batch_size=self.batch_size,
                show_progress_bar=False,
                activation_fn=torch.nn.Identity(),
                convert_to_numpy=True,
            )
            self.cost.observe((time.perf_counter() - t0) * 1000, len(chunk))
            arr = np.asarray(logits, dtype=np.float64)
            if arr.ndim > 1:  # a multi-label head: the last label reads as "relevant"
                arr = arr[:, -1]
            out.extend(float(x) for x in arr.reshape(-1))
        return out


def _passage(r: SearchResult, limit: int) -> str:
    text = " ".join(" ".join(c.text.split()) for c in r.context_shards[:2]) or r.snippet
    body = f"{r.title}. {text}" if r.title and not text.startswith(r.title) else text
    return body[:limit]


# -- LLM backend -------------------------------------------------------------------------------------------

LLM_SYSTEM = (
    "You rank search results from a personal Markdown notes vault by how well they answer a query. "
    "Answer with the result numbers only, most relevant first, separated by commas (for example: 3,1,0,2). "
    "No other text. " + DATA_RULE
)


def llm_prompt(query: str, candidates: Sequence[SearchResult], chars: int = LLM_SNIPPET_CHARS) -> str:
    """The user message of an LLM ranking: the query and the numbered candidates."""
    lines = [f'Query: "{query.strip()}"', "", "Results:"]
    for i, r in enumerate(candidates):
        text = " ".join((r.snippet or _passage(r, chars)).split())[:chars]
        lines.append(f"[{i}] " + quote_note(f"{r.title} ({r.document_path}): {text}"))
    lines += ["", 'Output (comma-separated result numbers, e.g. "3,1,0,2"):']
    return "\n".join(lines)


class LLMBackend:
    """Asks the configured LLM to order the candidates (one call per search).

    The reply is read as a list of indices; indices it leaves out follow in their incoming order.
    Position p of n scores `(n - p) / n`, already on the 0-1 scale. An LLM error or a reply
    without one usable index raises, so the reranker keeps the incoming order and says why.
    """

    name = "llm"
    refines = False

    def __init__(self, llm: Any, max_tokens: int = LLM_MAX_TOKENS) -> None:
        self.llm = llm
        self.max_tokens = max_tokens
        self.tokens_used = 0
        """Tokens spent over this backend's life (the metadata reports each search's share)."""

    def prepare(self) -> None:
        """Nothing to load."""

    def affordable(
        self, query: str, candidates: Sequence[SearchResult], budget_ms: float, *, precise: bool
    ) -> int:
        """All of them: one call, bounded by the LLM client's own timeout."""
        return len(candidates)

    def normalize(self, scores: Sequence[float]) -> list[float]:
        """Already 0-1."""
        return list(scores)

    def score(
        self,
        query: str,
        candidates: Sequence[SearchResult],
        *,
        precise: bool = True,
        cancelled: Cancelled | None = None,
    ) -> list[float]:
        """Rank-derived scores from the LLM's ordering."""
        n = len(candidates)
        if n == 0:
            return []
        messages = [
            {"role": "system", "content": LLM_SYSTEM},
            {"role": "user", "content": llm_prompt(query, candidates)},
        ]
        reply = self.llm.chat(messages, max_tokens=self.max_tokens, temperature=0.0)
        self.tokens_used += int(getattr(reply, "tokens_used", 0) or 0)
        text = getattr(reply, "text", "") or ""
        order = parse_index_list(text, n)
        if not order:
            raise RerankBackendError(f"unparsable ranking {_short(text)!r}")
        listed = set(order)
        full = order + [i for i in range(n) if i not in listed]
        scores = [0.0] * n
        for pos, i in enumerate(full):
            scores[i] = (n - pos) / n
        return scores


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- wiring --------------------------------------------------------------------------------------------------


def quality_gate(dense: Callable[[], bool]) -> Callable[[str, list[SearchResult]], str | None]:
    """A gate that skips reranking when the incoming results' quality is already high."""
    from explorer.search.quality import assess

    def gate(_query: str, results: list[SearchResult]) -> str | None:
        level = assess(results, dense()).level
        return "quality high: LLM rerank not needed" if level == "high" else None

    return gate


def build_reranker(index: IndexBackend, settings: Settings, llm: Any = None) -> MultiPassReranker | None:
    """The reranker `settings.rerank` asks for; None when the backend is `none`.

    It is built even when `rerank.enabled` is false, so a search can still ask for it
    (`--rerank`, the app's toggle); `enabled` only sets the default of each search.

    Backends: `local` (default), `cross-encoder` (needs `rerank.cross_encoder`, a local model
    folder), `llm` (needs a configured LLM; `llm.rerank = true` asks for it too; one pass of at
    most 20 candidates, only when the incoming quality is below high, budget = the LLM timeout).
    A backend that cannot be set up falls back to `local`, and the metadata's `notes` say so.
    """
    rs = settings.rerank
    if rs.backend == "none":
        return None
    config = _checked(rs)
    notes: list[str] = []
    wants_llm = rs.backend == "llm" or bool(getattr(settings.llm, "rerank", False))
    if wants_llm and llm is not None and getattr(llm, "configured", True):
        single = replace(
            config,
            pass1_candidates=min(config.pass1_candidates, LLM_CANDIDATES),
            pass1_timeout_ms=round(settings.llm.timeout_s * 1000) + 500,
            pass2_candidates=0,
        )
        return MultiPassReranker(
            LLMBackend(llm), single, gate=quality_gate(lambda: index.model_state is ModelState.READY)
        )
    if wants_llm:
        notes.append("LLM rerank asked for but no LLM is configured: local reranker used")
    elif rs.backend == "cross-encoder":
        if rs.cross_encoder and Path(rs.cross_encoder).expanduser().is_dir():
            return MultiPassReranker(CrossEncoderBackend(rs.cross_encoder), config)
        notes.append(f"cross-encoder model folder not found ({rs.cross_encoder!r}): local reranker used")
    elif rs.backend != "local":
        notes.append(f"unknown rerank backend {rs.backend!r}: local reranker used")
    return MultiPassReranker(LocalNeuralBackend(index), config, notes=notes)
