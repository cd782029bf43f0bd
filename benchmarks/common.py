"""Helpers shared by the quality and speed benchmarks: environment, statistics, tables, machine facts."""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import sys
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "bench-out"


def offline_environment() -> None:
    """Make every run offline and quiet, before any model library is imported.

    No LLM endpoint is reachable (the offline term writer and analyser are measured), model
    hubs are never contacted, and OpenMP threads wait passively so they do not spin against
    the BLAS threads of the dense search.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        os.environ.pop(name, None)
    for name in [n for n in os.environ if n.startswith("EXPLORER_LLM_")]:
        os.environ.pop(name, None)


def percentile(values: Sequence[float], pct: float) -> float:
    """The `pct` percentile (0-100) of `values`, linear between closest ranks; nan when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    pos = (len(ordered) - 1) * pct / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo))


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median, p95, mean and count of a list of timings."""
    if not values:
        return {"n": 0, "median": float("nan"), "p95": float("nan"), "mean": float("nan")}
    return {
        "n": len(values),
        "median": round(statistics.median(values), 3),
        "p95": round(percentile(values, 95), 3),
        "mean": round(statistics.fmean(values), 3),
    }


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB.

    Read from /proc/self/status (VmHWM), which starts afresh at exec; `getrusage`'s ru_maxrss
    is kept across fork + exec on Linux, so a child would report its parent's peak.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def current_rss_mb() -> float:
    """Current resident set size of this process, in MB (Linux /proc; nan elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            pages = int(fh.read().split()[1])
        return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except (OSError, ValueError, IndexError):
        return float("nan")


def pct(x: float | None) -> str:
    """A rate as a percentage with one decimal, "-" when there is none."""
    return "-" if x is None else f"{100 * x:.1f} %"


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub markdown table; floats are printed with 3 decimals unless already strings."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return "-" if value != value else f"{value:.3f}"
        return "-" if value is None else str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    """CPU, cores, memory, Python and the versions of the libraries that matter for the figures."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gb = float("nan")
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    mem_gb = round(int(line.split()[1]) / 2**20, 1)
                    break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 0
    versions = {}
    for pkg in (
        "numpy",
        "onnxruntime",
        "tokenizers",
        "torch",
        "sentence-transformers",
        "rank-bm25",
        "ranx",
        "PyStemmer",
        "markdown-it-py",
    ):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = "not installed"
    return {
        "cpu": cpu,
        "cores": cores,
        "memory_gb": mem_gb,
        "gpu": "none",
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else [],
        "versions": versions,
    }


def write_json(path: Path, data: Any) -> None:
    """Write `data` as indented JSON, creating the folder (write to temp, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def log(message: str) -> None:
    """Progress line on stderr (kept off stdout, which carries the tables)."""
    print(message, file=sys.stderr, flush=True)


def start_milvus_server(data: Path, port: int | None = None, wait: float = 60.0) -> tuple[Any, str]:
    """A `milvus-lite server` process (the venv's) on `data` at 127.0.0.1:`port` (a free port when
    None): (process, URI), once the port answers. RuntimeError when it does not within `wait` s."""
    import socket
    import subprocess
    import time

    if port is None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [
            *(str(Path(sys.executable).with_name("milvus-lite")), "server", "--data-dir", str(data)),
            *("--host", "127.0.0.1", "--port", str(port)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    end = time.monotonic() + wait
    while time.monotonic() < end:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"http://127.0.0.1:{port}"
        time.sleep(0.1)
    raise RuntimeError(f"milvus-lite server on {data} did not answer within {wait:.0f} s")
