"""The index backend interface: everything a search reads from an index, through one `Snapshot` per search.

`explorer.search` imports this module and no other part of the index (an import-linter contract
says so), so a backend is anything that implements `IndexBackend` and `Snapshot`: the local one
(`explorer.index.local.vault_index.VaultIndex`, whose snapshots are `explorer.index.local.snapshot.LocalSnapshot`)
today, an engine such as Milvus next.

A `Snapshot` is a read view at one index version. A search takes one at its start and reads
nothing else until it ends (both passes, quality, always-include, the context windows of its
results), so a change batch applied meanwhile is invisible to it and visible to the next search.
Rankings come back as (node_id, raw score) pairs, best first, ties by node_id: fusion, the
explanations and the why-not view are computed above this interface from ranks and raw scores,
so "why ranked" means the same on every backend.

Filters reach a backend as a `Restriction`: the shards a query's filters allow. A backend keeps
what it prepares from one (a slot mask, an engine expression) in `Restriction.prepared`, so a
search that ranks several terms under the same filters prepares it once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

    from explorer.config import Settings
    from explorer.vault.links import LinkGraph
    from explorer.vault.model import Highlight, Note, Shard

__all__ = [
    "ALL_VAULTS",
    "DEFAULTS",
    "MAX_RESULTS",
    "MODES",
    "BatchReport",
    "ClassicHit",
    "ClassicQueryError",
    "ClassicResult",
    "EmbedRun",
    "Encoder",
    "FileState",
    "Hit",
    "IndexBackend",
    "IndexStats",
    "LexicalStats",
    "ModelState",
    "Progress",
    "Restriction",
    "Scope",
    "ScopeError",
    "Snapshot",
    "SnapshotCounts",
    "Spread",
]

Hit = tuple[str, float]
"""One ranked shard: (node_id, raw score) - a BM25 score, or a cosine for vector rankings."""


class ModelState(StrEnum):
    """Where an index's embedding model stands. Its value is the word `stats`, `--json` and the status bar show."""

    OFF = "off"
    """Embeddings are turned off (`index.embeddings = false`): searches are BM25-only by choice."""
    NOT_LOADED = "not loaded"
    """Not loaded yet: it loads on first use (a query vector, the embedding loop)."""
    LOADING = "loading"
    """Loading now (in the background while the index opens, or on first use)."""
    READY = "ready"
    """Loaded: queries and shards can be embedded."""
    UNAVAILABLE = "unavailable"
    """No model could be loaded; the index's `model_error` says why. Searches are BM25-only."""

    @property
    def usable(self) -> bool:
        """Whether vectors can be made now or later (not off, not unavailable)."""
        return self not in (ModelState.OFF, ModelState.UNAVAILABLE)


@dataclass(frozen=True, slots=True)
class Restriction:
    """The shards a query's filters allow (`tag:`, `path:`, `file:`, `section:`, `-word`)."""

    node_ids: AbstractSet[str]
    """node_ids of the allowed shards."""
    prepared: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    """What the backend derived from `node_ids` (masks, expressions), kept for the rest of the search."""


ALL_VAULTS = "*"
"""`vault:*`: every vault of a shared collection."""


class ScopeError(ValueError):
    """A `vault:` scope the backend cannot serve; the message says why."""


@dataclass(frozen=True, slots=True)
class Scope:
    """The vaults a search covers (`vault:name`, `vault:*`) and the shard filters to apply in the others.

    A backend holding one vault serves only its own name (or `*`); an engine holding several
    vaults' shards applies the filters to the other vaults' rows itself, since the search's own
    filter pass (`Restriction`) only sees this vault's shards.
    """

    vaults: tuple[str, ...]
    """Vault names, or ALL_VAULTS."""
    tags: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    sections: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()
    days: tuple[int, int] | None = None
    """[lo, hi): the day numbers (`date.toordinal`) a note's date must fall in (after:, before:, on:)."""
    note_passes: Callable[[Mapping[str, Any]], bool] | None = field(default=None, compare=False, hash=False)
    """The query's [property:value] filters, given a note's frontmatter (None: no such filter)."""

    @property
    def everything(self) -> bool:
        """True for `vault:*`."""
        return ALL_VAULTS in self.vaults


