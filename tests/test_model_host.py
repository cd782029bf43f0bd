"""The index's model host: its state as a ModelState, a loaded model of another id, and the embedding ETA by text volume."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import numpy as np
import pytest

from explorer.config import Settings
from explorer.index.backend import ModelState
from explorer.index.local import model_host
from explorer.index.local.vault_index import VaultIndex
from tests.conftest import write_notes

WORDS = (
    "hamster cage carrot seed wheel bedding water bottle window garden river mountain evening "
    "morning kitchen table letter friend travel station ticket summer winter"
).split()


def _prose(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    while sum(len(w) + 1 for w in out) < chars:
        out.append(rng.choice(WORDS))
    return " ".join(out)[:chars]


def test_the_state_is_an_enum_that_reads_as_before(
    tmp_path: Path, embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_notes(tmp_path / "v", {"a.md": "# A\n\nhamster wheel"})
    off = VaultIndex(root, Settings().with_overrides({"index.embeddings": False}))
    assert off.model_state is ModelState.OFF and off.embedder() is None
    off.close()
    monkeypatch.setattr(model_host, "load_embedder", lambda *_a, **_k: embedder)
    index = VaultIndex(root, Settings())
    index.open()
    assert index.stats().model_state is ModelState.NOT_LOADED
    assert index.embedder() is embedder
    st = index.stats()
    assert st.model_state is ModelState.READY
    # What stats, `--json` and the status bar print is the same word as before.
    assert json.dumps({"model_state": st.model_state}) == '{"model_state": "ready"}'
    assert f"{st.model_state}" == "ready" and st.model_state == "ready"
    index.close()


def test_a_missing_model_is_unavailable_with_its_reason(tmp_path: Path) -> None:
    root = write_notes(tmp_path / "v", {"a.md": "# A\n\nhamster wheel"})
    index = VaultIndex(root, Settings().with_overrides({"index.model": str(tmp_path / "no-such-model")}))
    index.open()
    assert index.embedder() is None and index.embed_pending() == 0
    assert index.model_state is ModelState.UNAVAILABLE and not index.model_state.usable
    assert "no-such-model" in index.model_error and index.pending()
    index.close()


class _Renamed:
    """The real model under another id (as a local model directory gets its own)."""

    def __init__(self, inner, model_id: str) -> None:
        self._inner = inner
        self.model_id = model_id
        self.dim = inner.dim
        self.runtime = inner.runtime

    def encode(self, texts, batch_size: int = 32) -> np.ndarray:
        return self._inner.encode(texts, batch_size=batch_size)


def test_a_model_of_another_id_gets_its_own_vectors(
    tmp_path: Path, embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Vectors of the configured model's id are not used for a model that loaded under another id."""
    root = write_notes(tmp_path / "v", {f"n{i}.md": f"# N{i}\n\nhamster number {i}" for i in range(4)})
    first = VaultIndex(root, Settings())
    first.open()
    monkeypatch.setattr(model_host, "load_embedder", lambda *_a, **_k: embedder)
    assert first.embed_pending() == 4 and not first.pending()
    first.close()

    monkeypatch.setattr(model_host, "load_embedder", lambda *_a, **_k: _Renamed(embedder, "other-model"))
    index = VaultIndex(root, Settings())
    index.open()
    assert len(index.dense) == 4  # the stored vectors of the configured id
    assert index.embedder() is not None
    assert index.model_id == "other-model" and index.stats().model_id == "other-model"
    assert len(index.dense) == 0 and len(index.pending()) == 4
    assert index.embed_pending() == 4 and not index.pending()
    assert index.store.vector_count("other-model") == 4
    index.close()


def test_the_embedding_eta_counts_text_volume_on_a_real_embed(tmp_path: Path, embedder, monkeypatch) -> None:
    """Shortest texts go first: an ETA by count says "almost done" while the long texts are still ahead.

    The ETA by volume is held against the time the rest of the run really took, beside the ETA by
    count (no band on the clock alone: a shared machine's speed varies; the recorded study
    measures how near it comes).
    """
    rng = random.Random(7)
    notes = {f"short/s{i:03}.md": f"{i:03} {_prose(rng, 16)}" for i in range(256)}
    notes |= {f"long/l{i:02}.md": _prose(rng, 750) for i in range(40)}
    root = write_notes(tmp_path / "v", notes)
    monkeypatch.setattr(model_host, "load_embedder", lambda *_a, **_k: embedder)
    index = VaultIndex(root, Settings())
    index.open()
    assert len(index.pending()) == 296
    embedder.encode(["warm up the runtime"] * 16, batch_size=16)
    seen: list[tuple[float, int, int, float | None]] = []
    t0 = time.monotonic()

    def progress(stage: str, done: int, total: int) -> None:
        seen.append((time.monotonic() - t0, done, total, index.model.eta()))

    assert index.embed_pending(progress=progress, batch=16) == 296
    end = time.monotonic() - t0
    assert index.model.progress is None and index.model.eta() is None
    # The last report before the long texts: every short text done, none of the long ones.
    at, done, total, eta = [s for s in seen if s[1] <= 256][-1]
    assert done == 256 and eta is not None
    actual = end - at
    by_count = at * (total - done) / done
    # The long texts ahead weigh in the ETA by volume (a property of the texts, not of the clock) ...
    assert eta > by_count * 3, (eta, by_count)
    # ... and the time they really took is nearer to it than to the count's, which misses it by far.
    assert abs(eta - actual) < abs(by_count - actual), (eta, by_count, actual)
    assert by_count < actual / 3, (by_count, actual)
    index.close()
