"""Read a PDF's text page by page (pypdf) within size, page and time limits, as a note of pages.

The note's text is the pages' text one after another, each page after a marker line
(`PAGE_MARKER`); each page with text is a `Block` whose id is `page=N`, and the sharder makes
the page's node_id `file.pdf#page=N` from it (the form Obsidian opens). A PDF is never parsed as
Markdown: it has no headings, links or tags.

Limits: a file over `vault.max_pdf_bytes` is not opened; at most `MAX_PDF_PAGES` pages are
read, and no more once their text reaches `vault.max_note_bytes` characters (a note's limit;
one page keeps at most MAX_PAGE_CHARS). The time budget `PDF_SECONDS` holds inside a page too:
pypdf cannot be interrupted, and one small file can keep it busy for minutes (a page that draws a
form thousands of times, a content stream of millions of operators), so PDFs are read by one
reading process (`PdfProcess`, started once and kept for the next PDF) that sends each page as
it is read. The process checks the budget between pages and stops there; a page still being read
`PAGE_GRACE_S` past the budget is abandoned: the process is killed, the pages read by then are
kept (a warning says what was left out), and a PDF with none is skipped with the reason. The
process also holds an address-space limit (`READER_MEMORY_BYTES`). Where no process can be
started, the PDF is read in this process, checked between pages only.
A file pypdf cannot open (broken, encrypted, not a PDF) is skipped with the reason.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from explorer.vault.model import Block, Note

if TYPE_CHECKING:
    from explorer.config import VaultSettings

#: Pages read from one PDF; the rest of a longer one is left out with a recorded reason.
MAX_PDF_PAGES = 2000
#: Seconds one PDF may take to read: checked between pages (the pages read by then are kept), and a
#: page still being read `PAGE_GRACE_S` later is abandoned.
PDF_SECONDS = 20.0
#: Seconds a page may run past `PDF_SECONDS` before its reading process is killed (the process's own
#: check between pages stops a file of many quick pages first, with the same warning).
PAGE_GRACE_S = 1.0
#: Seconds the reading process may take to start (Python and pypdf imports) before PDFs are read in
#: this process instead (checked between pages only).
START_SECONDS = 60.0
#: Seconds the reading process holds pages back before it sends them (see `_serve`).
SEND_EVERY_S = 0.2
#: The reading process's address-space limit (pypdf's worst page measured, a Flate bomb stopped by its
#: own limit, peaks at 181 MB; BENCHMARKS.md#pdfs).
READER_MEMORY_BYTES = 2 << 30

#: The line before each page's text in a PDF note (shown in the note view; not part of any shard).
PAGE_MARKER = "── page {n} ──"

#: Characters of one page kept (a page of text is a few thousand; more is a generated or hostile file).
MAX_PAGE_CHARS = 200_000

Read = tuple[list[str] | None, str, list[str]]
"""(pages, '', warnings), or (None, the reason the file is skipped, [])."""


@dataclass(frozen=True, slots=True)
class PdfLimits:
    """What reading one PDF may cost (sent to the reading process with each file)."""

    max_pdf_bytes: int
    """Larger files are not opened (`vault.max_pdf_bytes`)."""
    max_note_bytes: int
    """Characters of text read at most, give or take the page that passes it (`vault.max_note_bytes`)."""
    max_pages: int
    """Pages read at most (`MAX_PDF_PAGES`)."""
    seconds: float
    """The time budget of the file (`PDF_SECONDS`)."""


def is_pdf(path: str) -> bool:
    """True for a vault path that names a PDF."""
    return path.lower().endswith(".pdf")


def pdf_title(path: str) -> str:
    """A PDF's title: its file name without `.pdf`."""
    name = path.rsplit("/", 1)[-1]
    return name[:-4] if is_pdf(name) else name


def pdf_limits(settings: VaultSettings) -> PdfLimits:
    """The limits of one PDF under `settings` (the module's constants read now: a test may lower them)."""
    return PdfLimits(settings.max_pdf_bytes, settings.max_note_bytes, MAX_PDF_PAGES, PDF_SECONDS)


