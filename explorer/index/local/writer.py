"""The writer of a local index: opening it, scanning the vault, applying change batches, inserting vectors.

`IndexWriter` changes the live state of an `IndexReader` (explorer.index.local.reader) one batch at a
time, under its lock and after `own()` (so that a snapshot keeps its version), and saves every
batch through a `StoreKeeper` (explorer.index.local.keeper). Notes are parsed and tokenized outside
the lock; vectors come from the `ModelHost`'s embedding loop (explorer.index.local.model_host) and
from the store's vector cache, keyed by content hash.
"""

from __future__ import annotations

import gc
import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from explorer.config import Settings, VaultSettings
from explorer.index.backend import BatchReport, Progress
from explorer.index.local.dialog import turn_position
from explorer.index.local.keeper import StoreKeeper
from explorer.index.local.lazy import Pending, pending_of
from explorer.index.local.lexical import BM25Index
from explorer.index.local.model_host import ModelHost
from explorer.index.local.reader import IndexReader
from explorer.index.local.store import FileState, NoteRecord, StoreError, describe
from explorer.index.local.vector_writer import VectorWriter
from explorer.text.tokenize import tokenize
from explorer.vault.model import Note, Shard
from explorer.vault.pdf import is_pdf, start_pdf_reader
from explorer.vault.scan import NoteFile, is_ignored, load_note, path_refused, scan_vault, with_sidecar
from explorer.vault.shard import cap_shards, make_shards

__all__ = ["COMMIT_EVERY", "BatchReport", "IndexWriter", "Progress"]

#: A full scan saves its parsed notes every this many notes (each save is one batch for readers).
COMMIT_EVERY = 1000