@dataclass(frozen=True, slots=True)
class Spread:
    """BM25 over documents expanded by others' words: `dst` also holds `src`'s words at `weight`.

    Made by `Snapshot.spread` from (dst, src, weight) node_id triples; `prepared` is the backend's form.
    """

    version: int
    """The snapshot version it was made for."""
    pairs: int
    """How many (dst, src) pairs it holds."""
    prepared: Any = field(default=None, compare=False, hash=False)
    """The backend's form of the pairs."""


@dataclass(frozen=True, slots=True)
class SnapshotCounts:
    """The sizes of one snapshot, for a search's `stats` block."""

    notes: int
    """Notes in the snapshot."""
    shards: int
    """Shards in the snapshot."""
    pending: int
    """Shards without a vector yet."""
    version: int
    """The index version it reads."""


@dataclass(frozen=True, slots=True)
class FileState:
    """What an index recorded of a file on disk when it last read it."""

    mtime_ns: int
    """Modification time when last read."""
    size: int
    """Size when last read."""
    hash: str
    """Content hash ('' for a skipped file)."""


Progress = Callable[[str, int, int], object]
"""A progress hook: (stage, done, total)."""


@dataclass
class BatchReport:
    """What one refresh or change batch did."""

    added: list[str] = field(default_factory=list)
    """Notes new to the index."""
    changed: list[str] = field(default_factory=list)
    """Notes re-parsed because their content changed."""
    removed: list[str] = field(default_factory=list)
    """Notes gone from the vault."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Files left out in this batch, with reasons."""
    shards_added: int = 0
    """Shards new to the index."""
    shards_removed: int = 0
    """Shards dropped."""
    unchanged: int = 0
    """Files whose state or content was unchanged."""
    ms: float = 0.0
    """Wall time of the batch."""

    @property
    def empty(self) -> bool:
        """True when nothing changed."""
        return not (self.added or self.changed or self.removed or self.skipped)


@dataclass(frozen=True, slots=True)
class IndexStats:
    """Counts for `explorer index`, `stats` and the status bar."""

    notes: int
    shards: int
    skipped: int
    embedded: int
    pending: int
    model_state: ModelState
    model_id: str
    runtime: str
    version: int

    def counts(self) -> dict[str, Any]:
        """The counts and model of `explorer stats --json` and MCP `stats`, in their order."""
        return {
            "notes": self.notes,
            "shards": self.shards,
            "embedded": self.embedded,
            "shards_without_vectors": self.pending,
            "model": self.model_id,
            "model_state": self.model_state,
        }


@dataclass(frozen=True, slots=True)
class EmbedRun:
    """What the last embedding run did."""

    embedded: int
    """Texts this process embedded."""
    borrowed: int
    """Shard vectors taken from the cache that another process wrote during the run (while this one waited)."""
    waited_for: str
    """The process this one waited for ('' when none held the embedding lock)."""


class LexicalStats(Protocol):
    """A snapshot's BM25 statistics, kept apart from its rankings (as Lucene keeps `CollectionStatistics`).

    What a search reads of the lexical side besides its rankings: document count, idf, document
    frequencies, a shard's tokens and the BM25 score of given shards, all at the snapshot's version.
    """

    def n_docs(self) -> int:
        """BM25 documents (shards)."""
        ...

    def idf(self) -> Mapping[str, float]:
        """Token -> BM25 idf (rank_bm25.BM25Okapi's, negative values floored)."""
        ...

    def doc_freq(self, token: str) -> int:
        """Shards that contain `token`."""
        ...

    def avgdl(self) -> float:
        """The mean document length in tokens (0.0 for none)."""
        ...

    def tokens(self, node_id: str) -> Collection[str]:
        """The distinct BM25 tokens of a shard (empty when absent)."""
        ...

    def term_counts(self, node_id: str) -> Mapping[str, int]:
        """A shard's BM25 tokens with how often each occurs (empty when absent)."""
        ...

    def scores(self, tokens: Sequence[str], node_ids: Sequence[str]) -> dict[str, float]:
        """The BM25 score of each of `node_ids` (0.0 where no token occurs)."""
        ...

    def spread(self, triples: Sequence[tuple[str, str, float]]) -> Spread:
        """Prepare (dst, src, weight) node_id triples for `Snapshot.bm25_top_spread` (pairs of absent shards dropped)."""
        ...


