"""The one place the system is assembled: settings + index + pipeline (+ its optional LLM and reranker parts)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

from explorer.config import Settings
from explorer.index.vault_index import BatchReport, VaultIndex
from explorer.search.pipeline import SearchPipeline

Progress = Callable[[str, int, int], None]
"""A progress hook: (stage, done, total)."""


def _to_stderr(message: str) -> None:
    print(f"explorer: {message}", file=sys.stderr)


def open_index(vault: Path, settings: Settings, progress: Progress | None = None,
               on_message: Callable[[str], None] | None = None) -> tuple[VaultIndex, BatchReport]:
    """Open (load + refresh) the index of `vault`; store messages go to `on_message` (default: stderr)."""
    index = VaultIndex(vault, settings, on_message=on_message or _to_stderr)
    report = index.open(progress=progress)
    return index, report


def build_components(index: Any, settings: Settings) -> tuple[Any, Any, Any]:
    """(term_writer, analyser, reranker) for SearchPipeline; None where the offline default applies."""
    term_writer = analyser = reranker = None
    llm = None
    if settings.llm.configured:
        from explorer.search.llm import LLMClient, llm_analyser, llm_term_writer

        llm = LLMClient(settings.llm)
        term_writer = llm_term_writer(llm, index, settings)
        if settings.search.analyser in ("auto", "llm"):
            analyser = llm_analyser(llm, index, settings)
    elif settings.search.analyser == "llm":
        # Asked for but not configured: the analyser falls back and names the reason.
        from explorer.search.llm import LLMClient, llm_analyser

        analyser = llm_analyser(LLMClient(settings.llm), index, settings)
    if settings.rerank.backend != "none":
        try:
            from explorer.search.rerank import build_reranker
        except ImportError:
            return term_writer, analyser, None
        reranker = build_reranker(index, settings, llm)
    return term_writer, analyser, reranker


def make_pipeline(index: VaultIndex, settings: Settings) -> SearchPipeline:
    """The SearchPipeline with the configured term writer, analyser and reranker."""
    term_writer = analyser = reranker = None
    try:
        term_writer, analyser, reranker = build_components(index, settings)
    except ImportError:
        pass
    return SearchPipeline(index, settings, term_writer=term_writer, analyser=analyser, reranker=reranker)
