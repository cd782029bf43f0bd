"""Golden CLI outputs on sample_vault: the cases, how to run them, and how to rewrite the stored files.

`tests/test_golden.py` reruns every case through the CLI entry point and compares its output
with `tests/golden/<name>.txt`: exactly, except floats, which compare at the tolerance stated in
`tests/golden_compare.py` (another CPU's vector kernels move their last digits). When a change is meant to alter search, find or
context output, regenerate the files and say why in the commit message:

    python -m tests.golden_update

(from the repository root, with the same environment the tests use). Timings are removed from
the JSON, and the temporary vault path is written as `<VAULT>`, so the files do not depend on the
machine or the run.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SAMPLE_VAULT = REPO / "sample_vault"
GOLDEN_DIR = Path(__file__).resolve().parent / "golden"

# Reranking has time budgets: give it room so that a busy machine cannot change an order.
_RERANK_ROOM = [
    "--set",
    "experimental.rerank_pass1_timeout_ms=600000",
    "--set",
    "experimental.rerank_pass2_timeout_ms=600000",
]

CASES: dict[str, list[str]] = {
    # search --json: plain queries
    "search_plain_hamster": ["search", "hamster cage size", "--json"],
    "search_plain_coffee": ["search", "how do I dial in espresso", "--json"],
    "search_plain_rust": ["search", "rust ownership borrowing", "--json"],
    "search_plain_sleep": ["search", "sleep better at night", "--json", "-k", "5"],
    "search_plain_bike_chain": ["search", "bicycle chain rust prevention", "--json"],
    "search_plain_nomatch": ["search", "zzqx blorfing", "--json"],
    # operators and filters
    "search_op_tag": ["search", "tag:pets", "bedding", "--json"],
    "search_op_path": ["search", "path:Recipes", "soup", "--json"],
    "search_op_file": ["search", "file:kyoto", "temple", "--json"],
    "search_op_section": ["search", "section:Diet", "hamster", "--json"],
    "search_op_exclude": ["search", "hamster -cage", "--json"],
    "search_op_reference": ["search", "[[syrian-hamster-care]]", "bedding", "--json"],
    "search_phrase": ["search", '"compound interest"', "--json"],
    "search_phrase_mixed": ["search", '"great wall"', "beijing", "--json"],
    # CJK and other scripts
    "search_cjk_wall": ["search", "长城", "--json"],
    "search_cjk_mixed": ["search", "北京 travel notes", "--json"],
    "search_german": ["search", "Berlin Notizen Museum", "--json"],
    # filter-only (browse)
    "search_filter_only_tag": ["search", "tag:projects", "--json"],
    "search_filter_only_path": ["search", "path:Users/alice", "--json"],
    # flags
    "search_explain_json": ["search", "compost tomatoes", "--explain", "--json"],
    "search_explain_text": ["search", "compost tomatoes", "--explain"],
    "search_text": ["search", "index funds budgeting"],
    "search_one_pass": ["search", "greenhouse effect feedbacks", "--one-pass", "--json"],
    "search_lexical": ["search", "greenhouse effect feedbacks", "--lexical", "--json"],
    "search_lexical_one_pass": ["search", "vaccines immune", "--lexical", "--one-pass", "--json"],
    "search_rerank": ["search", "what does alice like to eat", "--rerank", "--json", *_RERANK_ROOM],
    "search_agent_memory": ["search", "alice preferences budget", "--json"],
    # two-pass: a refined second pass that adds notes, one that adds none; knowledge-first early return
    "search_refine_pass2": ["search", "what did alice ask about the bonus", "--json"],
    "search_refine_pass2_text": ["search", "what did alice ask about the bonus", "--explain"],
    "search_refine_no_new": ["search", "interval training", "--json"],
    "search_early_return": ["search", "hamster care", "-k", "1", "--json"],
    "search_early_return_k2": ["search", "alice knowledge hamsters", "-k", "2", "--json"],
    "search_rerank_explain_text": [
        "search",
        "what does alice like to eat",
        "--rerank",
        "--explain",
        *_RERANK_ROOM,
    ],
    # classic tools
    "find_tfidf": ["find", "hamster", "cage", "--json"],
    "find_phrase": ["find", "great", "wall", "--mode", "phrase", "--json"],
    "find_and": ["find", "espresso", "grind", "--mode", "and", "--json"],
    "find_fuzzy": ["find", "hamstr", "bedin", "--mode", "fuzzy", "--json"],
    "find_text": ["find", "compost", "--mode", "tfidf"],
    "find_and_window": ["find", "chain", "rust", "--mode", "and", "--window", "5", "-n", "3"],
    # context windows
    "context_path": ["context", "Pets/hamster-diet.md", "--json"],
    "context_node": [
        "context",
        "Pets/syrian-hamster-care.md#Cage size",
        "--json",
        "--before",
        "200",
        "--after",
        "300",
    ],
    "context_cursor": [
        "context",
        "Travel/beijing-notes.md",
        "--cursor",
        "400",
        "--before",
        "100",
        "--after",
        "150",
        "--highlight",
        "wall",
    ],
    "context_missing": ["context", "Nowhere/missing.md", "--json"],
}

#: 2026-01-01 12:00 UTC: the files' modification time in the golden vault (not the checkout's).
_FILE_TIME = 1_767_268_800

_TIMING_KEYS = {"timings_ms", "ms", "seconds", "elapsed_ms"}


def set_test_environment() -> None:
    """The environment the tests run in (offline model, no LLM endpoint, no EXPLORER_* settings)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # A test process that has loaded gRPC (the Milvus tests) and then starts a child: with gRPC's
    # fork handlers on, the forked child restarts gRPC's poller before exec, and closing its fds
    # makes it print an epoll error on the child's stderr (seen in about 1 start in 20).
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    # The test modules load pymilvus (and gRPC) at collection, before Explorer quiets gRPC's own log
    # lines: without this, a test process's idle connection to a test server prints the server's
    # keepalive complaints over the run's report.
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        os.environ.pop(name, None)
    kept = (
        "EXPLORER_MODEL_CACHE",
        "EXPLORER_DOCS_UPDATE",
    )  # the model's cache; tests/test_readme.py's update mode
    for name in [n for n in os.environ if n.startswith("EXPLORER_") and n not in kept]:
        os.environ.pop(name, None)


