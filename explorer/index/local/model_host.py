"""The embedding model of an index: loading it (in the background or on first use), its state, and the one loop that embeds.

`ModelHost` owns the model and nothing of the index: the index hands it texts by key and takes
the vectors back chunk by chunk (`embed`), so the app, `explorer watch`, `explorer mcp` and
`explorer index` all embed through the same loop. Texts are embedded shortest first (a model
batch then pads to similar lengths), so a count of texts done says little about the time left:
the loop's `EmbedProgress` measures text volume, and its `eta` is the time the remaining volume
takes at the volume rate seen so far.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from explorer.config import Settings
from explorer.index.backend import ModelState
from explorer.index.local.embed import DEFAULT_MODEL_ID, Embedder, EmbedderUnavailable, load_embedder

__all__ = ["EMBED_BATCH", "EmbedProgress", "ModelHost", "model_id_for", "text_volume"]

Deliver = Callable[[list[str], list[np.ndarray]], None]
"""Takes one chunk of finished vectors: their keys and vectors, in the same order."""

CHARS_PER_TOKEN = 4
"""Characters of text per model token, roughly (English prose under a WordPiece vocabulary)."""
TEXT_OVERHEAD = 8
"""A text's fixed cost in token-equivalents (special tokens, pooling, the per-row work of a batch)."""
DEFAULT_MAX_TOKENS = 256
"""The token limit assumed for a runtime that does not say its own (all-MiniLM-L6-v2's)."""
EMBED_BATCH = 32
"""Texts per model batch."""


def model_id_for(model: str) -> str:
    """The cache-key id of the configured model before it loads (the bundled model's own name, else a hash)."""
    if not model or model in (DEFAULT_MODEL_ID, f"sentence-transformers/{DEFAULT_MODEL_ID}"):
        return DEFAULT_MODEL_ID
    return "model-" + hashlib.blake2b(model.encode(), digest_size=6).hexdigest()


