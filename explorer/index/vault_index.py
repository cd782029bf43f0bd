"""The live index of one vault: notes, shards, BM25 and vectors, kept consistent under one lock."""

from __future__ import annotations

import gc
import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, KeysView, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from explorer.config import Settings, VaultSettings, cache_dir_for
from explorer.index.dense import DenseIndex
from explorer.index.dialog import context_key, context_text, dialog_neighbours, turn_position
from explorer.index.embed import DEFAULT_MODEL_ID, Embedder, EmbedderUnavailable, load_embedder
from explorer.index.lazy import Pending, pending_of
from explorer.index.lexical import BM25Index
from explorer.index.snapshot import LocalSnapshot
from explorer.index.store import FileState, NoteRecord, Store, StoreError, classify, describe, user_cache_dir
from explorer.text.tokenize import tokenize
from explorer.vault.links import LinkGraph
from explorer.vault.model import Note, Shard
from explorer.vault.scan import (
    NoteFile,
    check_vault,
    is_ignored,
    load_note,
    path_refused,
    scan_vault,
    with_sidecar,
)
from explorer.vault.shard import cap_shards, make_shards

if TYPE_CHECKING:
    from explorer.index.backend import ClassicResult
    from explorer.index.classic import ClassicIndex

Progress = Callable[[str, int, int], object]

#: A full scan saves its parsed notes every this many notes (each save is one batch for readers).
COMMIT_EVERY = 1000
#: Shards per embedding batch.
EMBED_BATCH = 32


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
    model_state: str
    model_id: str
    runtime: str
    version: int