def prepare_vault(dest: Path, seed: Callable[[Path], None] | None = None) -> Path:
    """Copy sample_vault to `dest` (without its index) and build its index with vectors. `seed(dest)`,
    when given, runs before the build (the tests cache the vectors of an index built earlier in it,
    so the command line builds the index without embedding the vault again)."""
    shutil.copytree(SAMPLE_VAULT, dest, ignore=shutil.ignore_patterns(".explorer"), symlinks=True)
    for path in dest.rglob("*"):  # a note without a date of its own is dated by its file time: pin it
        if path.is_file() and not path.is_symlink():
            os.utime(path, (_FILE_TIME, _FILE_TIME))
    if seed is not None:
        seed(dest)
    code, _, err = _run_cli(["index", str(dest), "--json"])
    if code != 0:
        raise RuntimeError(f"indexing the golden vault failed: {err}")
    return dest


def _strip_timings(data: Any) -> Any:
    if isinstance(data, dict):
        return {
            k: _strip_timings(v) for k, v in data.items() if k not in _TIMING_KEYS and not k.endswith("_ms")
        }
    if isinstance(data, list):
        return [_strip_timings(v) for v in data]
    return data


def _run_cli(argv: list[str]) -> tuple[int, str, str]:
    from explorer.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse rejects bad arguments this way
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def run_case(name: str, vault: Path) -> str:
    """The normalised output of case `name` on the indexed `vault`: exit code, stdout, stderr."""
    argv = list(CASES[name])
    argv[1:1] = ["--vault", str(vault)] if argv[0] == "search" else []
    if argv[0] != "search":
        argv += ["--vault", str(vault)]
    code, out, err = _run_cli(argv)
    if "--json" in argv and code == 0:
        out = json.dumps(_strip_timings(json.loads(out)), ensure_ascii=False, indent=2) + "\n"
    elif argv[0] == "search":
        # The human layout ends with a timings line: keep its shape, drop the figures.
        lines = out.splitlines()
        if lines and " ms (" in lines[-1]:
            lines[-1] = "<timings>"
        out = "\n".join(lines) + "\n"
    text = f"exit: {code}\n--- stdout\n{out}--- stderr\n{err}"
    return text.replace(str(vault), "<VAULT>")


def golden_path(name: str) -> Path:
    """Where the expected output of case `name` is stored."""
    return GOLDEN_DIR / f"{name}.txt"


def main() -> int:
    """Rewrite every golden file from the current code."""
    set_test_environment()
    GOLDEN_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        vault = prepare_vault(Path(tmp) / "vault")
        for name in CASES:
            golden_path(name).write_text(run_case(name, vault), encoding="utf-8")
            print(f"wrote {golden_path(name).relative_to(REPO)}", file=sys.stderr)
    for stale in set(GOLDEN_DIR.glob("*.txt")) - {golden_path(n) for n in CASES}:
        stale.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
