"""Name resolution over one snapshot: what `transclusion.embeds_in` and `targets.resolve_target` read
of an index (notes, shards, the link graph), pinned at one version and read without the index lock.

Both resolve names in a `PinnedNames`: the index lock is taken only to pin the snapshot (as every
search does), never while names resolve or the link graph is built, so a writer's batch never holds
a viewer up and a batch that lands meanwhile does not change what one view resolves. A viewer that
expands a note's embeds part by part keeps one `PinnedNames` for all of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from explorer.index.backend import IndexBackend, Snapshot
from explorer.vault.links import LinkGraph, resolve_note_name
from explorer.vault.model import Note, Shard
from explorer.vault.shard import shard_at_cursor


class _Notes(Mapping[str, Note]):
    """A snapshot's notes, with the viewer's own copy of the note it shows in place of the snapshot's."""

    def __init__(self, notes: Mapping[str, Note], own: Note | None) -> None:
        self._notes = notes
        self._own = own

    def __getitem__(self, path: str) -> Note:
        if self._own is not None and path == self._own.path:
            return self._own
        return self._notes[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self._notes)

    def __len__(self) -> int:
        return len(self._notes)


class PinnedNames:
    """The reads of name resolution, from `snap` (taken of `index`); `own` is the note the viewer
    shows, used for its own path (its offsets are the ones the viewer has)."""

    def __init__(self, index: IndexBackend, snap: Snapshot, own: Note | None = None) -> None:
        self.root = index.root
        self._index = index
        self.snapshot = snap
        self.notes: Mapping[str, Note] = _Notes(snap.notes, own)
        self.shards: Mapping[str, Shard] = snap.shards
        self._links: LinkGraph | None = None

    def skipped_files(self) -> dict[str, str]:
        """{path: reason} of the files the index leaves out (read from the index: not versioned)."""
        return self._index.skipped_files()

    def note(self, path: str) -> Note | None:
        """The note at `path` in the snapshot, or None."""
        return self.notes.get(path)

    def shard_ids(self, path: str) -> Sequence[str]:
        """node_ids of the shards of `path` in the snapshot, in note order."""
        return self.snapshot.shard_ids(path)

    def shard_at(self, path: str, cursor: int) -> Shard | None:
        """The shard of `path` that contains `cursor` (the nearest one before it otherwise), in the snapshot."""
        return shard_at_cursor((self.shards.get(n) for n in self.snapshot.shard_ids(path)), cursor)

    def links(self) -> LinkGraph:
        """The snapshot's wikilink graph (built once per version, outside the index lock)."""
        if self._links is None:
            self._links = self.snapshot.links()
        return self._links

    def resolve_note(self, name: str) -> str | None:
        """The note `name` names, as `IndexBackend.resolve_note` resolves it, in the snapshot."""
        return resolve_note_name(name, self.notes, self.links)