class IndexWriter:
    """Opens, refreshes and saves one local index: every change to its live state goes through here.

    A batch is parsed and tokenized outside the lock, saved, then applied to the reader's tables,
    BM25 index and vectors under the lock in one step (readers never see half of it). Embedding
    runs outside the lock and only inserts finished vectors under it, so lexical updates and
    searches never wait for the model.
    """

    def __init__(
        self,
        root: Path,
        settings: Settings,
        reader: IndexReader,
        keeper: StoreKeeper,
        model: ModelHost,
        on_message: Callable[[str], None],
        on_batch: Callable[[], None] | None = None,
    ) -> None:
        self.root = root
        self.settings = settings
        self.reader = reader
        self.keeper = keeper
        self.model = model
        self.on_message = on_message
        self.on_batch = on_batch or (lambda: None)
        """Called after each change batch is applied (the Milvus backend sends it on)."""
        self._all_loaded = True
        """False while notes opened lazily may still wait for their records (see `load_notes`)."""
        self.vectors = VectorWriter(reader, keeper, model)
        """The vectors: loaded from the cache, embedded by the model, pruned."""

    def write_all(self) -> None:
        """Write the whole in-memory index (notes, skips, vectors) into the current store."""
        records = [
            NoteRecord(
                path,
                self.reader.states[path],
                note,
                tuple(self.reader.shards[i] for i in self.reader.shards_by_path.get(path, ())),
                tuple(self.reader.bm25.terms(i) for i in self.reader.shards_by_path.get(path, ())),
            )
            for path, note in self.reader.notes.items()
            if path in self.reader.states
        ]
        skips = [
            (p, r, self.reader.states[p].mtime_ns, self.reader.states[p].size)
            for p, r in self.reader.skipped.items()
            if p in self.reader.states
        ]
        vectors = self.vectors.held()
        try:
            self.keeper.store.apply(notes=records, skipped=skips)
            if vectors:
                self.keeper.store.put_vectors(self.model.model_id, vectors)
        except StoreError as exc:
            if exc.kind == "damaged":
                raise
            self.keeper.fault(exc)

    # -- opening and refreshing -------------------------------------------------------------
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
        with self.reader.lock:
            self.reader.own()
        try:
            records = self.keeper.store.load_heads(self._load_pending)
            skipped = self.keeper.store.skipped()
            stored_states = self.keeper.store.skipped_states()
            covered = self._load_segment(records)
            counts = (
                self.keeper.store.load_counts([r.path for r in records if r.path not in covered])
                if len(covered) < len(records)
                else {}
            )
        except StoreError as exc:
            # Damage met while reading: move the file aside, start again from the vault.
            if exc.kind == "damaged":
                self.keeper.reset(f"index damaged ({exc.detail})")
            else:
                self.on_message(describe(exc.kind, exc.detail))
            records, skipped, stored_states, covered, counts = [], {}, {}, set(), {}
            self.reader.bm25 = BM25Index(self.reader.bm25.k1, self.reader.bm25.b, self.reader.bm25.epsilon)
        self.keeper.relay()
        with self.reader.lock:
            self.reader.own()
            self._all_loaded = not records
            for rec in records:
                if rec.path in covered:
                    self._install(rec.note, list(rec.shards), rec.state, lexical=False)
                else:
                    self._install(rec.note, list(rec.shards), rec.state, counts.get(rec.path))
            self.reader.skipped = skipped
            for path in self.reader.skipped:
                self.reader.states.setdefault(path, FileState(0, 0, ""))
            self.reader.states.update(stored_states)
            self.vectors.load(list(self.reader.shards.values()))
            self.vectors.refresh_dialog()
            self.reader.log_version(None)
        uncovered = len(records) - len(covered)
        stale = bool(records) and self.keeper.store.rules_stale
        if stale:
            self.on_message(
                "notes indexed by an earlier version of the parser: reading every note again (vectors kept)"
            )
        report = self.refresh(progress=progress, reparse=stale)
        if stale or self.keeper.store.rules_stale:
            try:
                self.keeper.store.mark_rules_current()
            except StoreError as exc:
                self.keeper.fault(exc)
        changed = uncovered + len(report.added) + len(report.changed) + len(report.removed)
        if changed and changed * 10 >= max(len(self.reader.notes), 1):
            self.save_segment(adopt=True)
        self.vectors.prune_if_worth_it()
        report.ms = (time.perf_counter() - t0) * 1000
        return report

    def _load_segment(self, records: list[NoteRecord]) -> set[str]:
        """Load the saved BM25 segment into the (empty) lexical index; returns the paths it covers.

        A note is covered when its stored content hash and shard ids equal the segment's; the
        segment's other documents are removed again, and uncovered notes get their stored counts.
        """
        loaded = self.keeper.store.load_segment()
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
        self.reader.bm25.load_base(keys, strings["vocab"], arrays)
        for key in stale:
            self.reader.bm25.remove(key)
        return covered

    def save_segment(self, adopt: bool = False) -> None:
        """Save the lexical index as one segment so that the next open loads arrays instead of rebuilding postings.

        With `adopt`, the index then reads the segment's arrays itself, as an index opened from
        the store does: after a first index, the term counts the writer built one note at a time
        (a dict per term and per shard, millions of small objects at 10k notes) give way to the
        compact arrays, so a search costs what it costs after a restart and the objects no longer
        weigh on memory and the garbage collector. The scores are the same.
        """
        with self.reader.lock:
            notes = [(p, self.reader.states[p].hash) for p in self.reader.notes if p in self.reader.states]
            keys: list[str] = []
            ptr = [0]
            for path, _h in notes:
                keys.extend(self.reader.shards_by_path.get(path, ()))
                ptr.append(len(keys))
            old = self.reader.bm25
            vocab, arrays = old.export(keys)
            if adopt and len(keys) == len(old):  # the segment holds every document
                compact = BM25Index(old.k1, old.b, old.epsilon)
                compact.load_base(keys, vocab, arrays)
                self.reader.bm25 = compact  # a snapshot holding the old index keeps it
        self.keeper.save(lambda: self.keeper.store.save_segment(notes, np.asarray(ptr), keys, vocab, arrays))

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
            gone = [p for p in list(self.reader.states) if p not in present]
            candidates = list(scan.files)
            folder_skips = {s.path: s.reason for s in scan.skipped}
            self.reader.ignored = {s.path: s.reason for s in scan.ignored}
        else:
            present, gone, candidates = {}, [], []
            folder_skips = None
            for rel in sorted(set(paths)):
                f = _stat_file(self.root, rel, vault)
                if f is None or is_ignored(rel, vault):
                    if rel in self.reader.states:
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
        if any(is_pdf(f.path) for f in todo):
            start_pdf_reader()  # its start overlaps reading the notes before the first PDF
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
                    old = self.reader.states.get(f.path)
                    if old is not None and old.hash == digest and f.path in self.reader.notes and not reparse:
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

    def _needs_read(self, f: NoteFile) -> bool:
        old = self.reader.states.get(f.path)
        if old is None or old.mtime_ns != f.mtime_ns or old.size != f.size:
            return True
        # A permission change moves neither size nor mtime: retry files that could not be read.
        return not old.hash and self.reader.skipped.get(f.path, "").startswith("unreadable")

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
        self.load_notes([*(r.path for r in records), *gone, *(p for p, _r, _m, _s in new_skips)])
        saved = self.keeper.save(
            lambda: self.keeper.store.apply(notes=records, removed=gone, skipped=new_skips, touched=touched)
        )
        with self.reader.lock:
            self.reader.own()
            for path in gone:
                report.shards_removed += self._uninstall(path)
                self.reader.states.pop(path, None)
                self.reader.skipped.pop(path, None)
                report.removed.append(path)
            for path, reason, mtime, size in new_skips:
                if path in self.reader.notes:
                    report.shards_removed += self._uninstall(path)
                self.reader.skipped[path] = reason
                self.reader.states[path] = FileState(mtime, size, "")
            for path, mtime, size in touched:
                old = self.reader.states.get(path)
                if old is not None:
                    self.reader.states[path] = FileState(mtime, size, old.hash)
            new_shards: list[Shard] = []
            for rec in records:
                existed = rec.path in self.reader.notes
                self.reader.skipped.pop(rec.path, None)
                old_ids = set(self.reader.shards_by_path.get(rec.path, ()))
                report.shards_removed += self._uninstall(rec.path, keep_vectors=True)
                added = self._install(rec.note, list(rec.shards), rec.state, rec.counts)
                kept = {s.node_id for s in rec.shards} & old_ids
                report.shards_added += len(added) - len(kept)
                report.shards_removed -= len(kept)
                new_shards.extend(added)
                (report.changed if existed else report.added).append(rec.path)
            if folder_skips is not None:
                # A full scan: folder-level skips are replaced by what this scan found.
                for path in [p for p in self.reader.skipped if p not in self.reader.states]:
                    del self.reader.skipped[path]
                self.reader.skipped.update(folder_skips)
            self.vectors.load([s for s in new_shards if s.node_id not in self.reader.dense])
            if any(p in self.reader.dialog.neighbours for p in gone) or any(
                r.path in self.reader.dialog.neighbours or turn_position(r.note) is not None for r in records
            ):
                self.vectors.refresh_dialog()
            self.reader.log_version([*gone, *(p for p, _r, _m, _s in new_skips), *(r.path for r in records)])
        if not saved and self.keeper.save_fault == "" and self.keeper.store is not None:
            # The damaged store was rebuilt from memory, which now holds this batch too.
            with self.reader.lock:
                self.write_all()
        self.on_batch()

    def _load_pending(self, pending: Pending) -> None:
        """Complete a lazily opened note and its shards: from its stored record, else from its file."""
        got: tuple[Note, tuple[Shard, ...] | list[Shard]] | None = None
        try:
            got = self.keeper.store.load_record(pending.path, pending.hash)
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

    def load_notes(self, paths: Iterable[str] | None = None) -> None:
        """Make lazily opened notes whole (all of them when `paths` is None), reading their records in one pass."""
        notes = self.reader.notes
        if paths is None:
            if self._all_loaded:
                return
            waiting = [p for p in (pending_of(n) for n in list(notes.values())) if p is not None]
        else:
            waiting = [p for p in (pending_of(notes.get(path)) for path in paths) if p is not None]
        if len(waiting) > 50:
            try:
                records = self.keeper.store.load_records({p.path: p.hash for p in waiting})
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
        with self.reader.lock:
            self.load_notes()

    def _install(
        self,
        note: Note,
        shards: list[Shard],
        state: FileState,
        counts: tuple[dict[str, int], ...] | None = None,
        lexical: bool = True,
    ) -> list[Shard]:
        """Add a note and its shards; `lexical=False` when the BM25 index already holds them (a loaded segment)."""
        self.reader.notes[note.path] = note
        self.reader.states[note.path] = state
        if not lexical:  # the common case of an open: no per-shard work but the table entries
            ids = [s.node_id for s in shards]
            self.reader.shards.update(zip(ids, shards))
            self.reader.shards_by_path[note.path] = ids
            return shards
        ids = []
        if counts is None or len(counts) != len(shards):
            counts = tuple(Counter(tokenize(s.search_text)) for s in shards)
        for i, s in enumerate(shards):
            self.reader.shards[s.node_id] = s
            if lexical:
                self.reader.bm25.add_counts(s.node_id, counts[i])
            ids.append(s.node_id)
        self.reader.shards_by_path[note.path] = ids
        return shards

    def _uninstall(self, path: str, keep_vectors: bool = False) -> int:
        ids = self.reader.shards_by_path.pop(path, [])
        self.reader.notes.pop(path, None)
        for node_id in ids:
            self.reader.shards.pop(node_id, None)
            self.reader.bm25.remove(node_id)
            if not keep_vectors:
                self.reader.dense.remove(node_id)
        if keep_vectors:
            # Vectors are re-attached by hash after reinstall; stale ones must not linger.
            for node_id in ids:
                self.reader.dense.remove(node_id)
        return len(ids)


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
