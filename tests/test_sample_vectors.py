"""The stored vectors the run's sample index is built from (tests/data/sample-vectors.npz) are the
model's: they cover every text the index of sample_vault embeds, and the model gives those vectors
today (at a tolerance: another CPU's kernels move the last digits)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from conftest import SAMPLE_VAULT, CountingEmbedder, RememberingEmbedder, copy_vault, sample_vectors, text_key
from explorer.index.local.vault_index import VaultIndex


def test_the_stored_vectors_cover_sample_vault_and_are_the_models(tmp_path: Path, embedder) -> None:
    known = sample_vectors(embedder.model_id)
    model = CountingEmbedder(embedder)
    outer = CountingEmbedder(RememberingEmbedder(model, known=known))
    index = VaultIndex(copy_vault(SAMPLE_VAULT, tmp_path / "vault"), embedder=outer)
    index.open()
    try:
        index.embed_pending()
        assert index.stats().pending == 0
    finally:
        index.close()
    asked = sorted({t for batch in outer.batches for t in batch})
    assert len(asked) > 400 and model.texts == 0, "rewrite the file: python tests/sample_vectors.py"
    some = asked[:: len(asked) // 8][:8]
    fresh = embedder.encode(some)
    stored = np.stack([known[text_key(t)] for t in some])
    assert np.allclose(fresh, stored, atol=1e-4)