class Encoder(Protocol):
    """The embedding model a backend's vectors were made with (queries are embedded with it too)."""

    model_id: str
    """Cache-key part naming the model (vectors are kept by it and the text's content hash)."""
    dim: int
    """Vector dimension."""
    runtime: str
    """The runtime that runs it (onnx, sentence-transformers)."""

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """L2-normalised float32 rows, one per text."""
        ...


class Snapshot(Protocol):
    """A read view of an index at one version: shards and notes by id, BM25 and vector rankings.

    Nothing in it changes while it is held; `release()` (or leaving its `with` block) ends it.
    """

    @property
    def version(self) -> int:
        """The index version this view reads."""
        ...

    # -- notes and shards -------------------------------------------------------------------
    @property
    def notes(self) -> Mapping[str, Note]:
        """Notes by vault-relative path."""
        ...

    @property
    def shards(self) -> Mapping[str, Shard]:
        """Shards by node_id."""
        ...

    @property
    def neighbours(self) -> Mapping[str, tuple[str, ...]]:
        """Conversation turn path -> the paths of its adjacent turns (empty outside conversation vaults)."""
        ...

    def prefetch(self, paths: Iterable[str]) -> None:
        """Make the texts of these notes and their shards ready in one read, before a search reads
        them one note at a time (a backend that holds every text already does nothing)."""
        ...

    def shard_ids(self, path: str) -> Sequence[str]:
        """node_ids of the shards of the note at `path`, in note order (empty when absent)."""
        ...

    def modified(self, path: str) -> int | None:
        """The modification time (ns) the index recorded for the note's file at this version, None
        when it recorded none (a note of another vault): the date of a note that states no other."""
        ...

    def links(self) -> LinkGraph:
        """The wikilink graph of this view's notes."""
        ...

    def name_tokens(self, note: Note) -> tuple[frozenset[str], ...]:
        """The distinct token sets of a note's names (title, file name, aliases), for the name retriever."""
        ...

    def counts(self) -> SnapshotCounts:
        """Notes, shards, shards without vectors, version."""
        ...

    def note(self, path: str) -> Note | None:
        """The note at `path` (another vault's too, where the view reads several), or None."""
        ...

    def shard_at(self, path: str, cursor: int) -> Shard | None:
        """The shard of `path` that contains `cursor` (the nearest one before it otherwise), or None."""
        ...

    # -- lexical ----------------------------------------------------------------------------
    @property
    def lexical(self) -> LexicalStats:
        """The BM25 statistics of this view (idf, document frequencies, a shard's tokens, scores of given shards)."""
        ...

    def bm25_top(self, tokens: Sequence[str], k: int, allowed: Restriction | None = None) -> list[Hit]:
        """The `k` best shards for the tokens (BM25 raw scores), ties by node_id."""
        ...

    def bm25_top_many(
        self, queries: Sequence[Sequence[str]], k: int, allowed: Restriction | None = None
    ) -> list[list[Hit]]:
        """`bm25_top` of each token list, in order (an engine answers them in one call)."""
        ...

    def bm25_top_spread(
        self, tokens: Sequence[str], k: int, spread: Spread, allowed: Restriction | None = None
    ) -> list[Hit]:
        """`bm25_top` over documents expanded as `spread` says (see explorer.index.local.lexical.BM25Index.top_spread)."""
        ...

    # -- vectors ----------------------------------------------------------------------------
    def has_vectors(self, context: bool = False) -> bool:
        """Whether any shard has a vector (`context`: a dialog-context vector)."""
        ...

    def vector_top(
        self,
        queries: np.ndarray,
        k: int,
        floor: float,
        allowed: Restriction | None = None,
        context: bool = False,
    ) -> list[list[Hit]]:
        """Per query row, the `k` most similar shards with cosine >= `floor`, ties by node_id.

        `context`: search the conversation turns' dialog-context vectors instead of the shards' own.
        """
        ...

    def expect_vectors(
        self, queries: np.ndarray, k: int, floor: float, allowed: Restriction | None = None
    ) -> None:
        """A hint before a retrieval's rankings: its `vector_top(queries, k, floor, allowed)` follows the BM25
        rankings. A backend that asks an engine can ask for both in one request; one that ranks locally ignores it."""
        ...

    def vector(self, node_id: str) -> np.ndarray | None:
        """A shard's unit vector, or None."""
        ...

    def restrict(self, node_ids: AbstractSet[str]) -> Restriction:
        """A restriction to `node_ids`, to pass to the rankings."""
        ...

    def widen(self, scope: Scope) -> tuple[Snapshot, str, bool]:
        """This view over the vaults `scope` names: (the view, a note for the search's warnings or "",
        whether this vault is one of them - when not, the search leaves this vault's shards out).

        Raises ScopeError when the backend cannot serve them (the local backend holds one vault).
        """
        ...

    def freshness(self) -> tuple[Hashable, str]:
        """What a kept answer read from this view depends on besides its version, and a note for the
        search's warnings about how this view answers now ("" for none).

        A search's results are kept by query and version; a backend whose engine's answers change
        without a new version (another writer, the engine gone or back, a replay of kept changes)
        adds what moves them here (explorer.search.core.pipeline keys its cache with it). The local
        backend: (None, "").
        """
        ...

    def release(self) -> None:
        """End the view (idempotent)."""
        ...

    def __enter__(self) -> Snapshot: ...

    def __exit__(self, *exc: object) -> None: ...