class VaultIndex:
    """Everything the search pipeline reads, for one vault (the local `IndexBackend`, explorer.index.backend).

    Writers apply a whole batch under `lock`. A search reads a `snapshot()`: the tables, BM25 and
    vectors as they were at one version. Taking one marks those objects shared; the next writer
    forks what it is about to change (copy-on-write: tables copied, BM25 postings per term on
    first change, the vector matrix shared with rows never overwritten), so the snapshot keeps
    its version while the batch lands, and no search copies anything. Embedding runs outside the
    lock and only inserts finished vectors under it, so lexical updates and searches never wait
    for the model.
    """

    def __init__(
        self,
        root: Path,
        settings: Settings | None = None,
        embedder: Embedder | None = None,
        on_message: Callable[[str], None] | None = None,
    ) -> None:
        self.root = check_vault(root)
        self.settings = settings or Settings()
        self.cache_dir = cache_dir_for(self.root, self.settings)
        self.on_message = on_message or (lambda _msg: None)
        self.lock = threading.RLock()
        self.version = 0
        self.notes: dict[str, Note] = {}
        self.shards: dict[str, Shard] = {}
        self.shards_by_path: dict[str, list[str]] = {}
        self.skipped: dict[str, str] = {}
        self.ignored: dict[str, str] = {}
        """What the ignore rules left out at the last full scan (folders end in `/`), with the rule."""
        ix = self.settings.index
        self.bm25 = BM25Index()
        self.dense = DenseIndex()
        self.context = DenseIndex()
        """Dialog-context vectors of conversation turns (node_id -> the turn read with its neighbours)."""
        self.neighbours: dict[str, tuple[str, ...]] = {}
        """Turn note path -> its adjacent turns' paths (see explorer.index.dialog)."""
        self._context_want: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {}
        """Turn shard node_id -> (context key, the turns before it, the turns after it) it needs a context vector for."""
        self._context_have: dict[str, str] = {}
        self._states: dict[str, FileState] = {}
        self._embedder: Embedder | None = embedder
        self._embedder_lock = threading.Lock()
        self._loader: threading.Thread | None = None
        self.model_state = "ready" if embedder else ("off" if not ix.embeddings else "not loaded")
        self.model_error = ""
        self.model_id = embedder.model_id if embedder else _model_id(ix.model)
        self.runtime = embedder.runtime if embedder else ""
        self._links: LinkGraph | None = None
        self._links_version = -1
        self._classic: ClassicIndex | None = None
        self._pins = 0
        """Snapshots not released yet."""
        self._shared: set[str] = set()
        """Parts a snapshot reads as they are (`tables`, `bm25`, `dense`, `context`): forked before a change."""
        self._fault = ""
        self._memory_reason = ""
        self._closed = False
        self._loader_lock = threading.Lock()
        self._all_loaded = True
        """False while notes opened lazily may still wait for their records (see `_load_notes`)."""
        self.store = self._open_store()
        self._relay()

    # -- the store and its faults ---------------------------------------------------------
    @property
    def save_fault(self) -> str:
        """'' while the store takes every write; 'full' or 'readonly' while writes fail."""
        return self._fault

    @property
    def not_saved(self) -> str:
        """Why the index on disk is not this index ('' when every change is saved).

        Writes failing (disk full, read-only folder), or the index kept in memory for this run
        because no folder took it: a command whose job is the saved index reports it as a failure.
        """
        if self._fault:
            what = "disk full" if self._fault == "full" else f"{self.cache_dir} is read-only"
            return f"{what}: changes are not saved; the saved index is the previous one"
        return self._memory_reason if self.store.memory else ""

    def _open_store(self) -> Store:
        """The store in the index folder.

        When that folder takes no writes (read-only, or the disk is full) the saved index is used
        as it is and changes stay in memory; with no usable saved index, a read-only folder falls
        back to the user cache folder, and failing that, to memory. One line says which.
        """
        try:
            return Store(self.cache_dir)
        except (StoreError, OSError) as exc:
            kind = classify(exc)
            if kind not in ("full", "readonly"):
                raise
        wanted = self.cache_dir
        what = "disk full" if kind == "full" else f"{wanted} is read-only"
        self._fault = kind
        if (wanted / "index.sqlite").is_file():
            try:
                store = Store(wanted, frozen=kind)
                self.on_message(
                    f"{what}: searching the saved index as it is; changes are kept in memory for this run"
                )
                return store
            except (StoreError, OSError):
                pass
        if kind == "readonly":
            fallback = user_cache_dir(self.root)
            try:
                store = Store(fallback)
                self.cache_dir = fallback
                self._fault = ""
                self.on_message(f"{what}: keeping the index in {fallback}")
                return store
            except (StoreError, OSError) as exc:
                if classify(exc) not in ("full", "readonly"):
                    raise
        self._fault = ""
        self._memory_reason = f"{what}: the index is kept in memory for this run"
        self.on_message(f"{what}: keeping the index in memory for this run")
        return Store(None, memory=True)

    def _relay(self) -> None:
        """Pass the store's one-line messages on."""
        while self.store.messages:
            self.on_message(self.store.messages.pop(0))

    def _store_fault(self, exc: StoreError) -> None:
        """Answer a store fault: rebuild a damaged store from memory; report a full or read-only one once."""
        if exc.kind == "damaged":
            with self.lock:
                self._reset_store(f"index damaged ({exc.detail})")
                self._write_all()
            return
        if self._fault != exc.kind:
            self.on_message(describe(exc.kind, exc.detail))
        self._fault = exc.kind

    def _reset_store(self, why: str) -> None:
        """Start the store again after damage (a store that takes no writes is replaced by memory)."""
        if self.store.frozen:
            self._memory_reason = f"{why}: the index is kept in memory for this run"
            self.on_message(f"{why}: keeping the index in memory for this run")
            self.store = Store(None, memory=True)
        else:
            self.store.reset(why)
            self._fault = ""
        self._relay()

    def _save(self, write: Callable[[], None]) -> bool:
        """Run one store write; a fault is answered by `_store_fault` and False returned."""
        try:
            write()
        except StoreError as exc:
            self._store_fault(exc)
            return False
        if self._fault:
            self.on_message("the index is being saved again")
            self._fault = ""
        return True

    def _write_all(self) -> None:
        """Write the whole in-memory index (notes, skips, vectors) into the current store."""
        records = [
            NoteRecord(
                path,
                self._states[path],
                note,
                tuple(self.shards[i] for i in self.shards_by_path.get(path, ())),
                tuple(self.bm25.terms(i) for i in self.shards_by_path.get(path, ())),
            )
            for path, note in self.notes.items()
            if path in self._states
        ]
        skips = [
            (p, r, self._states[p].mtime_ns, self._states[p].size)
            for p, r in self.skipped.items()
            if p in self._states
        ]
        vectors: dict[str, np.ndarray] = {}
        for sh in self.shards.values():
            vec = self.dense.vector(sh.node_id)
            if vec is not None:
                vectors[sh.hash] = vec
        for node_id, key in self._context_have.items():
            vec = self.context.vector(node_id)
            if vec is not None:
                vectors[key] = vec
        try:
            self.store.apply(notes=records, skipped=skips)
            if vectors:
                self.store.put_vectors(self.model_id, vectors)
        except StoreError as exc:
            if exc.kind == "damaged":
                raise
            self._store_fault(exc)

    # -- opening and refreshing ---------------------------------------------------------
    def open(self, progress: Progress | None = None) -> BatchReport:
        """Load the stored index, then bring it up to date with the vault on disk.

        The cyclic garbage collector is paused meanwhile: loading creates millions of long-lived
        objects and no garbage cycles, and its full passes over them cost about a tenth of the
        open time. Afterwards the loaded objects are frozen (`gc.freeze`): they live as long as
        the index, and a later full pass would walk them all again (at 10k notes that pass took
        more time than the first query itself). `close()` unfreezes them.
        """
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._open(progress)
        finally:
            gc.freeze()
            if collecting:
                gc.enable()

    def _open(self, progress: Progress | None) -> BatchReport:
        t0 = time.perf_counter()
        with self.lock:
            self._own()
        try:
            records = self.store.load_heads(self._load_pending)
            skipped = self.store.skipped()
            stored_states = self.store.skipped_states()
            covered = self._load_segment(records)
            counts = (
                self.store.load_counts([r.path for r in records if r.path not in covered])
                if len(covered) < len(records)
                else {}
            )
        except StoreError as exc:
            # Damage met while reading: move the file aside, start again from the vault.
            if exc.kind == "damaged":
                self._reset_store(f"index damaged ({exc.detail})")
            else:
                self.on_message(describe(exc.kind, exc.detail))
            records, skipped, stored_states, covered, counts = [], {}, {}, set(), {}
            self.bm25 = BM25Index(self.bm25.k1, self.bm25.b, self.bm25.epsilon)
        self._relay()
        with self.lock:
            self._own()
            self._all_loaded = not records
            for rec in records:
                if rec.path in covered:
                    self._install(rec.note, list(rec.shards), rec.state, lexical=False)
                else:
                    self._install(rec.note, list(rec.shards), rec.state, counts.get(rec.path))
            self.skipped = skipped
            for path in self.skipped:
                self._states.setdefault(path, FileState(0, 0, ""))
            self._states.update(stored_states)
            self._load_vectors(list(self.shards.values()))
            self._refresh_dialog()
            self.version += 1
        uncovered = len(records) - len(covered)
        stale = bool(records) and self.store.rules_stale
        if stale:
            self.on_message(
                "notes indexed by an earlier version of the parser: reading every note again (vectors kept)"
            )
        report = self.refresh(progress=progress, reparse=stale)
        if stale or self.store.rules_stale:
            try:
                self.store.mark_rules_current()
            except StoreError as exc:
                self._store_fault(exc)
        changed = uncovered + len(report.added) + len(report.changed) + len(report.removed)
        if changed and changed * 10 >= max(len(self.notes), 1):
            self.save_segment()
        self._prune_if_worth_it()
        report.ms = (time.perf_counter() - t0) * 1000
        return report

    def _load_segment(self, records: list[NoteRecord]) -> set[str]:
        """Load the saved BM25 segment into the (empty) lexical index; returns the paths it covers.

        A note is covered when its stored content hash and shard ids equal the segment's; the
        segment's other documents are removed again, and uncovered notes get their stored counts.
        """
        loaded = self.store.load_segment()
        if loaded is None:
            return set()
        arrays, strings = loaded
        by_path = {r.path: r for r in records}
        keys = strings["keys"]
        note_ptr = arrays["note_ptr"].tolist()
        covered: set[str] = set()
        stale: list[str] = []
        for i, (path, h) in enumerate(zip(strings["note_path"], strings["note_hash"])):
            ids = keys[note_ptr[i] : note_ptr[i + 1]]
            rec = by_path.get(path)
            if (
                rec is not None
                and rec.state.hash == h
                and len(ids) == len(rec.shards)
                and all(k == s.node_id for k, s in zip(ids, rec.shards))
            ):
                covered.add(path)
            else:
                stale.extend(ids)
        self.bm25.load_base(keys, strings["vocab"], arrays)
        for key in stale:
            self.bm25.remove(key)
        return covered

    def save_segment(self) -> None:
        """Save the lexical index as one segment so that the next open loads arrays instead of rebuilding postings."""
        with self.lock:
            notes = [(p, self._states[p].hash) for p in self.notes if p in self._states]
            keys: list[str] = []
            ptr = [0]
            for path, _h in notes:
                keys.extend(self.shards_by_path.get(path, ()))
                ptr.append(len(keys))
            vocab, arrays = self.bm25.export(keys)
        self._save(lambda: self.store.save_segment(notes, np.asarray(ptr), keys, vocab, arrays))

    def _prune_if_worth_it(self) -> None:
        """Compact the vector cache when a quarter or more of its rows serve no current shard."""
        if self.model_state == "off":
            return
        try:
            rows = self.store.vector_rows(self.model_id)
        except StoreError:
            return
        with self.lock:
            live = len({s.hash for s in self.shards.values()})
        if rows > live * 4 // 3:
            self.prune_vectors()

    def refresh(
        self,
        paths: Iterable[str] | None = None,
        progress: Progress | None = None,
        reread: bool = False,
        reparse: bool = False,
    ) -> BatchReport:
        """Re-read what changed on disk: the whole vault, or only `paths` (vault-relative).

        A file is re-parsed only when its size or mtime moved (or, with `reread`, always) and
        its content hash differs.

        Args:
            paths: Vault-relative paths to check; None scans the whole vault.
            progress: Called with (stage, done, total) while reading.
            reread: Read every listed file even when its size and mtime look unchanged (a
                watcher knows it was touched: a permission change, or two writes within one
                mtime tick). Unchanged content still costs no re-parse.
            reparse: Parse every file again even when its content is unchanged (the stored
                notes were made by other parsing rules); shards whose text is unchanged keep
                their vectors.
        """
        t0 = time.perf_counter()
        vault = self.settings.vault
        if paths is None:
            scan = scan_vault(self.root, vault)
            present = {f.path: f for f in scan.files}
            gone = [p for p in list(self._states) if p not in present]
            candidates = list(scan.files)
            folder_skips = {s.path: s.reason for s in scan.skipped}
            self.ignored = {s.path: s.reason for s in scan.ignored}
        else:
            present, gone, candidates = {}, [], []
            folder_skips = None
            for rel in sorted(set(paths)):
                f = _stat_file(self.root, rel, vault)
                if f is None or is_ignored(rel, vault):
                    if rel in self._states:
                        gone.append(rel)
                    continue
                present[rel] = f
                candidates.append(f)
        report = BatchReport()
        parsed: list[tuple[NoteFile, str, Note, list[Shard]]] = []
        touched: list[tuple[str, int, int]] = []
        new_skips: list[tuple[str, str, int, int]] = []
        todo = [f for f in candidates if reparse or (reread and paths is not None) or self._needs_read(f)]
        report.unchanged = len(candidates) - len(todo)
        for i, f in enumerate(todo):
            if progress:
                progress("reading", i, len(todo))
            reason = path_refused(self.root, f.abspath, vault)
            if reason:  # e.g. replaced by a symlink leaving the vault since the scan
                new_skips.append((f.path, reason, f.mtime_ns, f.size))
                report.skipped[f.path] = reason
                continue
            try:
                note, reason = load_note(f, vault)
                if note is not None:
                    digest = _note_digest(note)
                    old = self._states.get(f.path)
                    if old is not None and old.hash == digest and f.path in self.notes and not reparse:
                        touched.append((f.path, f.mtime_ns, f.size))
                        report.unchanged += 1
                        continue
                    note, shards = self._shard(note)
            except Exception as exc:  # noqa: BLE001 - one bad note never aborts the batch
                note, reason = None, f"could not be read: {type(exc).__name__}: {str(exc)[:200]}"
            if note is None:
                new_skips.append((f.path, reason, f.mtime_ns, f.size))
                report.skipped[f.path] = reason
                continue
            parsed.append((f, digest, note, shards))
            if paths is None and len(parsed) >= COMMIT_EVERY:
                # A long first index is saved as it goes: interrupted, the next run resumes here.
                self._apply(parsed, [], new_skips, touched, report, None)
                parsed, new_skips, touched = [], [], []
        if progress:
            progress("reading", len(todo), len(todo))
        for path, reason in (folder_skips or {}).items():
            report.skipped.setdefault(path, reason)
        self._apply(parsed, gone, new_skips, touched, report, folder_skips)
        report.ms = (time.perf_counter() - t0) * 1000
        return report

    def warnings(self) -> dict[str, tuple[str, ...]]:
        """Notes indexed with a problem (truncated, frontmatter ignored), path -> what happened."""
        with self.lock:
            return {path: note.warnings for path, note in sorted(self.notes.items()) if note.warnings}

    def _needs_read(self, f: NoteFile) -> bool:
        old = self._states.get(f.path)
        if old is None or old.mtime_ns != f.mtime_ns or old.size != f.size:
            return True
        # A permission change moves neither size nor mtime: retry files that could not be read.
        return not old.hash and self.skipped.get(f.path, "").startswith("unreadable")

    def file_state(self, path: str) -> FileState | None:
        """What the index last recorded of a vault-relative file (size, mtime, hash), or None."""
        with self.lock:
            return self._states.get(path)

    def paths_under(self, folder: str) -> list[str]:
        """Known files (notes and skipped files) at or below a vault-relative folder; '' is the root."""
        prefix = folder.rstrip("/") + "/" if folder else ""
        with self.lock:
            return sorted(p for p in self._states if p == folder or p.startswith(prefix))

    def reopen_store(self) -> None:
        """Start a fresh store file and write the current in-memory index into it.

        For a cache folder that vanished under a running index (the vault folder was deleted
        and created again): without this, later writes would go to an unlinked database.
        """
        with self.lock:
            old = self.store
            self.store = self._open_store()
            self._relay()
            self._write_all()
        try:
            old.close()
        except Exception:  # noqa: BLE001 - the old file is gone; closing it may fail harmlessly
            pass

    def prune_vectors(self) -> int:
        """Drop cached vectors that no current shard uses (of the current model); returns how many."""
        with self.lock:
            keep = {s.hash for s in self.shards.values()} | {want[0] for want in self._context_want.values()}
        try:
            return self.store.prune_vectors(self.model_id, keep)
        except StoreError as exc:
            self._store_fault(exc)
            return 0

    def _apply(
        self,
        parsed: list[tuple[NoteFile, str, Note, list[Shard]]],
        gone: list[str],
        new_skips: list[tuple[str, str, int, int]],
        touched: list[tuple[str, int, int]],
        report: BatchReport,
        folder_skips: dict[str, str] | None,
    ) -> None:
        # Tokenize outside the lock: it is the costly part of a batch. The counts are stored too,
        # so a restart never tokenizes again.
        records = [
            NoteRecord(
                n.path,
                FileState(f.mtime_ns, f.size, d),
                n,
                tuple(s),
                tuple(Counter(tokenize(x.search_text)) for x in s),
            )
            for f, d, n, s in parsed
        ]
        # A note opened lazily still reads its stored record: make it whole before that record is replaced.
        self._load_notes([*(r.path for r in records), *gone, *(p for p, _r, _m, _s in new_skips)])
        saved = self._save(
            lambda: self.store.apply(notes=records, removed=gone, skipped=new_skips, touched=touched)
        )
        with self.lock:
            self._own()
            for path in gone:
                report.shards_removed += self._uninstall(path)
                self._states.pop(path, None)
                self.skipped.pop(path, None)
                report.removed.append(path)
            for path, reason, mtime, size in new_skips:
                if path in self.notes:
                    report.shards_removed += self._uninstall(path)
                self.skipped[path] = reason
                self._states[path] = FileState(mtime, size, "")
            for path, mtime, size in touched:
                old = self._states.get(path)
                if old is not None:
                    self._states[path] = FileState(mtime, size, old.hash)
            new_shards: list[Shard] = []
            for rec in records:
                existed = rec.path in self.notes
                self.skipped.pop(rec.path, None)
                old_ids = set(self.shards_by_path.get(rec.path, ()))
                report.shards_removed += self._uninstall(rec.path, keep_vectors=True)
                added = self._install(rec.note, list(rec.shards), rec.state, rec.counts)
                kept = {s.node_id for s in rec.shards} & old_ids
                report.shards_added += len(added) - len(kept)
                report.shards_removed -= len(kept)
                new_shards.extend(added)
                (report.changed if existed else report.added).append(rec.path)
            if folder_skips is not None:
                # A full scan: folder-level skips are replaced by what this scan found.
                for path in [p for p in self.skipped if p not in self._states]:
                    del self.skipped[path]
                self.skipped.update(folder_skips)
            self._load_vectors([s for s in new_shards if s.node_id not in self.dense])
            if any(p in self.neighbours for p in gone) or any(
                r.path in self.neighbours or turn_position(r.note) is not None for r in records
            ):
                self._refresh_dialog()
            self.version += 1
        if not saved and self._fault == "" and self.store is not None:
            # The damaged store was rebuilt from memory, which now holds this batch too.
            with self.lock:
                self._write_all()

    def _load_pending(self, pending: Pending) -> None:
        """Complete a lazily opened note and its shards: from its stored record, else from its file."""
        got: tuple[Note, tuple[Shard, ...] | list[Shard]] | None = None
        try:
            got = self.store.load_record(pending.path, pending.hash)
        except Exception:  # noqa: BLE001 - a store fault, or a store closed since: read the file
            pass
        if got is None:
            got = self._parse_again(pending.path)
        pending.fill(*got) if got is not None else pending.fill(None, ())

    def _parse_again(self, path: str) -> tuple[Note, list[Shard]] | None:
        """The note at `path` parsed from its file (its stored record could not be read), or None."""
        vault = self.settings.vault
        f = _stat_file(self.root, path, vault)
        if f is None:
            return None
        try:
            note, _reason = load_note(f, vault)
            if note is None:
                return None
            return self._shard(note)
        except Exception:  # noqa: BLE001 - unreadable now: the next refresh reports it
            return None

    def _shard(self, note: Note) -> tuple[Note, list[Shard]]:
        """A parsed note's shards under the index settings, capped at the vault's per-note limit."""
        return cap_shards(note, make_shards(note))

    def _load_notes(self, paths: Iterable[str] | None = None) -> None:
        """Make lazily opened notes whole (all of them when `paths` is None), reading their records in one pass."""
        notes = self.notes
        if paths is None:
            if self._all_loaded:
                return
            waiting = [p for p in (pending_of(n) for n in list(notes.values())) if p is not None]
        else:
            waiting = [p for p in (pending_of(notes.get(path)) for path in paths) if p is not None]
        if len(waiting) > 50:
            try:
                records = self.store.load_records({p.path: p.hash for p in waiting})
            except StoreError:
                records = {}
            for p in waiting:
                got = records.get(p.path)
                if got is not None:
                    p.supply(*got)
        for p in waiting:
            p.load()
        if paths is None:
            self._all_loaded = True

    def load_all_notes(self) -> None:
        """Make every lazily opened note whole now, in one pass over the store: for a reader about to
        read every note's text (one read per note would cost a query each)."""
        with self.lock:
            self._load_notes()

    def _install(
        self,
        note: Note,
        shards: list[Shard],
        state: FileState,
        counts: tuple[dict[str, int], ...] | None = None,
        lexical: bool = True,
    ) -> list[Shard]:
        """Add a note and its shards; `lexical=False` when the BM25 index already holds them (a loaded segment)."""
        self.notes[note.path] = note
        self._states[note.path] = state
        if not lexical:  # the common case of an open: no per-shard work but the table entries
            ids = [s.node_id for s in shards]
            self.shards.update(zip(ids, shards))
            self.shards_by_path[note.path] = ids
            return shards
        ids = []
        if counts is None or len(counts) != len(shards):
            counts = tuple(Counter(tokenize(s.search_text)) for s in shards)
        for i, s in enumerate(shards):
            self.shards[s.node_id] = s
            if lexical:
                self.bm25.add_counts(s.node_id, counts[i])
            ids.append(s.node_id)
        self.shards_by_path[note.path] = ids
        return shards

    def _uninstall(self, path: str, keep_vectors: bool = False) -> int:
        ids = self.shards_by_path.pop(path, [])
        self.notes.pop(path, None)
        for node_id in ids:
            self.shards.pop(node_id, None)
            self.bm25.remove(node_id)
            if not keep_vectors:
                self.dense.remove(node_id)
        if keep_vectors:
            # Vectors are re-attached by hash after reinstall; stale ones must not linger.
            for node_id in ids:
                self.dense.remove(node_id)
        return len(ids)

    def _load_vectors(self, shards: list[Shard]) -> None:
        if not shards or self.model_state == "off":
            return
        try:
            found, mat = self.store.get_matrix(self.model_id, list(dict.fromkeys(s.hash for s in shards)))
        except StoreError as exc:
            self._store_fault(exc)
            found, mat = [], np.zeros((0, 0), dtype=np.float32)
        self._relay()
        if not found or mat.shape[1] != self.dense.dim:
            return
        row_of = {h: i for i, h in enumerate(found)}
        keys, rows = [], []
        for s in shards:
            i = row_of.get(s.hash)
            if i is not None:
                keys.append(s.node_id)
                rows.append(i)
        if keys:
            picked = mat if rows == list(range(len(mat))) else mat[np.asarray(rows, dtype=np.int64)]
            self.dense.set_many(keys, picked, adopt=True)

    def _refresh_dialog(self) -> None:
        """Recompute the adjacent turns and which context vector each turn shard needs (under the lock);
        drop context vectors that no longer fit, load the ones the store has.

        A context vector's cache key is made of the content hashes of the turns it reads, in order,
        so no note text is read here (a lazily opened note stays unread until it is embedded).
        """
        self.neighbours = dialog_neighbours(self.notes)
        want: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {}
        if self.settings.experimental.dialog_context:
            number = {p: pos[0] for p in self.neighbours if (pos := turn_position(self.notes[p])) is not None}
            by_path, shards = self.shards_by_path, self.shards
            for path, near in self.neighbours.items():
                before = tuple(p for p in near if number.get(p, 0) < number[path])
                after = tuple(p for p in near if number.get(p, 0) > number[path])
                around = [
                    [shards[i].hash for i in by_path.get(p, ()) if i in shards] for p in (*before, *after)
                ]
                for node_id in by_path.get(path, ()):
                    hashes = (
                        [h for hs in around[: len(before)] for h in hs]
                        + [shards[node_id].hash]
                        + [h for hs in around[len(before) :] for h in hs]
                    )
                    want[node_id] = (context_key(hashes), before, after)
        self._context_want = want
        for node_id, key in list(self._context_have.items()):
            if want.get(node_id, ("",))[0] != key:
                self.context.remove(node_id)
                del self._context_have[node_id]
        missing = {
            node_id: key for node_id, (key, _b, _a) in want.items() if node_id not in self._context_have
        }
        if not missing or self.model_state == "off":
            return
        try:
            found, mat = self.store.get_matrix(self.model_id, sorted(set(missing.values())))
        except StoreError as exc:
            self._store_fault(exc)
            return
        if not found or mat.shape[1] != self.context.dim:
            return
        row_of = {h: i for i, h in enumerate(found)}
        keys = [n for n, k in missing.items() if k in row_of]
        if keys:
            self.context.set_many(keys, mat[np.asarray([row_of[missing[n]] for n in keys], dtype=np.int64)])
            for n in keys:
                self._context_have[n] = missing[n]

    def _context_text(self, node_id: str) -> str:
        """The text a turn shard's context vector embeds: the turn before, the shard, the turn after."""
        _key, before, after = self._context_want[node_id]
        return context_text(
            self.shards[node_id].text.strip(),
            [self._note_text(p) for p in before],
            [self._note_text(p) for p in after],
        )

    def _note_text(self, path: str) -> str:
        """The text of a note's shards, joined (a turn note is usually one shard)."""
        return "\n".join(
            self.shards[i].text.strip() for i in self.shards_by_path.get(path, ()) if i in self.shards
        )

    # -- embedding ------------------------------------------------------------------------
    def embedder(self, progress: Callable[[str], None] | None = None) -> Embedder | None:
        """The embedding model, loaded on first use; None when embeddings are off or unavailable."""
        if (
            self._embedder is not None
            or self.model_state in ("off",)
            or self.model_state.startswith("unavailable")
        ):
            return self._embedder
        with self._embedder_lock:
            if (
                self._embedder is None
                and self.model_state not in ("off",)
                and not self.model_state.startswith("unavailable")
            ):
                self.model_state = "loading"
                ix = self.settings.index
                try:
                    emb = load_embedder(ix.model, self.settings.experimental.runtime, progress=progress)
                except EmbedderUnavailable as exc:
                    self.model_state = "unavailable"
                    self.model_error = str(exc)
                    self.on_message(f"embedding model unavailable, searching BM25 only: {exc}")
                    return None
                if emb.model_id != self.model_id:
                    with self.lock:
                        self._own()
                        self.model_id = emb.model_id
                        for key in list(self.shards):
                            self.dense.remove(key)
                        self._load_vectors(list(self.shards.values()))
                        self.context = DenseIndex()
                        self._context_have = {}
                        self._refresh_dialog()
                self._embedder = emb
                self.runtime = emb.runtime
                self.model_state = "ready"
        return self._embedder

    def load_model_in_background(self) -> None:
        """Start loading the embedding model in a thread, so that it loads while the index opens.

        The model is independent of the index, and most of its loading (reading and checking the
        model file, building the runtime session) runs outside the interpreter lock. `embedder()`
        waits for this load instead of starting another; `close()` waits for it to end.
        """
        with self._loader_lock:
            if (
                self._loader is not None
                or self._embedder is not None
                or self.model_state == "off"
                or self._closed
            ):
                return
            self._loader = threading.Thread(target=self.embedder, name="explorer-model", daemon=True)
            self._loader.start()

    def pending(self) -> list[Shard]:
        """Shards that have no vector yet: no vector of their own, or (a conversation turn) no dialog-context vector."""
        with self.lock:
            out = [s for s in self.shards.values() if s.node_id not in self.dense]
            if len(self._context_have) < len(self._context_want):
                seen = {s.node_id for s in out}
                out += [
                    self.shards[n]
                    for n in self._context_want
                    if n not in self._context_have and n not in seen and n in self.shards
                ]
            return out

    def embed_pending(
        self,
        progress: Progress | None = None,
        cancelled: Callable[[], bool] | None = None,
        batch: int | None = None,
    ) -> int:
        """Embed every shard that lacks a vector, batch by batch; returns how many were embedded.

        Vectors already in the cache under the same content hash are reused, never recomputed.
        """
        emb = self.embedder()
        if emb is None:
            return 0
        size = batch or EMBED_BATCH
        todo = self.pending()
        # Shards sharing a hash are embedded once; so are context texts sharing a key.
        by_hash: dict[str, list[Shard]] = {}
        text_of: dict[str, str] = {}
        contexts: dict[str, list[str]] = {}
        with self.lock:
            for s in todo:
                if s.node_id not in self.dense:
                    by_hash.setdefault(s.hash, []).append(s)
                    text_of[s.hash] = s.search_text
                wanted = self._context_want.get(s.node_id)
                if wanted is not None and s.node_id not in self._context_have:
                    contexts.setdefault(wanted[0], []).append(s.node_id)
                    if wanted[0] not in text_of:
                        text_of[wanted[0]] = self._context_text(s.node_id)
        hashes = sorted(text_of, key=lambda h: len(text_of[h]))
        done = 0
        total = len(hashes)
        step = max(size * 4, 64)
        for i in range(0, total, step):
            if cancelled and cancelled():
                break
            chunk = hashes[i : i + step]
            texts = [text_of[h] for h in chunk]
            # One model batch at a time, cancellable between batches (quitting the app waits for
            # the batch under way, not the whole step); what was embedded is kept.
            vecs: list[np.ndarray] = []
            for j in range(0, len(texts), size):
                if j and cancelled and cancelled():
                    break
                vecs.extend(emb.encode(texts[j : j + size], batch_size=size))
            chunk = chunk[: len(vecs)]
            self._save(lambda: self.store.put_vectors(self.model_id, dict(zip(chunk, vecs))))  # noqa: B023 - run at once
            with self.lock:
                self._own("dense", "context")
                for h, vec in zip(chunk, vecs):
                    for s in by_hash.get(h, ()):
                        current = self.shards.get(s.node_id)
                        if current is not None and current.hash == h:
                            self.dense.set(s.node_id, vec)
                    for node_id in contexts.get(h, ()):
                        if self._context_want.get(node_id, ("",))[0] == h:
                            self.context.set(node_id, vec)
                            self._context_have[node_id] = h
                self.version += 1
            done += len(chunk)
            if progress:
                progress("embedding", done, total)
        return done

    def encode_query(self, text: str) -> np.ndarray | None:
        """The query vector, or None when no model is available."""
        emb = self.embedder()
        if emb is None:
            return None
        return emb.encode([text])[0]

    # -- snapshots --------------------------------------------------------------------------
    def snapshot(self) -> LocalSnapshot:
        """A read view of the index at its current version, unchanged by later batches until released.

        Cheap: it keeps references, and marks what it keeps as shared so that the next writer
        forks it before changing it (`_own`). Release it (`release()` or a `with` block): a
        snapshot held keeps the rows of removed vectors from being reused.
        """
        with self.lock:
            self._shared = {"tables", "bm25", "dense", "context"}
            self._pins += 1
            return LocalSnapshot(
                self,
                self.version,
                self.notes,
                self.shards,
                self.shards_by_path,
                self.neighbours,
                self.bm25,
                self.dense,
                self.context,
            )

    def _unpin(self) -> None:
        """A snapshot was released."""
        with self.lock:
            self._pins -= 1

    def _own(self, *parts: str) -> None:
        """Before a change (under the lock): fork the parts a snapshot still reads (all, or `parts`).

        With no snapshot held, nothing is copied and the rows retired while one was are freed.
        """
        if not self._pins:
            self._shared.clear()
            self.dense.recycle()
            self.context.recycle()
            return
        shared = self._shared.intersection(parts) if parts else set(self._shared)
        if "tables" in shared:
            self.notes = dict(self.notes)
            self.shards = dict(self.shards)
            self.shards_by_path = dict(self.shards_by_path)
        if "bm25" in shared:
            self.bm25 = self.bm25.fork()
        if "dense" in shared:
            self.dense = self.dense.fork()
        if "context" in shared:
            self.context = self.context.fork()
        self._shared -= shared

    def links_at(self, version: int, notes: Mapping[str, Note]) -> LinkGraph:
        """The wikilink graph of `notes`, the notes of a snapshot at `version` (the current graph when current)."""
        with self.lock:
            if version == self.version:
                return self.links()
            if self._links is not None and self._links_version == version:
                return self._links
        for p in [p for p in (pending_of(n) for n in list(notes.values())) if p is not None]:
            p.load()
        return LinkGraph(notes)

    # -- reading ----------------------------------------------------------------------------
    def stats(self) -> IndexStats:
        """Counts for status displays."""
        with self.lock:
            # The dense index only ever holds vectors of current shards.
            pending = len(self.shards) - len(self.dense)
            return IndexStats(
                notes=len(self.notes),
                shards=len(self.shards),
                skipped=len(self.skipped),
                embedded=len(self.shards) - pending,
                pending=pending,
                model_state=self.model_state,
                model_id=self.model_id,
                runtime=self.runtime,
                version=self.version,
            )

    def note(self, path: str) -> Note | None:
        """The note at `path`, or None (lock-free: a note object is replaced whole, never changed)."""
        return self.notes.get(path)

    def note_titles(self) -> dict[str, str]:
        """{path: title} of every note, a copy taken under the lock."""
        with self.lock:
            return {p: n.title for p, n in self.notes.items()}

    def note_count(self) -> int:
        """How many notes are indexed."""
        return len(self.notes)

    def shard_ids(self, path: str) -> tuple[str, ...]:
        """node_ids of the shards of `path`, in note order (lock-free, as `shard_at`)."""
        return tuple(self.shards_by_path.get(path, ()))

    def skipped_files(self) -> dict[str, str]:
        """{path: reason} of the files that are not indexed, a copy."""
        with self.lock:
            return dict(self.skipped)

    def tokens(self, node_id: str) -> KeysView[str]:
        """The distinct BM25 tokens of a shard."""
        return self.bm25.terms(node_id).keys()

    def links(self) -> LinkGraph:
        """Wikilink graph of the current notes (rebuilt when the index changed)."""
        with self.lock:
            if self._links is None or self._links_version != self.version:
                self._load_notes()
                self._links = LinkGraph(self.notes)
                self._links_version = self.version
            return self._links

    def classic(self) -> ClassicIndex:
        """The positional index of the classic cursor tools over the same notes.

        Built on first use; each later use (and each search on it) re-tokenizes only the notes
        whose object changed since the version it last saw, under this index's lock.
        """
        with self.lock:
            if self._classic is None:
                from explorer.index.classic import ClassicIndex

                self._classic = ClassicIndex(self.shard_at, self.lock, lambda: (self.version, self.notes))
            self._load_notes()
            self._classic.update()
            return self._classic

    def resolve_note(self, name: str) -> str | None:
        """The indexed note `name` names, or None (the backend interface's `resolve_note`).

        A vault path (with or without `.md`, slashes either way) wins; else `name` resolves as an
        Obsidian link target does (path suffix, file stem or alias, case-insensitively).
        """
        name = name.strip().replace("\\", "/").lstrip("/")
        if not name:
            return None
        if name in self.notes:
            return name
        if f"{name}.md" in self.notes:
            return f"{name}.md"
        resolved = self.links().resolve(name)
        return resolved if resolved is not None and resolved in self.notes else None

    def local_copy(self, root: Path, settings: Settings) -> VaultIndex:
        """A new local index over `root` (a copy of this vault) with this index's model when it is
        loaded; not opened yet (the backend interface's `local_copy`)."""
        return VaultIndex(root, settings, embedder=self.embedder() if self.model_state == "ready" else None)

    def classic_search(
        self,
        mode: str,
        keywords: Sequence[str] | str,
        max_results: int | None = None,
        context_chars: int | None = None,
        window: int | None = None,
    ) -> ClassicResult:
        """One classic cursor tool over the current notes (the backend interface's `classic_search`)."""
        return self.classic().run(mode, keywords, max_results, context_chars, window)

    def shard_at(self, path: str, cursor: int) -> Shard | None:
        """The shard of `path` that contains `cursor` (the nearest one before it otherwise).

        Lock-free, so the app's event loop never waits on a search or a batch holding the index
        lock: the path's id list is replaced whole when the note changes, and a shard removed
        meanwhile is skipped.
        """
        ids = self.shards_by_path.get(path, ())
        best = first = None
        for node_id in ids:
            s = self.shards.get(node_id)
            if s is None:
                continue
            first = first or s
            if s.start <= cursor < s.end:
                return s
            if s.start <= cursor:
                best = s
        return best or first

    def close(self, exiting: bool = False) -> None:
        """Close the store (after a background model load, if one runs, has ended).

        The objects the open froze for the garbage collector are unfrozen again, except with
        `exiting` (a one-shot command about to end): its interpreter's last collection would walk
        them all once more only to free memory the exit frees anyway (about 0.15 s at 10k notes).
        """
        # No model load may start after this (it would outlive the interpreter inside the runtime).
        with self._loader_lock:
            self._closed = True
        if self._loader is not None:
            self._loader.join()
        self.store.close()
        if not exiting:
            gc.unfreeze()


def _model_id(model: str) -> str:
    if not model or model in (DEFAULT_MODEL_ID, f"sentence-transformers/{DEFAULT_MODEL_ID}"):
        return DEFAULT_MODEL_ID
    return "model-" + hashlib.blake2b(model.encode(), digest_size=6).hexdigest()


def _note_digest(note: Note) -> str:
    """Content hash of what a note's index entry is built from: its text and side metadata."""
    h = hashlib.blake2b(note.text.encode("utf-8"), digest_size=16)
    if note.metadata:
        h.update(b"\0" + json.dumps(note.metadata, sort_keys=True, default=str).encode("utf-8"))
    return h.hexdigest()


def _stat_file(root: Path, rel: str, vault: VaultSettings) -> NoteFile | None:
    p = root / rel
    if path_refused(root, p, vault):
        return None  # reached through a symlink the settings do not follow
    try:
        st = p.stat()
    except OSError:
        return None
    if not p.is_file():
        return None
    return NoteFile(rel, str(p), *with_sidecar(p, st.st_size, st.st_mtime_ns))
