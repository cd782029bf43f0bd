"""Index coverage: what of the vault folder is indexed, what is not and why, vectors missing, the largest notes, freshness."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from explorer.config import ALWAYS_IGNORED_DIRS
from explorer.vault.scan import ignore_reason, is_note_name, is_temp_file

if TYPE_CHECKING:
    from explorer.config import VaultSettings
    from explorer.index.backend import BatchReport, IndexBackend

#: Example paths kept per reason.
EXAMPLES = 5


def coverage_report(
    index: IndexBackend,
    opened: BatchReport | None = None,
    largest: int = 10,
    stored_before: float | None = None,
) -> dict[str, Any]:
    """A JSON-ready account of the index's coverage of its vault.

    Args:
        index: An opened index.
        opened: The BatchReport of the open that brought the stored index up to date (how stale
            it was), when known.
        largest: How many of the largest notes to list.
        stored_before: `stored_index_mtime(cache_dir)` taken before the open (which rewrites it);
            a negative value means there was no stored index.

    Keys: `indexed` (notes, shards, vectors), `not_indexed` (files the indexer tried and left out,
    grouped by reason), `ignored` (files under the vault that are not notes by rule: not Markdown,
    hidden or temporary, in an always-ignored or hidden folder, matching an ignore pattern),
    `shards_without_vectors` (count, the notes holding them, the model state), `largest_notes`
    and `freshness` (index version, when the stored index was last written, and what the open
    found changed on disk).
    """
    settings = index.settings.vault
    root = Path(index.root)
    with index.snapshot() as snap:
        snap.prefetch(snap.notes)  # every note's text in one read
        notes = {p: (len(n.text), len(snap.shard_ids(p))) for p, n in snap.notes.items()}
        skipped = index.skipped_files()
        pending = index.pending()
        st = index.stats()
    ignored: dict[str, dict[str, Any]] = {}

    def add(group: dict[str, dict[str, Any]], reason: str, rel: str, n: int = 1) -> None:
        slot = group.setdefault(reason, {"count": 0, "examples": []})
        slot["count"] += n
        if len(slot["examples"]) < EXAMPLES:
            slot["examples"].append(rel)

    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        keep = []
        for d in sorted(dirnames):
            rel = f"{rel_dir}/{d}" if rel_dir else d
            if d == ".explorer":
                continue  # the index itself
            reason = (
                "always-ignored folder"
                if d in ALWAYS_IGNORED_DIRS
                else "hidden folder"
                if d.startswith(".")
                else "ignore pattern"
                if _by_rule(rel, settings, True)
                else ""
            )
            if reason:
                add(ignored, reason, rel + "/", _count_files(Path(dirpath) / d))
            else:
                keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if rel in notes or rel in skipped:
                continue
            if name.startswith(".") or is_temp_file(name):
                add(ignored, "hidden or temporary file", rel)
            elif not is_note_name(name, settings):
                if name == "metadata.json" and f"{rel_dir}/context.md" in notes:
                    continue  # a turn's sidecar, indexed with its note
                ext = os.path.splitext(name)[1].lower() or "(no extension)"
                off = {".pdf": "vault.pdfs", ".canvas": "vault.canvases"}.get(ext)
                add(
                    ignored,
                    f"{ext} files not read (setting {off} is off)" if off else f"not Markdown ({ext})",
                    rel,
                )
            elif _by_rule(rel, settings, False):
                add(ignored, "ignore pattern", rel)
            else:
                add(ignored, "not indexed yet (changed since the index was opened?)", rel)

    not_indexed: dict[str, dict[str, Any]] = {}
    for rel, reason in sorted(skipped.items()):
        add(not_indexed, reason.split(":", 1)[0].strip() or reason, rel)

    by_note: dict[str, int] = {}
    for shard in pending:
        by_note[shard.path] = by_note.get(shard.path, 0) + 1
    top = sorted(notes.items(), key=lambda kv: (-kv[1][0], kv[0]))[:largest]
    return {
        "indexed": {"notes": st.notes, "shards": st.shards, "vectors": st.embedded},
        "not_indexed": dict(sorted(not_indexed.items(), key=lambda kv: -kv[1]["count"])),
        "ignored": dict(sorted(ignored.items(), key=lambda kv: -kv[1]["count"])),
        "shards_without_vectors": {
            "count": st.pending,
            "model_state": st.model_state,
            "notes": [
                {"path": p, "shards": n}
                for p, n in sorted(by_note.items(), key=lambda kv: (-kv[1], kv[0]))[:largest]
            ],
        },
        "largest_notes": [{"path": p, "chars": c, "shards": n} for p, (c, n) in top],
        "freshness": _freshness(index, opened, stored_before),
    }


def _count_files(folder: Path) -> int:
    total = 0
    for _dirpath, _dirnames, filenames in os.walk(folder, followlinks=False):
        total += len(filenames)
    return total


def stored_index_mtime(cache_dir: Path) -> float | None:
    """When the stored index in `cache_dir` was last written (newest file), None when there is none."""
    try:
        return max((p.stat().st_mtime for p in Path(cache_dir).iterdir() if p.is_file()), default=None)
    except OSError:
        return None


def _freshness(
    index: IndexBackend, opened: BatchReport | None, stored_before: float | None
) -> dict[str, Any]:
    out: dict[str, Any] = {"index_version": index.version}
    newest = stored_before if stored_before is not None else stored_index_mtime(Path(index.cache_dir))
    out["stored_index_written"] = (
        datetime.fromtimestamp(newest, UTC).isoformat(timespec="seconds")
        if newest is not None and newest >= 0
        else None
    )
    if opened is not None:
        out["changed_on_disk_since"] = {
            "added": len(opened.added),
            "changed": len(opened.changed),
            "removed": len(opened.removed),
        }
    return out


def _by_rule(rel: str, settings: VaultSettings, is_dir: bool) -> bool:
    """True when an ignore rule (defaults plus `vault.ignore`, gitignore syntax) leaves `rel` out."""
    return (ignore_reason(rel, settings, is_dir) or "").startswith("ignore rule")