class IndexBackend(Protocol):
    """An index of one vault, the whole face the rest of Explorer sees: its lifecycle and writes, the
    embedding model's state, snapshots to search, and the reads the front ends make between searches.

    Lifecycle: made unopened (`explorer.engine.build.new_index`), `open` loads what is stored and
    brings it up to date with the vault; `refresh` applies a change batch (a new version);
    `embed_pending` gives every shard without one a vector, by content hash (a text embedded once
    is never embedded again); `close` ends it. Every write raises `version`; a `snapshot` taken
    before it keeps reading the version it was taken at.
    """

    settings: Settings
    root: Path
    """The vault folder (why-not copies it to rehearse an edit)."""
    backend_name: str
    """The backend's name in `index.backend` (local, milvus)."""

    @property
    def backend_uri(self) -> str:
        """Where a backend engine is reached, for messages ("" for an embedded one)."""
        ...

    @property
    def vault_name(self) -> str:
        """This vault's name among others (`vault:` in a query)."""
        ...

    # -- lifecycle and writes -----------------------------------------------------------------
    def open(self, progress: Progress | None = None) -> BatchReport:
        """Load the stored index, then bring it up to date with the vault on disk."""
        ...

    def refresh(
        self,
        paths: Iterable[str] | None = None,
        progress: Progress | None = None,
        reread: bool = False,
        reparse: bool = False,
    ) -> BatchReport:
        """Apply a change batch: re-read what changed on disk, the whole vault or only `paths`
        (`reread`: read files whose size and time look unchanged too; `reparse`: parse them again)."""
        ...

    def embed_pending(
        self,
        progress: Progress | None = None,
        cancelled: Callable[[], bool] | None = None,
        batch: int | None = None,
        waiting: Callable[[str], object] | None = None,
    ) -> int:
        """Embed every shard that lacks a vector (vectors are kept by content hash); returns how many
        texts were embedded. `waiting` hears whom it waits for while another process embeds."""
        ...

    @property
    def embed_run(self) -> EmbedRun | None:
        """What the last `embed_pending` did (None before the first)."""
        ...

    def pending(self) -> list[Shard]:
        """Shards that have no vector yet."""
        ...

    def load_model_in_background(self) -> None:
        """Start loading the embedding model in a thread, so that it loads while the index opens."""
        ...

    def prune_vectors(self) -> int:
        """Drop cached vectors no current shard uses; returns how many."""
        ...

    def close(self, exiting: bool = False) -> None:
        """Close the index (`exiting`: the process ends right after; skip what the exit frees anyway)."""
        ...

    # -- model and store state ----------------------------------------------------------------

    @property
    def cache_dir(self) -> Path:
        """The folder the index is saved in."""
        ...

    @property
    def model_state(self) -> ModelState:
        """Where the embedding model stands (`ModelState.READY` once queries can be embedded)."""
        ...

    @property
    def model_error(self) -> str:
        """Why the embedding model is unavailable ('' otherwise)."""
        ...

    @property
    def model_id(self) -> str:
        """The id this index's vectors are cached under."""
        ...

    @property
    def not_saved(self) -> str:
        """Why the index on disk is not this index ('' when every change is saved)."""
        ...

    @property
    def runtime(self) -> str:
        """The embedding runtime (empty before the model loads)."""
        ...

    @property
    def version(self) -> int:
        """The current version (each applied change batch or vector insert raises it)."""
        ...

    def snapshot(self) -> Snapshot:
        """A read view at the current version."""
        ...

    def embedder(self) -> Encoder | None:
        """The embedding model (loaded on first use), or None when embeddings are off or unavailable."""
        ...

    @property
    def many_vaults(self) -> bool:
        """Whether this backend holds other vaults' notes beside this vault's (a shared collection):
        `vault:NAME/PATH` names one of them (`foreign_note`)."""
        ...

    def backend_info(self) -> dict[str, str]:
        """What `explorer stats` says of where the backend keeps the index besides `cache_dir` (an
        engine's URI without credentials, its collection, this vault's name in it; {} for none)."""
        ...

    def embed_eta(self) -> float | None:
        """Seconds the embedding run under way still needs (the model's estimate by text volume), None while unknown."""
        ...

    def store_lost(self) -> bool:
        """Whether the store's file is gone (deleted with the vault folder): `reopen_store` writes it anew."""
        ...

    def reopen_store(self) -> None:
        """Start a fresh store and write the current index into it."""
        ...

    def encode_query(self, text: str) -> np.ndarray | None:
        """The query vector, or None when no model is available."""
        ...

    # -- reads between searches (the front ends') -----------------------------------------------
    def stats(self) -> IndexStats:
        """Counts for status displays."""
        ...

    def note(self, path: str) -> Note | None:
        """The note at `path` (another vault's, `vault:NAME/PATH`, where the backend holds several), or None."""
        ...

    def note_titles(self) -> dict[str, str]:
        """{path: title} of every note, a copy."""
        ...

    def note_count(self) -> int:
        """How many notes are indexed."""
        ...

    def shard(self, node_id: str) -> Shard | None:
        """The shard `node_id` names, or None (lock-free: the app's event loop asks)."""
        ...

    def shard_at(self, path: str, cursor: int) -> Shard | None:
        """The shard of `path` that contains `cursor` (the nearest one before it otherwise)."""
        ...

    def links(self) -> LinkGraph:
        """The wikilink graph of the current notes."""
        ...

    def warnings(self) -> dict[str, tuple[str, ...]]:
        """Notes indexed with a problem (truncated, frontmatter ignored), path -> what happened."""
        ...

    def paths_under(self, folder: str) -> list[str]:
        """Known files (notes and skipped files) at or below a vault-relative folder; '' is the root."""
        ...

    def skipped_files(self) -> dict[str, str]:
        """{path: reason} of the vault's files that are not indexed (a copy)."""
        ...

    def ignored_files(self) -> dict[str, str]:
        """{path: rule} of what the ignore rules left out at the last full scan (folders end in `/`), a copy."""
        ...

    def file_state(self, path: str) -> FileState | None:
        """What the index last recorded of a vault-relative file (size, mtime, hash), or None."""
        ...

    def foreign_note(self, target: str) -> tuple[Note, list[Shard]] | None:
        """Another vault's note (and its shards) named by `vault:NAME/PATH[#...]`, or None (always
        None for a backend holding one vault)."""
        ...

    def resolve_note(self, name: str) -> str | None:
        """The indexed note `name` names: a vault path (with or without `.md`), else a link target
        (path suffix, file stem or alias, case-insensitively); None when it names none."""
        ...

    def local_copy(self, root: Path, settings: Settings) -> IndexBackend:
        """A new, unopened local index over `root` (a copy of this vault) with this index's model
        when it is loaded: why-not rehearses an edit of a note in it, never in this index."""
        ...

    def classic_search(
        self,
        mode: str,
        keywords: Sequence[str] | str,
        max_results: int | None = None,
        context_chars: int | None = None,
        window: int | None = None,
    ) -> ClassicResult:
        """One classic cursor tool (`MODES`) over the current notes; None for a parameter means its default.

        Raises:
            ClassicQueryError: an unknown mode, no usable keyword, or a parameter out of range.
        """
        ...


