"""Relevance marks from the app (F8 / F9) and the notes marked relevant that a search left out."""

from __future__ import annotations

from typing import TYPE_CHECKING

from explorer.search.schema import SearchResult, SearchResults
from explorer.vault.judgments import append_judgment, make_judgment, marked_relevant

if TYPE_CHECKING:
    from explorer.index.backend import IndexBackend


def missing_marked(index: IndexBackend, query: str, results: SearchResults | None) -> list[str]:
    """Paths marked relevant for `query` that `results` do not show."""
    shown = {r.document_path for r in results.results} if results is not None else set()
    return [p for p in marked_relevant(index.cache_dir, query) if p not in shown]


def save_mark(index: IndexBackend, query: str, result: SearchResult, mark: str) -> tuple[str, str]:
    """Keep `mark` (`relevant` or another verdict) of `result` for `query`; (what to tell, its severity)."""
    try:
        append_judgment(
            index.cache_dir, make_judgment(query, result.node_id, result.document_path, mark, index.version)
        )
    except (OSError, ValueError) as exc:
        return f"Could not save the mark: {exc}", "error"
    word = "relevant" if mark == "relevant" else "not relevant"
    return f"Marked {word}: {result.document_path}", "information"
