"""PDF text extraction: pypdf against pdfminer.six on well-formed and hostile files (speed, memory, outcome).

Each (library, file) runs in a child process of its own with a wall-clock limit, so a hang or a
crash of one library on one file is measured, not suffered. Reported per case: the outcome
(pages and characters read, or the error), seconds of the extraction itself and of the whole
child (start and imports included; medians of `--repeat` runs) and the child's peak memory.
`explorer` is `explorer.vault.pdf.read_pdf` (pypdf with the default page and time limits). Also measured: what running the extraction in a child process costs on a
small well-formed file, against the same extraction in the calling process.

    nice -n 10 python -m benchmarks.pdf_libraries [--repeat 3] [--timeout 60] [--pdf more.pdf ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_REPO))

from tests import pdfs  # noqa: E402

_CHILD = r"""
import json, sys, time
lib, path = sys.argv[1], sys.argv[2]
out = {"pages": 0, "chars": 0, "error": ""}
if lib == "explorer":
    from pathlib import Path
    from explorer.config import Settings
    from explorer.vault.pdf import read_pdf
    import pypdf
elif lib == "pypdf":
    from pypdf import PdfReader
else:
    from io import StringIO
    from pdfminer.converter import TextConverter
    from pdfminer.layout import LAParams
    from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
    from pdfminer.pdfpage import PDFPage
t0 = time.perf_counter()
try:
    if lib == "explorer":
        pages, reason, warnings = read_pdf(Path(path), Settings().vault)
        out["pages"] = len(pages or [])
        out["chars"] = sum(len(p) for p in pages or [])
        out["error"] = reason or "; ".join(warnings)
    elif lib == "pypdf":
        reader = PdfReader(path)
        if reader.is_encrypted:
            reader.decrypt("")
        for page in reader.pages:
            out["chars"] += len(page.extract_text() or "")
            out["pages"] += 1
    else:
        rm = PDFResourceManager()
        with open(path, "rb") as fh:
            for page in PDFPage.get_pages(fh):
                buf = StringIO()
                dev = TextConverter(rm, buf, laparams=LAParams())
                PDFPageInterpreter(rm, dev).process_page(page)
                out["chars"] += len(buf.getvalue())
                out["pages"] += 1
except BaseException as exc:
    out["error"] = (type(exc).__name__ + ": " + str(exc))[:120]
out["s"] = time.perf_counter() - t0
with open("/proc/self/status") as fh:  # the child's own peak (ru_maxrss would carry the parent's over exec)
    out["rss_mb"] = next((int(l.split()[1]) / 1024 for l in fh if l.startswith("VmHWM")), float("nan"))
print(json.dumps(out))
"""


def run_child(lib: str, path: Path, timeout: float) -> dict:
    """One extraction in a fresh child process; a timeout or a crash is an outcome too."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, lib, str(path)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONPATH": str(_REPO)},
        )
    except subprocess.TimeoutExpired:
        return {
            "pages": 0,
            "chars": 0,
            "error": f"timeout after {timeout:g} s",
            "s": timeout,
            "rss_mb": float("nan"),
            "wall": time.perf_counter() - t0,
        }
    try:
        out = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        out = {
            "pages": 0,
            "chars": 0,
            "error": f"child died (exit {proc.returncode}): {proc.stderr.strip()[-100:]}",
            "s": float("nan"),
            "rss_mb": float("nan"),
        }
    out["wall"] = time.perf_counter() - t0
    return out


def samples(folder: Path, extra: list[Path]) -> dict[str, Path]:
    """The generated cases written to `folder`, plus any given files."""
    made = {
        "good-3-pages": pdfs.text_pdf(
            [f"Page {i} about hamster cages and sourdough starters. " * 20 for i in range(3)]
        ),
        "good-200-pages-flate": pdfs.text_pdf(
            [f"Page {i} text line\n" * 40 for i in range(200)], compress=True
        ),
        **{name: make() for name, make in pdfs.HOSTILE.items()},
    }
    out = {}
    for name, data in made.items():
        p = folder / f"{name}.pdf"
        p.write_bytes(data)
        out[name] = p
    for p in extra:
        out[p.name] = p
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--pdf", type=Path, nargs="*", default=[])
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = samples(Path(tmp), args.pdf)
        for name, path in cases.items():
            for lib in ("pypdf", "pdfminer", "explorer"):
                runs = [run_child(lib, path, args.timeout) for _ in range(args.repeat)]
                last = runs[-1]
                row = {
                    "case": name,
                    "lib": lib,
                    "bytes": path.stat().st_size,
                    "pages": last["pages"],
                    "chars": last["chars"],
                    "error": last["error"],
                    "extract_s": statistics.median(r["s"] for r in runs),
                    "wall_s": statistics.median(r["wall"] for r in runs),
                    "rss_mb": max(r["rss_mb"] for r in runs),
                }
                rows.append(row)
                print(
                    f"{name:22} {lib:9} {row['bytes']:>10,} B  pages {row['pages']:>7}  chars {row['chars']:>8}  "
                    f"extract {row['extract_s']:7.3f} s  wall {row['wall_s']:7.3f} s  rss {row['rss_mb']:7.1f} MB  "
                    f"{row['error'][:70]}",
                    flush=True,
                )
        rows.extend(_child_cost(cases["good-3-pages"], args.repeat * 3))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


def _child_cost(path: Path, repeat: int) -> list[dict]:
    """Paired: pypdf on one small file in this process vs in a fresh child (start + import + extract)."""
    from pypdf import PdfReader

    inproc, child = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        reader = PdfReader(path)
        for page in reader.pages:
            page.extract_text()
        inproc.append(time.perf_counter() - t0)
        child.append(run_child("pypdf", path, 60)["wall"])
    a, b = statistics.median(inproc), statistics.median(child)
    print(
        f"child-process cost, 3-page file: in process {a * 1000:.1f} ms, in a child {b * 1000:.1f} ms (medians of {repeat})"
    )
    return [{"case": "child-cost", "inproc_ms": a * 1000, "child_ms": b * 1000}]


if __name__ == "__main__":
    raise SystemExit(main())