# -- the classic cursor tools: what they return ------------------------------------------------
#: The four tools, by the names the CLI and the TUI use.
MODES: tuple[str, ...] = ("tfidf", "phrase", "and", "fuzzy")
#: Default (max_results, context_chars) of each tool.
DEFAULTS: dict[str, tuple[int, int]] = {
    "tfidf": (15, 300),
    "phrase": (10, 4000),
    "and": (15, 3000),
    "fuzzy": (15, 300),
}
#: The most hits one call returns.
MAX_RESULTS = 500


class ClassicQueryError(ValueError):
    """A classic search request that cannot run (no keywords, only punctuation, bad parameters)."""


@dataclass(frozen=True, slots=True)
class ClassicHit:
    """One match location found by a classic tool."""

    score: float
    """Relevance under the stage that found it (higher is better; scales differ between stages)."""
    path: str
    """Vault-relative path of the note."""
    node_id: str
    """node_id of the shard that contains the cursor ('' when the index has no shards to ask)."""
    cursor: int
    """Offset of the match in the note's raw text: `note.text[cursor:cursor + len(match)]` is `match`."""
    match: str
    """The matched text as it stands in the note."""
    keywords: tuple[str, ...]
    """The keywords (as given) that matched at this location."""
    terms: tuple[str, ...]
    """The folded index terms that matched (for fuzzy: the vocabulary words the keywords expanded to)."""
    title: str
    """The note's title."""
    snippet: str
    """The raw text around the cursor: `note.text[snippet_start:snippet_end]`."""
    snippet_start: int
    """Offset of the snippet's first character in the note."""
    snippet_end: int
    """Offset past the snippet."""
    highlights: tuple[Highlight, ...]
    """Matched spans inside the snippet, as note offsets."""

    def to_dict(self) -> dict[str, Any]:
        """The hit as JSON-ready data."""
        return {
            "score": round(self.score, 6),
            "path": self.path,
            "node_id": self.node_id,
            "cursor": self.cursor,
            "match": self.match,
            "keywords": list(self.keywords),
            "terms": list(self.terms),
            "title": self.title,
            "snippet": self.snippet,
            "snippet_start": self.snippet_start,
            "snippet_end": self.snippet_end,
            "highlights": [{"start": h.start, "end": h.end, "term": h.term} for h in self.highlights],
        }


