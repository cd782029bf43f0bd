"""One search of the app, run in the main screen's worker thread: a classic tool, or one pipeline run
in two stages, each stage posted to the screen as a message (`SearchFinished`, `SearchFailed`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from explorer.config import Settings
from explorer.search.core.query import parse_query
from explorer.search.schema import SearchResults
from explorer.tui.messages import ContextsPrepared, SearchFailed, SearchFinished
from explorer.tui.widgets.context_pane import prepare_context
from explorer.tui.widgets.results import RowLayout, prepare_rows
from explorer.vault.windows import query_words

if TYPE_CHECKING:
    from explorer.index.backend import IndexBackend
    from explorer.search.core.pipeline import SearchPipeline


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
    correct: bool = True
    """Search a word missing from the vault as its closest vault words (False: every word as typed)."""


Found = Callable[[SearchResults, str, bool], None]
"""Called with (results, stage, final) for each stage: `lexical` (not final), `full` or `classic`."""


def run_stages(
    job: SearchJob,
    pipeline: SearchPipeline,
    index: IndexBackend,
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
    from explorer.search.core.classic import ClassicUnavailable, allowed_shards, classic_results
    from explorer.search.core.pipeline import QueryError

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
            correct=job.correct,
        )
        if not cancelled():
            found(full, "full", True)
    except (QueryError, ClassicUnavailable) as exc:
        return str(exc)
    return None


def search_in_thread(
    job: SearchJob,
    seq: int,
    query: str,
    layout: tuple[RowLayout, int],
    system: tuple[Any, Any, Settings],
    post: Callable[[Any], Any],
    worker: Any,
) -> None:
    """Run `job` (search number `seq` of `query`) over `system` (pipeline, index, settings) in this
    worker thread, posting each stage's results, or why it failed. Stops early once `worker` is cancelled.

    What the screen draws from a stage is built here too, so the UI thread only draws it: the result
    rows (`prepare_rows`, for the list's row layout) and, for a final stage, the context pane's window
    of the first result (`prepare_context`, at the pane's window size; the other results' windows
    follow in a `ContextsPrepared`): `layout` is (row layout, window size)."""
    from explorer.search.core.pipeline import SearchCancelled

    def cancelled() -> bool:
        return bool(worker.is_cancelled)

    words, phrases = highlight_terms(job.mode, job.text)

    pipeline, index, settings = system
    rows_layout, chars = layout

    def found(results: SearchResults, stage: str, final: bool) -> None:
        rows = prepare_rows(results, words, phrases, rows_layout)
        first = results.results[0] if results.results else None
        # A lexical first stage is seldom drawn (the full one follows within the hold): no window for it.
        ready = final and not cancelled()
        context = prepare_context(index, first, words, phrases, chars) if ready else None
        if cancelled():
            return
        post(SearchFinished(seq, query, results, stage, final, rows, context))
        if not ready or len(results.results) < 2:
            return
        # Then every other result's window, so moving down the list draws what is computed here.
        others = []
        for result in results.results[1:]:
            if cancelled():
                return
            prepared = prepare_context(index, result, words, phrases, chars)
            if prepared is not None:
                others.append(prepared)
        if not cancelled():
            post(ContextsPrepared(seq, tuple(others)))

    try:
        error = run_stages(job, pipeline, index, settings, found, cancelled)
    except SearchCancelled:
        return
    except OSError as exc:  # the index could not serve (an engine backend unreachable): keep what is shown
        post(SearchFailed(seq, query, f"{exc}; the results shown are the last ones", keep=True))
        return
    except Exception as exc:  # noqa: BLE001 - a failing stage is reported, the app lives on
        error = f"search failed: {type(exc).__name__}: {exc}"
    if error is not None:
        post(SearchFailed(seq, query, error))
