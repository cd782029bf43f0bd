"""What every embedding module shares: the runtime protocol, its error and progress messages."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

ProgressFn = Callable[[str], None]


class EmbedderUnavailable(RuntimeError):
    """No embedding runtime could be loaded; the message says why."""


@runtime_checkable
class Embedder(Protocol):
    """What the indexer and the searcher need from an embedding runtime.

    Attributes:
        model_id: Cache-key part naming the model. ``"all-MiniLM-L6-v2"`` for the bundled model
            under either runtime (their vectors are interchangeable); for another local model a
            stable id derived from its directory name and path.
        dim: Vector dimension (384 for all-MiniLM-L6-v2).
        runtime: ``"onnx"`` or ``"sentence-transformers"``.
    """

    model_id: str
    dim: int
    runtime: str

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Embeds texts.

        Args:
            texts: The texts; empty strings are allowed.
            batch_size: How many texts go through the model at once.

        Returns:
            A float32 array of shape ``(len(texts), dim)`` with L2-normalised rows.
        """
        ...


def _emit(progress: ProgressFn | None, message: str) -> None:
    """Sends a message to the progress callback, if there is one."""
    if progress is not None:
        progress(message)
