"""The embedding runtimes: ONNX Runtime (fast to import) and the sentence-transformers reference.

The ONNX path needs only ``onnxruntime`` and ``tokenizers`` at run time (about 0.4 s to import,
against ~8 s for torch) and applies the model's mean pooling and L2 normalisation in numpy; its
vectors match sentence-transformers' to ~1e-7, so both runtimes share the same ``model_id``.
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from explorer.index.local.embed.artefact import (
    LOCK_FILENAME,
    ONNX_FILENAME,
    VerifiedArtefact,
    artefact_dir_for,
    build_artefact,
    exclusive_lock,
    read_verified,
)
from explorer.index.local.embed.base import EmbedderUnavailable, _emit
from explorer.index.local.embed.models import _read_model_config, model_id_for_dir

_MAX_DEFAULT_THREADS = 4
#: A text joins the batch being filled only while it is at least this share of the batch's longest
#: text (in tokens); a shorter one starts a new batch, so a short sentence is never padded to a long
#: paragraph's length (BENCHMARKS.md#link-suggestions).
BATCH_LENGTH_SHARE = 0.5


def length_batches(lengths: Sequence[int], batch_size: int, share: float | None = None) -> list[list[int]]:
    """Positions of `lengths` grouped into batches, longest first, each of at most `batch_size`.

    A batch is padded to its longest text, so a text much shorter than that one would pay for the
    padding: it starts a batch of its own kind instead (at most `share` of the width apart;
    default `BATCH_LENGTH_SHARE`, 0 batches by count alone).
    """
    share = BATCH_LENGTH_SHARE if share is None else share
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    width = 0
    for i in order:
        if not batches or len(batches[-1]) >= batch_size or lengths[i] < width * share:
            batches.append([])
            width = lengths[i]
        batches[-1].append(i)
    return batches


def _default_threads(threads: int | None) -> int:
    """Returns the thread count to use: ``threads`` if given, else the usable cores capped at 4."""
    if threads is not None:
        return max(1, int(threads))
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, _MAX_DEFAULT_THREADS))


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
        except Exception as exc:  # the tokenizers error type is not public
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

    def _try_session(self, artefact: VerifiedArtefact) -> tuple[Any | None, str]:
        """Returns ``(session, "")``, or ``(None, reason)`` when onnxruntime rejects the file."""
        try:
            return self._new_session(artefact.source), ""
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises assorted types
            return None, f"cannot be loaded by onnxruntime ({exc})"

    def _load_session(self) -> Any:
        """Loads the verified artefact; builds it under the lock when missing or damaged."""
        artefact, reason = read_verified(self._artefact_dir)
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
            raise EmbedderUnavailable(f"cannot create the model cache {self._artefact_dir}: {exc}") from exc
        with exclusive_lock(self._artefact_dir / LOCK_FILENAME, self._progress):
            # Another process may have (re)built it while we waited for the lock.
            artefact, latest_reason = read_verified(self._artefact_dir)
            if artefact is not None and artefact.sha256 != rejected_sha:
                session, latest_reason = self._try_session(artefact)
                if session is not None:
                    return session
            if artefact is None or artefact.sha256 != rejected_sha:
                reason = latest_reason
            del artefact
            if reason != "missing":
                _emit(self._progress, f"ONNX model for {self.model_id} {reason}; rebuilding it.")
            build_artefact(self.model_dir, self.model_id, self._config, self._artefact_dir, self._progress)
            built, problem = read_verified(self._artefact_dir)
            if built is None:
                raise EmbedderUnavailable(f"the freshly built ONNX model {problem}")
            session, problem = self._try_session(built)
            if session is None:
                raise EmbedderUnavailable(f"the freshly built ONNX model {problem}")
            return session

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        """How many tokens each text is embedded as (special tokens included, after truncation)."""
        return [len(enc.ids) for enc in self._encodings(texts)]

    def _encodings(self, texts: Sequence[str]) -> list[Any]:
        items = [text.lower() for text in texts] if self._config.do_lower_case else list(texts)
        return self._tokenizer.encode_batch(items, add_special_tokens=True)

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Embeds texts (see :meth:`Embedder.encode`).

        Texts are sorted by token count and batched so each batch pads to similar lengths (a text
        under half a batch's longest starts a new batch, see :func:`length_batches`), then the
        original order is restored.

        Args:
            texts: The texts; empty strings are allowed.
            batch_size: Texts per ONNX Runtime call.

        Returns:
            float32 ``(len(texts), dim)``, rows L2-normalised.
        """
        _check_texts(texts, batch_size)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for rows, hidden, mask in self._hidden(texts, batch_size):
            weights = mask.astype(np.float32)[:, :, None]
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[rows] = pooled / np.maximum(norms, 1e-12)
        return out

    def encode_tokens(
        self, texts: Sequence[str], batch_size: int = 32
    ) -> list[tuple[tuple[str, ...], np.ndarray]]:
        """Each text's word pieces and their contextual vectors (the model's last layer, L2-normalised).

        The special tokens at both ends are left out; a text is cut at the model's length as in
        `encode`. Used to match a query word by word (explorer.search.memory.turn_vectors).
        """
        _check_texts(texts, batch_size)
        encodings = self._encodings(texts)
        out: list[tuple[tuple[str, ...], np.ndarray]] = [((), np.zeros((0, self.dim), np.float32))] * len(
            texts
        )
        for rows, hidden, mask in self._hidden(texts, batch_size, encodings):
            for slot, row in enumerate(rows):
                count = int(mask[slot].sum())
                vecs = hidden[slot, 1 : max(1, count - 1)]
                norms = np.linalg.norm(vecs, axis=1, keepdims=True)
                pieces = tuple(encodings[row].tokens[1 : max(1, count - 1)])
                out[row] = (pieces, (vecs / np.maximum(norms, 1e-12)).astype(np.float32))
        return out

    def _hidden(
        self, texts: Sequence[str], batch_size: int, encodings: list[Any] | None = None
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The model's last layer per batch of texts of similar length: (rows of `texts`, hidden states, mask).

        Texts are sorted by token count and batched so each batch pads to similar lengths (a text
        under half a batch's longest starts a new batch, see :func:`length_batches`).
        """
        if not len(texts):
            return
        encodings = encodings if encodings is not None else self._encodings(texts)
        lengths = np.fromiter((len(enc.ids) for enc in encodings), dtype=np.int64, count=len(encodings))
        wants_types = "token_type_ids" in self._input_names
        for batch in length_batches(lengths.tolist(), batch_size):
            rows = np.asarray(batch, dtype=np.int64)
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
            yield rows, hidden, mask


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
            with (
                contextlib.redirect_stdout(sink),
                contextlib.redirect_stderr(sink),
                warnings.catch_warnings(),
            ):
                warnings.simplefilter("ignore")
                self._model = SentenceTransformer(str(self.model_dir), device="cpu")
        except Exception as exc:  # loading can fail in many library-specific ways
            raise EmbedderUnavailable(f"sentence-transformers cannot load {self.model_dir}: {exc}") from exc
        getter = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
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

    def encode_tokens(
        self, texts: Sequence[str], batch_size: int = 32
    ) -> list[tuple[tuple[str, ...], np.ndarray]]:
        """Each text's word pieces and their contextual vectors (see :meth:`OnnxEmbedder.encode_tokens`)."""
        _check_texts(texts, batch_size)
        if not len(texts):
            return []
        tokenizer = self._model.tokenizer
        limit = int(getattr(self._model, "max_seq_length", 0) or 256)
        states = self._model.encode(
            list(texts), batch_size=batch_size, output_value="token_embeddings", show_progress_bar=False
        )
        out = []
        for text, state in zip(texts, states):
            ids = tokenizer(text, truncation=True, max_length=limit)["input_ids"]
            pieces = tuple(tokenizer.convert_ids_to_tokens(ids)[1:-1])
            vecs = np.asarray(
                state.detach().cpu().numpy() if hasattr(state, "detach") else state, dtype=np.float32
            )
            vecs = vecs[1 : 1 + len(pieces)]
            norms = np.linalg.norm(vecs, axis=1, keepdims=True)
            out.append((pieces, vecs / np.maximum(norms, 1e-12)))
        return out
