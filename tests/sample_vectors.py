"""Writes tests/data/sample-vectors.npz: the model's vector of every text the index of sample_vault
embeds, by the sha256 of the text (see conftest.SAMPLE_VECTORS), and tests/data/writer-vectors.npz:
those of the texts the writer's link scorer embeds when it fits on sample_vault's links (see
conftest.WRITER_VECTORS). Run it after sample_vault (or what the scorer asks) changes:

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

from conftest import SAMPLE_VAULT, SAMPLE_VECTORS, WRITER_VECTORS, copy_vault, quiet_settings, text_key
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


def _write(path: Path, model_id: str, vectors: dict[str, np.ndarray]) -> None:
    keys = sorted(vectors)
    path.parent.mkdir(exist_ok=True)
    with open(path, "wb") as fh:
        np.savez_compressed(
            fh,
            model_id=np.array(model_id),
            keys=np.array(keys),
            vectors=np.stack([vectors[k] for k in keys]).astype(np.float32),
        )
    print(f"{path}: {len(keys)} vectors of {model_id}")


def main() -> int:
    set_test_environment()
    from explorer.engine import make_pipeline
    from explorer.index.local.embed import load_embedder
    from explorer.index.local.vault_index import VaultIndex
    from explorer.search.writing.suggest import LinkSuggester

    model = Recording(load_embedder(None, "onnx"))
    with tempfile.TemporaryDirectory() as tmp:
        vault = copy_vault(SAMPLE_VAULT, Path(tmp) / "vault")
        shutil.rmtree(vault / ".explorer", ignore_errors=True)
        index = VaultIndex(vault, embedder=model)
        index.open()
        try:
            index.embed_pending()
            shards = dict(model.vectors)
            # The writer's first suggestions fit the link scorer (as the app tests' apps do it).
            LinkSuggester(make_pipeline(index, quiet_settings())).fit_scorer()
        finally:
            index.close()
    _write(SAMPLE_VECTORS, model.model_id, shards)
    _write(WRITER_VECTORS, model.model_id, {k: v for k, v in model.vectors.items() if k not in shards})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
