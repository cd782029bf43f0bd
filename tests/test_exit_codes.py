"""Exit codes a script can trust: 0 only when a command did its job, each non-zero path with its message.

0 done; 1 ran but fell short of its job (`index`: not saved, or shards left without vectors;
`eval`: a regression); 2 the command could not run (arguments, query, configuration, vault, target).
The codes are listed in docs/exit-codes.md. Ctrl-C (130) and a closed pipe (141) are tested
in test_watch.py / test_cli_highlight.py; the long-lived commands' clean stops in test_lifecycle.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import REPO, fill_disk, write_notes


def _vault(tmp_path: Path) -> Path:
    return write_notes(
        tmp_path / "v", {f"n{i}.md": f"# Note {i}\n\nbody about topic{i} and kites\n" for i in range(4)}
    )


def _cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), XDG_CACHE_HOME=f"/nonexistent-{uuid.uuid4().hex}")
    return subprocess.run(
        [sys.executable, "-m", "explorer", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=cwd,
    )


def test_index_exits_1_when_the_index_could_not_be_saved_at_all(tmp_path: Path, tiny_disk: Path) -> None:
    """A full disk before the first save: the run keeps the index in memory, and says it failed."""
    root = _vault(tmp_path)
    fill_disk(tiny_disk)
    cache = tiny_disk / "cache"
    proc = _cli("index", str(root), "--no-embeddings", "--set", f"index.cache_dir={cache}")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "explorer: disk full: keeping the index in memory for this run"
    ]
    assert "saved        no  (disk full" in proc.stdout and "notes         4" in proc.stdout
    proc = _cli("index", str(root), "--no-embeddings", "--json", "--set", f"index.cache_dir={cache}")
    assert proc.returncode == 1 and "disk full" in json.loads(proc.stdout)["not_saved"]
    # Searching is another job: it answers from memory and exits 0, with the notice.
    proc = _cli(
        "search",
        "topic2",
        "--vault",
        str(root),
        "--json",
        "--no-embeddings",
        "--set",
        f"index.cache_dir={cache}",
    )
    assert proc.returncode == 0 and "n2.md" in proc.stdout and "disk full" in proc.stderr


def test_index_exits_1_when_shards_are_left_without_vectors(tmp_path: Path) -> None:
    root = _vault(tmp_path)
    proc = _cli("index", str(root), "--set", "index.model=/nonexistent/model", "--json")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    out = json.loads(proc.stdout)
    assert out["shards_without_vectors"] == 4 and "4 shards have no vector" in out["incomplete"]
    assert "explorer: 4 shards have no vector" in proc.stderr
    # The index itself was saved: BM25-only by choice is a complete job.
    proc = _cli("index", str(root), "--no-embeddings")
    assert proc.returncode == 0 and proc.stderr == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("search", "-k", "0", "x"), "-k must be 1 or more"),
        (("search", "   "), "empty query"),
        (("search", "kites", "--set", "search.no_such_key=1"), "configuration error"),
        (("search", "kites", "--vault", "/nonexistent/vault"), "vault not found"),
        (("find",), "find needs at least one keyword"),
        (("find", "kites", "-n", "0"), "-n must be 1 or more"),
        (("find", "kites", "--mode", "and", "--window", "0"), "--window must be 1 or more"),
        (("context", "Nowhere/missing.md"), "explorer:"),
        (("stats", "/nonexistent/vault"), "vault not found"),
        (("index", "/nonexistent/vault"), "vault not found"),
        (("search", "--no-such-flag", "x"), "unrecognized arguments"),
    ],
)
def test_a_command_that_cannot_run_exits_2_with_one_message(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    root = _vault(tmp_path)
    full = list(args)
    if "--vault" not in full and not any(a.startswith("/nonexistent") for a in full):
        full += ["--vault", str(root)]
    proc = _cli(*full, "--no-embeddings")
    assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
    assert message in proc.stderr and "Traceback" not in proc.stderr and proc.stdout == ""


def test_eval_exits_1_on_a_regression_and_0_without_marks(tmp_path: Path) -> None:
    root = _vault(tmp_path)
    proc = _cli("eval", str(root), "--no-embeddings")
    assert proc.returncode == 0 and "no relevance marks yet" in proc.stderr
    cache = root / ".explorer"
    (cache / "judgments.jsonl").write_text(
        json.dumps({"query": "topic2 kites", "path": "n2.md", "mark": "relevant", "generation": 1}) + "\n",
        encoding="utf-8",
    )
    proc = _cli("eval", str(root), "--no-embeddings", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["scored_queries"] == 1
    # The marked note changes so that the query no longer finds it: a regression.
    (root / "n2.md").write_text("# Note 2\n\nnothing here any more\n", encoding="utf-8")
    proc = _cli("eval", str(root), "--no-embeddings")
    assert proc.returncode == 1 and "REGRESSION" in proc.stdout, proc.stdout + proc.stderr


def test_index_names_the_vault_as_a_person_reads_it(tmp_path: Path) -> None:
    """Relative to the working folder (no machine path in the report), `~/...` under the home folder."""
    root = _vault(tmp_path)
    proc = _cli("index", "v", "--no-embeddings", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.splitlines()[0] == "Indexed v"
    env_home = dict(os.environ, PYTHONPATH=str(REPO), HOME=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-m", "explorer", "index", str(root), "--no-embeddings"],
        capture_output=True,
        text=True,
        env=env_home,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout.splitlines()[0] == "Indexed ~/v", proc.stdout + proc.stderr
    proc = _cli("index", str(root), "--no-embeddings", "--json", cwd=tmp_path)
    assert json.loads(proc.stdout)["vault"] == str(
        root.resolve()
    )  # machine-readable output keeps the full path
