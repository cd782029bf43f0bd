"""App-wide messages: what workers and widgets tell the app and its screens (all safe to post from a thread)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual.message import Message

from explorer.search.schema import SearchResults
from explorer.search.writing.suggest import Suggestions

if TYPE_CHECKING:
    from explorer.index.backend import IndexBackend, IndexStats
    from explorer.search.core.pipeline import SearchPipeline


@dataclass
class IndexProgress(Message):
    """Progress of opening the index or embedding shards; a newer one replaces a queued older one."""

    stage: str
    """`reading` or `embedding`."""
    done: int
    """Items finished."""
    total: int
    """Items in all."""
    eta: float | None = None
    """Seconds the stage still needs (embedding: the embedding loop's own estimate, by text
    volume, the one `explorer index` prints), None while unknown."""

    def can_replace(self, message: Message) -> bool:
        """Collapse queued progress of the same stage."""
        return isinstance(message, IndexProgress) and message.stage == self.stage


@dataclass
class IndexReady(Message):
    """The index is open and searchable (lexically at least)."""

    index: IndexBackend
    """The index."""
    pipeline: SearchPipeline
    """The SearchPipeline built over it."""
    summary: str
    """What opening did, in a line."""
    stats: IndexStats | None = None
    """The index's counts (IndexStats), taken in the worker so the UI never waits on the index lock."""
    titles: dict[str, str] | None = None
    """Every note's title by path, for the vault tree (taken in the worker too)."""


@dataclass
class IndexFailed(Message):
    """The index could not be opened."""

    error: str
    """Why."""


@dataclass
class IndexUpdated(Message):
    """A batch of file changes was applied (after a save or a watcher event)."""

    paths: tuple[str, ...]
    """Vault-relative paths added, changed or removed."""
    summary: str
    """What the batch did, in a line."""
    stats: IndexStats | None = None
    """The index's counts after the batch (IndexStats), taken off the UI thread."""
    titles: dict[str, str] | None = None
    """Every note's title by path after the batch."""


@dataclass
class ModelState(Message):
    """The embedding model's state changed."""

    state: str
    """`loading`, `embedding`, `ready`, `off` or `unavailable`."""
    detail: str = ""
    """Runtime, error or counts."""


@dataclass
class WatcherState(Message):
    """The file watcher started, stopped or failed."""

    state: str
    """`watching`, `off`, `unavailable` or `error`."""
    detail: str = ""
    """Why, when not watching."""


@dataclass
class SearchFinished(Message, bubble=False):
    """A search (or one stage of a progressive search) produced results."""

    seq: int
    """Sequence number of the search; older ones are ignored."""
    query: str
    """The query as typed."""
    results: SearchResults
    """What the pipeline returned."""
    stage: str
    """`lexical` (first, fast display), `full` or `classic`."""
    final: bool = True
    """False when a later stage of the same search is still coming."""
    rows: Any = None
    """The results list's rows built in the search worker (`PreparedRows`), or None."""
    context: Any = None
    """The context pane's window of the first result, built in the worker for a final stage (`PreparedContext`), or None."""


@dataclass
class ContextsPrepared(Message, bubble=False):
    """The context pane's first windows of a final stage's other results, built in the search worker
    after that stage was posted (its first result's came with it)."""

    seq: int
    """Sequence number of the search."""
    contexts: tuple[Any, ...]
    """A `PreparedContext` per result after the first (those whose note is indexed), in result order."""


@dataclass
class SearchFailed(Message, bubble=False):
    """A search could not run (bad query, or an error in a stage)."""

    seq: int
    """Sequence number of the search."""
    query: str
    """The query as typed."""
    error: str
    """What to tell the user."""
    keep: bool = False
    """Keep the results shown (the index could not serve, e.g. its engine is unreachable; the query was fine)."""


@dataclass
class OpenNote(Message):
    """Ask the app to show a note in the note view."""

    path: str
    """Vault-relative path."""
    cursor: int | None = None
    """Character offset to scroll to, if any."""


@dataclass
class EditNote(Message):
    """Ask the app to open a note in writing mode."""

    path: str
    """Vault-relative path."""
    cursor: int | None = None
    """Character offset to put the editor cursor at, if any."""


@dataclass
class RelatedFound(Message, bubble=False):
    """Writing mode: link suggestions for the paragraph around the cursor."""

    seq: int
    """Sequence number of the request."""
    paragraph: str
    """The text that was searched."""
    suggestions: Suggestions
    """Mentions, related and linked notes (explorer.search.writing.suggest)."""


# -- what the app tells its screens (posted to a screen; they do not bubble back) -------------------
@dataclass
class IndexOpened(Message, bubble=False):
    """The index is open and searchable: fill the tree, run a query typed meanwhile."""

    titles: dict[str, str] | None = None
    """Every note's title by path (None: read them from the index)."""


@dataclass
class IndexUnavailable(Message, bubble=False):
    """The index could not be opened: searching is not possible."""

    error: str
    """Why."""


@dataclass
class ModelReady(Message, bubble=False):
    """Embeddings became available, or every vector is in: results computed before can upgrade."""

    state: str
    """The model state now (`ready` or `embedding`)."""


@dataclass
class VaultChanged(Message, bubble=False):
    """A batch of file changes was applied to the index: views of those notes and the results follow."""

    paths: tuple[str, ...]
    """Vault-relative paths added, changed or removed."""
    titles: dict[str, str] | None = None
    """Every note's title by path after the batch."""


# -- what screens tell the app -------------------------------------------------------------------
@dataclass
class QuerySubmitted(Message):
    """A query was submitted (Enter): the app keeps it in the history file."""

    query: str
    """The query as typed."""


@dataclass
class ResultsShown(Message):
    """The main screen drew a search's results (any stage); a final one sets the status bar's timings."""

    results: SearchResults
    """What is shown."""
    stage: str
    """`lexical`, `full` or `classic`."""
    final: bool
    """No later stage of this search is coming."""


@dataclass
class BackToSearch(Message):
    """Close the views stacked over the search screen and focus the search box."""

    typed: str = ""
    """Text typed in a view that starts the query ('' selects the query)."""
    more: bool = False
    """`typed` follows text already sent this way (typed on, not a new query)."""
