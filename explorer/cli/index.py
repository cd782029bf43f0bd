"""`explorer index`, `explorer stats` and `explorer watch`: build, inspect and keep the index current."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from explorer.cli.render import display_path, print_json
from explorer.config import Settings
from explorer.text.durations import format_eta
from explorer.text.safe import safe_text

if TYPE_CHECKING:
    from explorer.index.backend import BatchReport


def cmd_index(args: argparse.Namespace, vault: Path, settings: Settings) -> int:
    """Build or refresh the index, embedding what changed, and report the counts.

    Exit 0 when the index is saved (with every vector, embeddings on); 1 when it could not be
    saved (disk full, read-only: the run kept it in memory) or shards were left without vectors.
    """
    from explorer.engine import open_index

    t0 = time.perf_counter()
    opening = _ProgressBar(sys.stderr.isatty())
    index, report = open_index(vault, settings, progress=opening.update, one_shot=True)
    opening.done()
    bar = _ProgressBar(sys.stderr.isatty())
    pending_before = len(index.pending())
    cached = index.stats().embedded
    embedded = 0

    def waiting(holder: str) -> None:
        # Another process embeds into this index folder: its vectors are read as they land.
        if holder:
            print(
                f"explorer: waiting for {safe_text(holder)} to finish embedding…", file=sys.stderr, flush=True
            )
        else:
            bar.done()

    if settings.index.embeddings:
        embedded = index.embed_pending(
            progress=lambda stage, done, total: bar.update(stage, done, total, eta=index.embed_eta()),
            waiting=waiting,
        )
        if bar:
            bar.done()
    run = index.embed_run
    if run is not None:
        cached += run.borrowed  # written by the process this one waited for: read, not embedded
    st = index.stats()
    out: dict[str, Any] = {
        "vault": str(vault),
        "notes": st.notes,
        "shards": st.shards,
        "added": len(report.added),
        "changed": len(report.changed),
        "removed": len(report.removed),
        "skipped": dict(sorted(index.skipped_files().items())),
        "shards_embedded": embedded,
        "shards_from_cache": cached,
        "waited_for": run.waited_for if run is not None else "",
        "shards_without_vectors": st.pending,
        "model": st.model_id if settings.index.embeddings else "off",
        "model_state": st.model_state,
        "runtime": st.runtime,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    if index.model_error:
        out["model_error"] = index.model_error
    warnings = index.warnings()
    out["warnings"] = {p: list(w) for p, w in warnings.items()}
    # The job is the saved index, with a vector for every shard when embeddings are on: short of
    # that the command says what is missing and exits 1 (a script must not take it as done).
    failed: list[str] = []
    not_saved = index.not_saved
    if not_saved:
        out["not_saved"] = not_saved
        failed.append(f"the index was not saved ({not_saved})")
    if settings.index.embeddings and st.pending:
        out["incomplete"] = f"{st.pending} shards have no vector ({index.model_error or st.model_state})"
        failed.append(f"{st.pending} shards have no vector: searches of them are BM25-only")
    index.close()
    status = 1 if failed else 0
    if failed and not not_saved:
        # A save failure was already reported on stderr by the index, in one line.
        print(f"explorer: {safe_text(failed[-1])}", file=sys.stderr)
    if args.json:
        print_json(out)
        return status
    print(f"Indexed {safe_text(display_path(vault))}")
    print(
        f"  notes   {out['notes']:>7}  ({out['added']} added, {out['changed']} changed, {out['removed']} removed)"
    )
    print(f"  shards  {out['shards']:>7}")
    print(
        f"  vectors {embedded:>7} embedded, {cached} from cache, {st.pending} missing  [{out['model']} {out['runtime']}, {st.model_state}]"
    )
    if pending_before and not settings.index.embeddings:
        print("  embeddings are off (index.embeddings = false)")
    if index.model_error:
        print(f"  model: {safe_text(index.model_error)}")
    print(f"  skipped {len(out['skipped']):>7}")
    for path, reason in out["skipped"].items():
        print(f"    {safe_text(path)}: {safe_text(reason)}")
    if warnings:
        print(f"  warned  {len(warnings):>7}  (indexed, with a problem)")
        for path, ws in warnings.items():
            for w in ws:
                print(f"    {safe_text(path)}: {safe_text(w)}")
    print(f"  time    {out['seconds']:>7.2f} s")
    if not_saved:
        print(f"  saved   {'no':>7}  ({safe_text(not_saved)})")
    return status


def cmd_stats(args: argparse.Namespace, vault: Path, settings: Settings) -> int:
    """Print index counts, model state and skipped files."""
    from explorer.config import cache_dir_for
    from explorer.engine import open_index
    from explorer.engine.coverage import coverage_report, stored_index_mtime

    stored = stored_index_mtime(cache_dir_for(vault, settings)) if getattr(args, "coverage", False) else None
    index, opened = open_index(vault, settings, one_shot=True)
    st = index.stats()
    out: dict[str, Any] = {
        "vault": str(vault),
        **st.counts(),
        "skipped": dict(sorted(index.skipped_files().items())),
        "ignored": dict(sorted(index.ignored_files().items())),
        "warnings": {p: list(w) for p, w in index.warnings().items()},
        "cache_dir": str(index.cache_dir),
        "backend": index.backend_name,
        **index.backend_info(),  # an engine's URI without credentials, its collection, this vault's name in it
    }
    if getattr(args, "coverage", False):
        out["coverage"] = coverage_report(index, opened, stored_before=stored if stored is not None else -1.0)
    index.close()
    if args.json:
        print_json(out)
    else:
        for key, value in out.items():
            if key in ("skipped", "ignored"):
                print(f"{key}: {len(value)}")
                for p, r in value.items():
                    print(f"  {safe_text(p)}: {safe_text(r)}")
            elif key == "coverage":
                _print_coverage(value)
            elif key == "warnings":
                print(f"indexed with warnings (truncated, frontmatter ignored): {len(value)}")
                for p, ws in value.items():
                    for w in ws:
                        print(f"  {safe_text(p)}: {safe_text(w)}")
            else:
                print(f"{key}: {safe_text(value)}")
    return 0


def _print_coverage(cov: dict) -> None:
    """The coverage report as text (every vault-derived string sanitised)."""
    ix = cov["indexed"]
    print(f"coverage: {ix['notes']} notes indexed, {ix['shards']} shards, {ix['vectors']} vectors")
    for title, key in (("not indexed (tried and left out)", "not_indexed"), ("ignored by rule", "ignored")):
        groups = cov[key]
        print(f"  {title}: {sum(g['count'] for g in groups.values())}")
        for reason, g in groups.items():
            print(
                f"    {g['count']:>6}  {safe_text(reason)}  e.g. {', '.join(safe_text(e) for e in g['examples'][:3])}"
            )
    sv = cov["shards_without_vectors"]
    print(f"  shards without vectors: {sv['count']} (model {safe_text(sv['model_state'])})")
    for n in sv["notes"]:
        print(f"    {n['shards']:>6}  {safe_text(n['path'])}")
    print("  largest notes:")
    for n in cov["largest_notes"]:
        print(f"    {n['chars']:>9} chars {n['shards']:>4} shards  {safe_text(n['path'])}")
    fr = cov["freshness"]
    changed = fr.get("changed_on_disk_since")
    print(
        f"  freshness: index version {fr['index_version']}, stored index written {fr['stored_index_written'] or 'never'}"
        + (
            f"; on open {changed['added']} added, {changed['changed']} changed, {changed['removed']} removed on disk"
            if changed
            else ""
        )
    )


class _ProgressBar:
    """Progress on stderr: a bar redrawn in place on a terminal, plain lines (every 10 % or 30 s) when piped.

    Both show counts, the rate and, once there is a rate, the time left: the one the caller
    passes (embedding: by text volume, since the shortest texts go first), else by count. Piped,
    a stage that ends within QUIET_S prints nothing (a short run's stderr stays its messages only).
    """

    QUIET_S = 2.0

    def __init__(self, tty: bool = True) -> None:
        self.tty = tty
        self._last = 0.0
        self._shown = False
        self._start: dict[str, tuple[float, int]] = {}
        self._printed_tenth = -1

    def line(self, stage: str, done: int, total: int, now: float, eta: float | None = None) -> str:
        """The progress text: stage, counts, percent, rate and ETA (`eta`, else from the count rate)."""
        t0, d0 = self._start.setdefault(stage, (now, done))
        pct = 100 * done / total if total else 100.0
        text = f"{stage} {done}/{total} ({pct:.0f}%)"
        elapsed = now - t0
        if elapsed > 0.5 and done > d0:
            rate = (done - d0) / elapsed
            left = eta if eta is not None else (total - done) / rate
            text += f" {rate:.1f}/s" + (f", {format_eta(left)} left" if done < total else "")
        return text

    def update(
        self, stage: str, done: int, total: int, now: float | None = None, eta: float | None = None
    ) -> None:
        """Report `done` of `total` items of `stage` (`now`: a monotonic time, for tests; `eta`: seconds left)."""
        now = time.monotonic() if now is None else now
        text = self.line(stage, done, total, now, eta)
        if not self.tty:
            tenth = int(10 * done / total) if total else 10
            if now - self._start[stage][0] < self.QUIET_S:
                return
            if tenth > self._printed_tenth or now - self._last >= 30:
                sys.stderr.write(text + "\n")
                sys.stderr.flush()
                self._printed_tenth = max(tenth, self._printed_tenth)
                self._last = now
            return
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        width = 24
        filled = int(width * done / total) if total else width
        # The carriage return and the erase-line are this bar's own: written past the sanitiser, the text is ours.
        err = getattr(sys.stderr, "raw", sys.stderr)
        err.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {text}\x1b[K")
        err.flush()
        self._shown = True

    def done(self) -> None:
        if self._shown:
            sys.stderr.write("\n")
            self._shown = False
        self._start.clear()
        self._printed_tenth = -1


def format_batch(report: BatchReport) -> str:
    """One log line for a batch: time, files, shards +/-, milliseconds."""
    files = len(report.added) + len(report.changed) + len(report.removed) + len(report.skipped)
    parts = []
    for label, items in (("added", report.added), ("changed", report.changed), ("removed", report.removed)):
        if items:
            parts.append(f"{len(items)} {label}")
    if report.skipped:
        parts.append(f"{len(report.skipped)} skipped")
    detail = ", ".join(parts)
    names = [*report.added, *report.changed, *report.removed, *report.skipped]
    sample = ""
    if names:
        sample = "  " + ", ".join(names[:3]) + (f" (+{len(names) - 3} more)" if len(names) > 3 else "")
    return (
        f"{time.strftime('%H:%M:%S')}  {files} file{'s' if files != 1 else ''}"
        f"{f' ({detail})' if detail else ''}  shards +{report.shards_added}/-{report.shards_removed}"
        f"  {report.ms:.0f} ms{sample}"
    )


def cmd_watch(vault: Path, settings: Settings) -> int:
    """`explorer watch`: keep the index of `vault` current headless, one log line per batch; Ctrl-C exits 0.

    Runs an engine session: the watcher, the embedding loop and the search server that answers
    one-shot `explorer search` of this vault while it runs.
    """
    import signal

    from explorer.engine import Session, SessionHooks
    from explorer.engine.watch import VAULT_MISSING, WATCHING

    def out(line: str) -> None:
        print(safe_text(line), flush=True)

    def err(line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')}  error: {safe_text(line)}", file=sys.stderr, flush=True)

    hooks = SessionHooks(
        on_batch=lambda r: out(format_batch(r)),
        on_watcher=lambda s: out(
            f"{time.strftime('%H:%M:%S')}  {s}" + (f" {vault}" if s in (WATCHING, VAULT_MISSING) else "")
        ),
        on_error=err,
        on_embedded=lambda n: out(f"{time.strftime('%H:%M:%S')}  embedded {n} shard{'s' if n != 1 else ''}"),
        on_model=lambda state, detail: (
            out(f"{time.strftime('%H:%M:%S')}  waiting for {detail} to finish embedding…")
            if state == "waiting"
            else None
        ),
    )
    session = Session(
        vault,
        settings,
        hooks=hooks,
        on_message=lambda m: print(f"explorer: {safe_text(m)}", file=sys.stderr, flush=True),
    )
    stop = threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        # The watcher's first batch opens the index (reconciling what changed while nothing watched).
        session.open(defer=True)
        session.start(watch=True, embed=settings.index.embeddings, serve=True)
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        session.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 0