def text_volume(text: str, max_tokens: int = DEFAULT_MAX_TOKENS) -> int:
    """What embedding `text` costs, in token-equivalents: its tokens up to the model's limit, plus a fixed part."""
    return min(len(text) // CHARS_PER_TOKEN + 2, max_tokens) + TEXT_OVERHEAD


@dataclass(frozen=True, slots=True)
class EmbedProgress:
    """How far the embedding loop under way has come."""

    done: int
    """Texts embedded."""
    total: int
    """Texts this run embeds."""
    volume_done: int
    """Text volume embedded (see `text_volume`)."""
    volume_total: int
    """Text volume of the whole run."""
    seconds: float
    """Time since the run started."""

    @property
    def eta(self) -> float | None:
        """Seconds left at the volume rate so far (None before a first chunk is done)."""
        if self.volume_done <= 0 or self.seconds <= 0:
            return None
        return self.seconds * max(self.volume_total - self.volume_done, 0) / self.volume_done


class ModelHost:
    """The embedding model of one index: loaded once, its state a `ModelState`, its one embedding loop.

    The model loads on first use (`embedder()`), or in a background thread started early
    (`load_in_background`) so it loads while the index opens; either way only one load runs.
    When the loaded model's id differs from the configured one's, `on_model_change` is called
    with the new id (the index moves to that model's vectors) before the model is handed out.
    """

    def __init__(
        self,
        settings: Settings,
        embedder: Embedder | None = None,
        on_message: Callable[[str], None] | None = None,
        on_model_change: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.on_message = on_message or (lambda _msg: None)
        self.on_model_change = on_model_change or self._set_model_id
        ix = settings.index
        self._embedder: Embedder | None = embedder
        self._lock = threading.Lock()
        self._loader: threading.Thread | None = None
        self._loader_lock = threading.Lock()
        self._closed = False
        self.state = (
            ModelState.READY if embedder else (ModelState.OFF if not ix.embeddings else ModelState.NOT_LOADED)
        )
        self.reason = ""
        """Why the model is unavailable ('' otherwise)."""
        self.model_id = embedder.model_id if embedder else model_id_for(ix.model)
        """The id vectors are cached under: the configured model's until it loads, then the loaded one's."""
        self.runtime = embedder.runtime if embedder else ""
        self.progress: EmbedProgress | None = None
        """The embedding loop under way, or None."""

    def _set_model_id(self, model_id: str) -> None:
        self.model_id = model_id

    # -- loading ----------------------------------------------------------------------------
    def embedder(self, progress: Callable[[str], None] | None = None) -> Embedder | None:
        """The embedding model, loaded on first use; None when embeddings are off or unavailable."""
        if self._embedder is not None or not self.state.usable:
            return self._embedder
        with self._lock:
            if self._embedder is None and self.state.usable:
                self.state = ModelState.LOADING
                ix = self.settings.index
                try:
                    emb = load_embedder(ix.model, self.settings.experimental.runtime, progress=progress)
                except EmbedderUnavailable as exc:
                    self.state = ModelState.UNAVAILABLE
                    self.reason = str(exc)
                    self.on_message(f"embedding model unavailable, searching BM25 only: {exc}")
                    return None
                if emb.model_id != self.model_id:
                    self.on_model_change(emb.model_id)
                self._embedder = emb
                self.runtime = emb.runtime
                self.state = ModelState.READY
        return self._embedder

    def load_in_background(self) -> None:
        """Start loading the model in a thread, so that it loads while the index opens.

        The model is independent of the index, and most of its loading (reading and checking the
        model file, building the runtime session) runs outside the interpreter lock. `embedder()`
        waits for this load instead of starting another; `close()` waits for it to end.
        """
        with self._loader_lock:
            if (
                self._loader is not None
                or self._embedder is not None
                or self.state is ModelState.OFF
                or self._closed
            ):
                return
            self._loader = threading.Thread(target=self.embedder, name="explorer-model", daemon=True)
            self._loader.start()

    def close(self) -> None:
        """Let no load start after this, and wait for one under way (it would outlive the interpreter inside the runtime)."""
        with self._loader_lock:
            self._closed = True
        if self._loader is not None:
            self._loader.join()

    # -- embedding --------------------------------------------------------------------------
    def eta(self) -> float | None:
        """Seconds the embedding loop under way still needs, by text volume (None: none runs, or too early)."""
        running = self.progress
        return running.eta if running is not None else None

    def encode_query(self, text: str) -> np.ndarray | None:
        """The query vector, or None when no model is available."""
        emb = self.embedder()
        if emb is None:
            return None
        return emb.encode([text])[0]

    def embed(
        self,
        texts: Mapping[str, str],
        deliver: Deliver,
        progress: Callable[[str, int, int], object] | None = None,
        cancelled: Callable[[], bool] | None = None,
        batch: int | None = None,
    ) -> int:
        """Embed `texts` (key -> text), shortest first, handing each finished chunk to `deliver`; returns how many.

        One model batch at a time, cancellable between batches: quitting waits for the batch under
        way, not the whole chunk, and what was embedded is delivered. `progress` is called with
        ("embedding", texts done, texts in all) after each chunk; `self.progress` holds the volume
        and the time left meanwhile.
        """
        emb = self.embedder()
        if emb is None:
            return 0
        size = batch or EMBED_BATCH
        keys = sorted(texts, key=lambda k: len(texts[k]))
        limit = int(getattr(emb, "max_seq_length", 0) or DEFAULT_MAX_TOKENS)
        volumes = [text_volume(texts[k], limit) for k in keys]
        volume_total = sum(volumes)
        done = volume_done = 0
        total = len(keys)
        step = max(size * 4, 64)
        started = time.monotonic()
        self.progress = EmbedProgress(0, total, 0, volume_total, 0.0)
        try:
            for i in range(0, total, step):
                if cancelled and cancelled():
                    break
                chunk = keys[i : i + step]
                batch_texts = [texts[k] for k in chunk]
                vecs: list[np.ndarray] = []
                for j in range(0, len(batch_texts), size):
                    if j and cancelled and cancelled():
                        break
                    vecs.extend(emb.encode(batch_texts[j : j + size], batch_size=size))
                chunk = chunk[: len(vecs)]
                deliver(chunk, vecs)
                volume_done += sum(volumes[i : i + len(chunk)])
                done += len(chunk)
                self.progress = EmbedProgress(
                    done, total, volume_done, volume_total, time.monotonic() - started
                )
                if progress:
                    progress("embedding", done, total)
        finally:
            self.progress = None
        return done