@dataclass(frozen=True, slots=True)
class ClassicResult:
    """What one classic tool call returned."""

    mode: str
    """The tool asked for: tfidf, phrase, and or fuzzy."""
    stage: str
    """The stage that answered: tfidf, and, fuzzy, phrase or proximity; 'none' when nothing matched."""
    keywords: tuple[str, ...]
    """The keywords used (blank and punctuation-only ones dropped)."""
    hits: tuple[ClassicHit, ...]
    """Best first, at most `max_results`."""
    total: int
    """Match locations the answering stage found before truncation to `max_results`."""
    stages_tried: tuple[str, ...]
    """Every stage run, in order."""
    warnings: tuple[str, ...] = ()
    """Adjustments and fallbacks worth telling the user about."""
    expansions: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Fuzzy stage only: each keyword word with the vocabulary words it matched."""
    index_version: int = 0
    """Version of the index the search ran against."""

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data."""
        return {
            "mode": self.mode,
            "stage": self.stage,
            "keywords": list(self.keywords),
            "total": self.total,
            "stages_tried": list(self.stages_tried),
            "warnings": list(self.warnings),
            "expansions": {word: list(terms) for word, terms in self.expansions},
            "index_version": self.index_version,
            "hits": [h.to_dict() for h in self.hits],
        }
