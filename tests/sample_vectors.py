"""Writes tests/data/sample-vectors.npz: the model's vector of every text the index of sample_vault
embeds, by the sha256 of the text (see conftest.SAMPLE_VECTORS). Run it after sample_vault changes:

    python tests/sample_vectors.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import SAMPLE_VAULT, SAMPLE_VECTORS, copy_vault, text_key
from golden_update import set_test_environment


class Recording:
    """The model, keeping every text it embeds with its vector."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_id, self.dim, self.runtime = inner.model_id, inner.dim, inner.runtime
        self.vectors: dict[str, np.ndarray] = {}

    def encode(self, texts: Any, batch_size: int = 32) -> Any:
        texts = list(texts)
        vectors = self.inner.encode(texts, batch_size)
        self.vectors.update((text_key(t), v) for t, v in zip(texts, vectors))
        return vectors


def main() -> int:
    set_test_environment()
    from explorer.index.local.embed import load_embedder
    from explorer.index.local.vault_index import VaultIndex

    model = Recording(load_embedder(None, "onnx"))
    with tempfile.TemporaryDirectory() as tmp:
        vault = copy_vault(SAMPLE_VAULT, Path(tmp) / "vault")
        shutil.rmtree(vault / ".explorer", ignore_errors=True)
        index = VaultIndex(vault, embedder=model)
        index.open()
        index.embed_pending()
        index.close()
    keys = sorted(model.vectors)
    SAMPLE_VECTORS.parent.mkdir(exist_ok=True)
    with open(SAMPLE_VECTORS, "wb") as fh:
        np.savez_compressed(
            fh,
            model_id=np.array(model.model_id),
            keys=np.array(keys),
            vectors=np.stack([model.vectors[k] for k in keys]).astype(np.float32),
        )
    print(f"{SAMPLE_VECTORS}: {len(keys)} vectors of {model.model_id}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
