"""The cross-encoder rerank backend: a local sentence-transformers CrossEncoder folder scoring (query, passage) pairs."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from explorer.search.rerank.base import (
    Cancelled,
    CostModel,
    RerankBackendError,
    RerankCancelled,
    never,
    passage,
)
from explorer.search.schema import SearchResult

#: Characters of a candidate's passage given to a cross-encoder.
CROSS_ENCODER_CHARS = 1200


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
        cancelled = cancelled or never
        self.prepare()
        import torch

        pairs = [(query, passage(r, CROSS_ENCODER_CHARS)) for r in candidates]
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
