"""One search of the app, run in its worker thread: a classic tool, or one pipeline run in two stages.

No Textual here: the main screen's search worker calls `run_stages` and turns what it reports into
messages (`SearchFinished`, `SearchFailed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from explorer.config import Settings
from explorer.index.windows import query_words
from explorer.search.query import parse_query
from explorer.search.schema import SearchResults


def highlight_terms(mode: str, text: str) -> tuple[list[str], list[str]]:
    """The words and phrases to highlight for a query `text` searched in `mode` (a classic tool's
    name, or '' for the pipeline)."""
    parsed = parse_query(text)
    words = query_words(parsed.text) if parsed.text else []
    phrases = list(parsed.phrases) or ([text] if mode == "phrase" else [])
    return words, phrases


@dataclass(frozen=True, slots=True)
class SearchJob:
    """What one search of the app asks."""

    mode: str
    """A classic tool's name, or '' for the pipeline."""
    text: str
    """The query without its mode prefix."""
    hybrid: bool
    """Embeddings can be used (the model is ready or embedding)."""
    record: bool
    """Keep the search in the pipeline's history (a submitted query)."""


Found = Callable[[SearchResults, str, bool], None]
"""Called with (results, stage, final) for each stage: `lexical` (not final), `full` or `classic`."""


def run_stages(
    job: SearchJob,
    pipeline: Any,
    index: Any,
    settings: Settings,
    found: Found,
    cancelled: Callable[[], bool],
) -> str | None:
    """Run `job`, reporting each stage to `found`; returns what to tell the user when it cannot run.

    A pipeline search runs once: its lexical stage (BM25 alone, from the same search terms) is
    reported as the search goes on, then its hybrid result (BM25 only while the model is not
    ready). Raises SearchCancelled when `cancelled()` turns true, OSError when the index cannot
    serve (an engine backend unreachable).
    """
    from explorer.search.classic import ClassicUnavailable, allowed_shards, classic_results
    from explorer.search.pipeline import QueryError

    try:
        if job.mode:
            parsed = parse_query(job.text)
            if parsed.text or not parsed.has_filters:
                # Filters (path:, tag:, …) narrow the tool's hits instead of being searched as words.
                allowed = allowed_shards(index, settings, job.text) if parsed.has_filters else None
                words = parsed.text if parsed.has_filters else job.text
                results = classic_results(
                    index, job.mode, words, k=settings.search.top_k, cancelled=cancelled, allowed=allowed
                )
                if not cancelled():
                    found(results, "classic", True)
                return None
            # Only filters: list the notes they allow, as the pipeline does.

        def stage(name: str, results: SearchResults) -> None:
            if name == "lexical" and not cancelled():
                found(results, "lexical", False)

        full = pipeline.search(
            job.text,
            dense=job.hybrid,
            rerank=None if job.hybrid else False,
            cancelled=cancelled,
            record=job.record,
            on_stage=stage,
            lexical_stage=True,
        )
        if not cancelled():
            found(full, "full", True)
    except (QueryError, ClassicUnavailable) as exc:
        return str(exc)
    return None