def read_pdf(abspath: Path, settings: VaultSettings, clock: Callable[[], float] = time.monotonic) -> Read:
    """The text of each page: (pages, '', warnings) or (None, the reason it is skipped, []).

    Read by the reading process (`PdfProcess`) within the time budget; in this process (`clock`
    checked between pages) where that process cannot start.
    """
    limits = pdf_limits(settings)
    reason = _size_reason(abspath, limits)
    if reason:
        return None, reason, []
    got = _READER.read(abspath, limits)
    if got is not None:
        return got
    return read_pdf_here(abspath, limits, clock)


def start_pdf_reader() -> None:
    """Start the reading process now, without waiting (its imports overlap the work before the first PDF)."""
    _READER.start()


def _size_reason(abspath: Path, limits: PdfLimits) -> str:
    try:
        size = abspath.stat().st_size
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    if size > limits.max_pdf_bytes:
        return (
            f"too large: {size / 1e6:.1f} MB PDF (limit {limits.max_pdf_bytes / 1e6:.1f} MB, "
            "setting vault.max_pdf_bytes)"
        )
    return ""


def read_pdf_here(
    abspath: Path,
    limits: PdfLimits,
    clock: Callable[[], float] = time.monotonic,
    on_total: Callable[[int], None] | None = None,
    on_page: Callable[[str], None] | None = None,
) -> Read:
    """`read_pdf` in this process: the time budget checked between pages only. `on_total(pages)` is
    called once the page count is known, `on_page(text)` with each page's text as it is read."""
    reason = _size_reason(abspath, limits)
    if reason:
        return None, reason, []
    try:
        from pypdf import PdfReader
        from pypdf.errors import FileNotDecryptedError
    except ImportError:
        return None, "PDF not read: the pypdf package is not installed", []
    logging.getLogger("pypdf").setLevel(
        logging.CRITICAL
    )  # its log lines about damaged files are ours to report (and would draw over the app)
    started = clock()
    try:
        with open(abspath, "rb") as fh:
            reader = PdfReader(fh)
            if reader.is_encrypted:
                try:
                    ok = bool(reader.decrypt(""))
                except Exception:  # noqa: BLE001 - an unknown or broken encryption scheme
                    ok = False
                if not ok:
                    return None, "encrypted PDF (needs a password)", []
            total = len(reader.pages)
            if on_total is not None:
                on_total(total)
            pages: list[str] = []
            warnings: list[str] = []
            budget, max_pages = limits.seconds, limits.max_pages
            failed = ""
            chars = 0
            for i in range(min(total, max_pages)):
                if i and clock() - started > budget:  # the first page is always read
                    warnings.append(_budget_warning(i, total, budget))
                    break
                try:
                    text = reader.pages[i].extract_text() or ""
                except (FileNotDecryptedError, MemoryError, RecursionError):
                    raise
                except Exception as exc:  # noqa: BLE001 - one bad page: the others are still read
                    text = ""
                    failed = failed or f"page {i + 1} not read: {_first_line(exc)}"
                    if len(warnings) < 5:
                        warnings.append(f"page {i + 1} not read: {_first_line(exc)}")
                if len(text) > MAX_PAGE_CHARS and len(warnings) < 5:
                    warnings.append(
                        f"page {i + 1} cut: only its first {MAX_PAGE_CHARS:,} of {len(text):,} characters "
                        "are indexed"
                    )
                pages.append(_clean(text))
                if on_page is not None:
                    on_page(pages[-1])
                chars += len(pages[-1])
                if chars > limits.max_note_bytes and i + 1 < total:
                    warnings.append(
                        f"truncated: only the first {i + 1:,} of {total:,} pages are indexed: their text "
                        f"passed {limits.max_note_bytes:,} characters "
                        "(setting vault.max_note_bytes)"
                    )
                    break
            else:
                if total > max_pages:
                    warnings.append(
                        f"truncated: only the first {max_pages:,} of {total:,} pages are "
                        "indexed (the limit per PDF)"
                    )
    except FileNotDecryptedError:
        return None, "encrypted PDF (needs a password)", []
    except PermissionError:
        return None, "unreadable: permission denied", []
    except OSError as exc:
        return None, f"unreadable: {exc.strerror or exc}", []
    except MemoryError:
        return None, "broken PDF: out of memory while reading it", []
    except RecursionError:
        return None, "broken PDF: nested too deeply", []
    except Exception as exc:  # noqa: BLE001 - pypdf raises many kinds (PdfReadError and others) on damaged input
        return None, f"broken PDF: {_first_line(exc)}", []
    return _finished(pages, warnings, failed)


