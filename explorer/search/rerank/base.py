"""What every rerank backend is: the scoring protocol, its errors, a cost estimate, and a candidate's passage."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from explorer.search.schema import SearchResult

Cancelled = Callable[[], bool]


class RerankCancelled(Exception):
    """The pass that asked for these scores has stopped waiting (its budget ran out)."""


class RerankBackendError(RuntimeError):
    """A backend cannot score; the message says why (it becomes the metadata's `error`)."""


def never() -> bool:
    """A `cancelled` that never cancels."""
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


def passage(r: SearchResult, limit: int) -> str:
    """A candidate's title and first two context shards (else its snippet), cut to `limit` characters."""
    text = " ".join(" ".join(c.text.split()) for c in r.context_shards[:2]) or r.snippet
    body = f"{r.title}. {text}" if r.title and not text.startswith(r.title) else text
    return body[:limit]


def short(text: str, limit: int = 80) -> str:
    """`text` on one line, cut to `limit` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
