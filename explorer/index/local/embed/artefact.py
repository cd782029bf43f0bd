"""The ONNX artefact: the model's transformer exported once with torch, cached with a manifest.

The export is written under a unique temp name, fsynced and renamed into place, the manifest last;
a reader hashes the file against the manifest (or trusts a fresh check stamp) before using it.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import io
import json
import os
import sys
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from explorer.index.local.embed.base import EmbedderUnavailable, ProgressFn, _emit
from explorer.index.local.embed.models import _ModelConfig, _read_json, model_id_for_dir
from explorer.text.files import fsync_dir, write_atomic

ARTEFACT_FORMAT_VERSION = 1
"""Bumped whenever the exported graph or the manifest layout changes; part of the cache key."""

ONNX_OPSET = 17
ONNX_FILENAME = "model.onnx"
MANIFEST_FILENAME = "manifest.json"
LOCK_FILENAME = "build.lock"
STAMP_FILENAME = "checked.json"

_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
_TMP_MARKER = ".tmp-"


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


# --------------------------------------------------------------------------------------------
# Atomic files and the build lock
# --------------------------------------------------------------------------------------------


def _temp_name(target: Path) -> Path:
    """Returns a unique temporary path next to ``target``."""
    return target.with_name(f"{target.name}{_TMP_MARKER}{os.getpid()}-{uuid.uuid4().hex[:8]}")


@contextlib.contextmanager
def exclusive_lock(lock_path: Path, progress: ProgressFn | None) -> Iterator[None]:
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
class VerifiedArtefact:
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
STAMP_MARGIN_NS = 2_000_000_000


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
    return (
        isinstance(stamp, dict)
        and stamp.get("sha256") == sha
        and stamp.get("file") == _file_key(st)
        and isinstance(stamp.get("checked_ns"), int)
        and st.st_ctime_ns + STAMP_MARGIN_NS <= stamp["checked_ns"]
    )


def _write_stamp(artefact_dir: Path, st: os.stat_result, sha: str) -> None:
    """Record that the file with this key hashed to `sha` (best effort: a read-only cache skips it)."""
    stamp = {"sha256": sha, "file": _file_key(st), "checked_ns": time.time_ns()}
    try:
        write_atomic(artefact_dir / STAMP_FILENAME, json.dumps(stamp).encode("utf-8"))
    except OSError:
        pass


def read_verified(artefact_dir: Path) -> tuple[VerifiedArtefact | None, str]:
    """Reads ``model.onnx`` and checks it against the manifest.

    The file is hashed unless the check stamp of an earlier load vouches for it (same device,
    inode, size, mtime and ctime, changed at least `STAMP_MARGIN_NS` before that check); a full
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
                return VerifiedArtefact(data=None, sha256=str(manifest["sha256"]), path=onnx_path), ""
            data = fh.read()
    except OSError:
        return None, "is missing its model.onnx file"
    if isinstance(expected_size, int) and len(data) != expected_size:
        return None, f"is truncated or corrupted (size {len(data)}, expected {expected_size})"
    sha = hashlib.sha256(data).hexdigest()
    if sha != manifest.get("sha256"):
        return None, "is corrupted (sha256 mismatch)"
    _write_stamp(artefact_dir, st, sha)
    return VerifiedArtefact(data=data, sha256=sha), ""


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
        raise EmbedderUnavailable(f"building the ONNX model needs torch and transformers ({exc})") from exc

    previous_verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = AutoModel.from_pretrained(
                str(model_dir), local_files_only=True, attn_implementation="eager"
            )
            model.eval()
            wants_types = "token_type_ids" in inspect.signature(model.forward).parameters
            names = ["input_ids", "attention_mask"] + (["token_type_ids"] if wants_types else [])

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
    except Exception as exc:  # any export failure means "no ONNX model"
        raise EmbedderUnavailable(f"exporting the model to ONNX failed: {exc}") from exc
    finally:
        hf_logging.set_verbosity(previous_verbosity)


def _version_of(module_name: str) -> str:
    """Returns an imported module's ``__version__``, or ``"unknown"``."""
    module = sys.modules.get(module_name)
    return str(getattr(module, "__version__", "unknown"))


def build_artefact(
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
    for stale in [
        *artefact_dir.glob(f"*{_TMP_MARKER}*"),
        *artefact_dir.glob(".*.tmp"),
    ]:  # left by a builder that died
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