def _finished(pages: list[str], warnings: list[str], failed: str = "") -> Read:
    """The result of the pages read: a file with no page, or no text and a page that failed, is skipped."""
    if not pages:
        return None, "PDF without pages", []
    if not any(p.strip() for p in pages):
        if failed:  # nothing read, and not for want of text: a damaged or hostile file
            return None, f"broken PDF: {failed}", []
        warnings.append("no text layer: the pages hold no text (a scan needs OCR first)")
    return pages, "", warnings


def _budget_warning(read: int, total: int, budget: float) -> str:
    return (
        f"truncated: only the first {read:,} of {total:,} pages were read within "
        f"{budget:g} s (the limit per PDF)"
    )


# -- the reading process -------------------------------------------------------------------------
class PdfProcess:
    """One child process that reads PDFs for this process, one at a time, each within its time budget.

    Started on first use (or early by `start`) and kept for the next PDF: its start (Python and
    pypdf, about half a second) is paid once, a PDF then costs what reading it costs plus a pipe
    (BENCHMARKS.md#pdfs). It runs in its own session (a Ctrl-C in the terminal is this process's to
    handle), ignores SIGINT, ends when this process closes its stdin, and arms an alarm with each
    file, so an orphan never reads on. A request is a JSON line on its stdin; it answers with JSON
    lines: the page count, each page's text as it is read, then the end (`_serve`).
    """

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._ready = False
        self._buffer = b""
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._failed = False
        """The process could not start: PDFs are read in this process from then on."""

    def start(self) -> None:
        """Spawn the process unless it runs (or could not start); does not wait for it."""
        with self._start_lock:
            if self._failed or (self._proc is not None and self._proc.poll() is None):
                return
            root = str(Path(__file__).resolve().parents[2])
            code = (
                f"import sys; sys.path.insert(0, {root!r}); from explorer.vault.pdf import _serve; _serve()"
            )
            try:
                self._proc = subprocess.Popen(
                    [sys.executable, "-c", code],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            except OSError:
                self._failed, self._proc = True, None
                return
            self._ready, self._buffer = False, b""

    def read(self, abspath: Path, limits: PdfLimits) -> Read | None:
        """The PDF read within `limits.seconds` (+ `PAGE_GRACE_S`); None when no reading process can serve."""
        with self._lock:
            for _attempt in range(2):
                proc = self._running()
                if proc is None:
                    return None
                request = json.dumps({"path": str(abspath), "limits": asdict(limits)}) + "\n"
                try:
                    assert proc.stdin is not None
                    proc.stdin.write(request.encode("utf-8", "surrogatepass"))
                    proc.stdin.flush()
                except OSError:  # it had ended (it is started again once)
                    self.close()
                    continue
                return self._answer(limits)
            return None

    def _running(self) -> subprocess.Popen[bytes] | None:
        """The process, started if needed and ready (it has said so), or None."""
        self.start()
        proc = self._proc
        if proc is None:
            return None
        if not self._ready:
            message = self._next(time.monotonic() + START_SECONDS)
            if not isinstance(message, dict) or not message.get("ready"):
                self.close()
                self._failed = True
                return None
            self._ready = True
        return proc

    def _answer(self, limits: PdfLimits) -> Read:
        deadline = time.monotonic() + limits.seconds + PAGE_GRACE_S
        pages: list[str] = []
        total = 0
        while True:
            message = self._next(deadline)
            if isinstance(message, dict):
                if "total" in message:
                    total = int(message["total"])
                elif "page" in message:
                    pages.append(str(message["page"]))
                elif "end" in message:
                    end = message["end"]
                    if not end.get("ok"):
                        return None, str(end.get("reason", "broken PDF")), []
                    return pages, "", [str(w) for w in end.get("warnings", ())]
                continue
            # The deadline passed (None) or the process ended (a string saying how): what was read is kept.
            why = message or f"was still being read after {limits.seconds:g} s (the limit per PDF)"
            self.close()
            at = len(pages) + 1
            if any(p.strip() for p in pages):
                warning = (
                    _budget_warning(len(pages), max(total, at), limits.seconds)
                    if message is None
                    else f"truncated: page {at:,} of {max(total, at):,} {why}; the pages before it are indexed"
                )
                return pages, "", [warning]
            return (
                None,
                (f"too slow: page {at:,} {why}" if message is None else f"broken PDF: page {at:,} {why}"),
                [],
            )

    def _next(self, deadline: float) -> dict[str, Any] | str | None:
        """The next message: a dict, None when `deadline` passed, or a line saying how the process ended."""
        proc = self._proc
        if proc is None or proc.stdout is None:
            return "stopped its reader"
        fd = proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                code = proc.wait()
                why = (
                    f"signal {signal.Signals(-code).name}"
                    if code < 0 and -code in signal.valid_signals()
                    else f"exit {code}"
                )
                return f"stopped its reader ({why})"
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            message = json.loads(line)
        except ValueError:
            return "stopped its reader (an unreadable answer)"
        return message if isinstance(message, dict) else "stopped its reader (an unreadable answer)"

    def close(self) -> None:
        """End the process (the next PDF starts another)."""
        with self._start_lock:
            proc, self._proc, self._ready, self._buffer = self._proc, None, False, b""
        if proc is None:
            return
        try:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


_READER = PdfProcess()
atexit.register(_READER.close)


def _serve() -> None:
    """The reading process: one JSON request a line on stdin (a path and its `PdfLimits`), JSON lines back."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything else printed goes where stderr goes (nowhere), never into the answers
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = READER_MEMORY_BYTES if soft == resource.RLIM_INFINITY else min(soft, READER_MEMORY_BYTES)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, ValueError, OSError):
        pass
    try:
        import pypdf  # noqa: F401 - imported before the first request: its cost is not a PDF's

        logging.getLogger("pypdf").setLevel(logging.CRITICAL)
    except ImportError:
        pass

    pending: list[bytes] = []
    lock = threading.Lock()
    held = threading.Event()

    def flush() -> None:
        with lock:
            if pending:
                out.write(b"".join(pending))
                out.flush()
                pending.clear()
            held.clear()

    def send(message: dict[str, Any], now: bool = True) -> None:
        with lock:
            pending.append(json.dumps(message, ensure_ascii=True).encode("ascii") + b"\n")
            held.set()
        if now:
            flush()

    def flusher() -> None:
        # Pages go out every SEND_EVERY_S (and at the end), not one by one: a wake-up of the reading
        # side per page cost a small PDF 10 ms on a loaded machine. A page still held at a kill is lost.
        while True:
            held.wait()
            time.sleep(SEND_EVERY_S)
            flush()

    threading.Thread(target=flusher, name="explorer-pdf-send", daemon=True).start()
    send({"ready": True})
    for line in sys.stdin.buffer:
        request = json.loads(line.decode("utf-8", "surrogatepass"))
        limits = PdfLimits(**request["limits"])
        signal.alarm(int(limits.seconds + PAGE_GRACE_S) + 10)  # an orphan never reads on
        pages, reason, warnings = read_pdf_here(
            Path(request["path"]),
            limits,
            on_total=lambda n: send({"total": n}, now=False),
            on_page=lambda text: send({"page": text}, now=False),
        )
        signal.alarm(0)
        send({"end": {"ok": pages is not None, "reason": reason, "warnings": warnings}})


def pdf_note(
    path: str, pages: list[str], source_type: str = "note", warnings: list[str] | None = None
) -> Note:
    """A note of a PDF's pages: each page's text after its marker line, each non-empty page a `page=N` block."""
    parts: list[str] = []
    blocks: list[Block] = []
    pos = 0
    for n, text in enumerate(pages, start=1):
        marker = PAGE_MARKER.format(n=n) + "\n"
        if parts:
            marker = "\n" + marker
        parts.append(marker)
        pos += len(marker)
        body = text.strip()
        if body:
            blocks.append(Block(f"page={n}", pos, pos + len(body)))
            parts.append(body + "\n")
            pos += len(body) + 1
    return Note(
        path=path,
        text="".join(parts),
        title=pdf_title(path),
        frontmatter={},
        body_start=0,
        headings=(),
        links=(),
        tags=(),
        blocks=tuple(blocks),
        source_type=source_type,
        metadata={},
        warnings=tuple(warnings or ()),
    )


def _clean(text: str) -> str:
    """A page's text with line ends made `\\n`, NULs dropped, and at most MAX_PAGE_CHARS kept."""
    if len(text) > MAX_PAGE_CHARS:
        text = text[:MAX_PAGE_CHARS]
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return " ".join(text.split())[:160]
