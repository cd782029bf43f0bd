"""Reranking fused results: the policy (explorer.search.rerank.policy) and one module per backend.

- `policy`: when and how deep to rerank: gate pass, early exit, precision pass, budgets, blended
  scores (`MultiPassReranker`, `RerankPolicy`);
- `base`: the `RerankBackend` protocol every backend implements, its errors, a cost estimate;
- `local`: the bundled MiniLM (best shard, then sentence windows), the default;
- `cross_encoder`: a local sentence-transformers CrossEncoder folder;
- `llm`: the configured LLM, one ordering call per search.

`build_reranker` assembles the one the settings ask for.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from explorer.index.backend import ModelState
from explorer.search.rerank.base import (
    Cancelled,
    CostModel,
    RerankBackend,
    RerankBackendError,
    RerankCancelled,
)
from explorer.search.rerank.cross_encoder import CROSS_ENCODER_CHARS, CrossEncoderBackend
from explorer.search.rerank.llm import (
    LLM_CANDIDATES,
    LLM_MAX_TOKENS,
    LLM_SNIPPET_CHARS,
    LLM_SYSTEM,
    LLMBackend,
    llm_prompt,
    parse_index_list,
)
from explorer.search.rerank.local import LocalNeuralBackend, VectorCache, sentence_windows
from explorer.search.rerank.policy import (
    HIGH_GAP,
    INSUFFICIENT,
    PEAKED,
    MultiPassReranker,
    PassOutcome,
    RerankPolicy,
    blend_score,
    early_exit_reason,
    fused_shares,
    quality_gate,
    run_timed,
    score_gap,
    score_ratio,
)

if TYPE_CHECKING:
    from explorer.config import Settings
    from explorer.index.backend import IndexBackend
    from explorer.search.core.llm import LLMClient

__all__ = [
    "CROSS_ENCODER_CHARS",
    "HIGH_GAP",
    "INSUFFICIENT",
    "LLM_CANDIDATES",
    "LLM_MAX_TOKENS",
    "LLM_SNIPPET_CHARS",
    "LLM_SYSTEM",
    "PEAKED",
    "Cancelled",
    "CostModel",
    "CrossEncoderBackend",
    "LLMBackend",
    "LocalNeuralBackend",
    "MultiPassReranker",
    "PassOutcome",
    "RerankBackend",
    "RerankBackendError",
    "RerankCancelled",
    "RerankPolicy",
    "VectorCache",
    "blend_score",
    "build_reranker",
    "early_exit_reason",
    "fused_shares",
    "llm_prompt",
    "parse_index_list",
    "quality_gate",
    "run_timed",
    "score_gap",
    "score_ratio",
    "sentence_windows",
]


def build_reranker(
    index: IndexBackend, settings: Settings, llm: LLMClient | None = None
) -> MultiPassReranker | None:
    """The reranker `settings.rerank` asks for; None when the backend is `none`.

    It is built even when `rerank.enabled` is false, so a search can still ask for it
    (`--rerank`, the app's toggle); `enabled` only sets the default of each search.

    Backends: `local` (default), `cross-encoder` (needs `rerank.cross_encoder`, a local model
    folder), `llm` (needs a configured LLM; one pass of at most 20 candidates, only when the incoming quality is below high, budget = the LLM timeout).
    A backend that cannot be set up falls back to `local`, and the metadata's `notes` say so.
    """
    rs = settings.rerank
    if rs.backend == "none":
        return None
    config = RerankPolicy.from_settings(settings)
    notes: list[str] = []
    wants_llm = rs.backend == "llm"
    if wants_llm and llm is not None and getattr(llm, "configured", True):
        single = replace(
            config,
            pass1_candidates=min(config.pass1_candidates, LLM_CANDIDATES),
            pass1_timeout_ms=float(settings.llm.timeout_s) * 1000.0 + 500.0,
            pass2_candidates=0,
        )
        return MultiPassReranker(
            LLMBackend(llm), single, gate=quality_gate(lambda: index.model_state is ModelState.READY)
        )
    if wants_llm:
        notes.append("LLM rerank asked for but no LLM is configured: local reranker used")
    elif rs.backend == "cross-encoder":
        if rs.cross_encoder and Path(rs.cross_encoder).expanduser().is_dir():
            return MultiPassReranker(CrossEncoderBackend(rs.cross_encoder), config)
        notes.append(f"cross-encoder model folder not found ({rs.cross_encoder!r}): local reranker used")
    elif rs.backend != "local":
        notes.append(f"unknown rerank backend {rs.backend!r}: local reranker used")
    return MultiPassReranker(LocalNeuralBackend(index), config, notes=notes)
