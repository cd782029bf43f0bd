"""Read a PDF's text page by page (pypdf) within size, page and time limits, as a note of pages.

The note's text is the pages' text one after another, each page after a marker line
(`PAGE_MARKER`); each page with text is a `Block` whose id is `page=N`, and the sharder makes
the page's node_id `file.pdf#page=N` from it (the form Obsidian opens). A PDF is never parsed as
Markdown: it has no headings, links or tags.

Limits: a file over `vault.max_pdf_bytes` is not opened; at most `MAX_PDF_PAGES` pages are
read, and no more once their text reaches `vault.max_note_bytes` characters (a note's limit;
one page keeps at most MAX_PAGE_CHARS); the time budget `PDF_SECONDS` is checked between pages, and the pages read by then
are kept (a warning says what was left out). One page is bounded by pypdf's own limits
(decompressed stream size, parsing work, page-tree entries): BENCHMARKS.md measures the worst
page of the hostile samples, and what reading every PDF in a child process would cost instead.
A file pypdf cannot open (broken, encrypted, not a PDF) is skipped with the reason.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from explorer.vault.model import Block, Note

if TYPE_CHECKING:
    from explorer.config import VaultSettings

#: Pages read from one PDF; the rest of a longer one is left out with a recorded reason.
MAX_PDF_PAGES = 2000
#: Seconds one PDF may take to read, checked between pages: the pages read by then are kept.
PDF_SECONDS = 20.0

#: The line before each page's text in a PDF note (shown in the note view; not part of any shard).
PAGE_MARKER = "── page {n} ──"

#: Characters of one page kept (a page of text is a few thousand; more is a generated or hostile file).
MAX_PAGE_CHARS = 200_000


def is_pdf(path: str) -> bool:
    """True for a vault path that names a PDF."""
    return path.lower().endswith(".pdf")


def pdf_title(path: str) -> str:
    """A PDF's title: its file name without `.pdf`."""
    name = path.rsplit("/", 1)[-1]
    return name[:-4] if is_pdf(name) else name


def read_pdf(
    abspath: Path, settings: VaultSettings, clock: Callable[[], float] = time.monotonic
) -> tuple[list[str] | None, str, list[str]]:
    """The text of each page: (pages, '', warnings) or (None, the reason it is skipped, [])."""
    try:
        size = abspath.stat().st_size
    except OSError as exc:
        return None, f"unreadable: {exc.strerror or exc}", []
    if size > settings.max_pdf_bytes:
        return (
            None,
            (
                f"too large: {size / 1e6:.1f} MB PDF (limit {settings.max_pdf_bytes / 1e6:.1f} MB, "
                "setting vault.max_pdf_bytes)"
            ),
            [],
        )
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
            pages: list[str] = []
            warnings: list[str] = []
            budget, max_pages = PDF_SECONDS, MAX_PDF_PAGES
            failed = ""
            chars = 0
            for i in range(min(total, max_pages)):
                if i and clock() - started > budget:  # the first page is always read
                    warnings.append(
                        f"truncated: only the first {i:,} of {total:,} pages were read within "
                        f"{budget:g} s (the limit per PDF)"
                    )
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
                chars += len(pages[-1])
                if chars > settings.max_note_bytes and i + 1 < total:
                    warnings.append(
                        f"truncated: only the first {i + 1:,} of {total:,} pages are indexed: their text "
                        f"passed {settings.max_note_bytes:,} characters "
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
    if not pages:
        return None, "PDF without pages", []
    if not any(p.strip() for p in pages):
        if failed:  # nothing read, and not for want of text: a damaged or hostile file
            return None, f"broken PDF: {failed}", []
        warnings.append("no text layer: the pages hold no text (a scan needs OCR first)")
    return pages, "", warnings


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
