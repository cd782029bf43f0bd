"""Wire the optional parts of the pipeline from settings: LLM term writer and analyser, reranker."""

from __future__ import annotations

from typing import Any


def build_components(index: Any, settings: Any) -> tuple[Any, Any, Any]:
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
