"""One-shot searches answered by a running Explorer over a private Unix socket: same answers, read-your-writes, owner only."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import REPO, write_notes
from explorer.config import load_settings
from explorer.engine.server import SearchServer, ask, settings_key, socket_path
from explorer.index.local.vault_index import VaultIndex

FLAGS = {"index.embeddings": False}


@pytest.fixture()
def runtime(monkeypatch: pytest.MonkeyPatch):
    folder = Path(tempfile.mkdtemp(prefix="xr"))  # short: socket paths are limited to 107 bytes
    folder.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _vault(tmp_path: Path) -> Path:
    return write_notes(
        tmp_path / "v", {f"n{i}.md": f"# Note {i}\n\nbody about topic{i} and kites\n" for i in range(8)}
    )


def _cli(*args: str, runtime: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), XDG_RUNTIME_DIR=str(runtime))
    return subprocess.run(
        [sys.executable, "-m", "explorer", *args], capture_output=True, text=True, env=env, timeout=300
    )


def _results(stdout: str) -> list[tuple[str, float]]:
    data = json.loads(stdout)
    return [(r["node_id"], r["score"]) for r in data["results"]]


class Counting(SearchServer):
    answered = 0

    def _answer(self, req):
        out = super()._answer(req)
        if req.get("op") == "search" and out.get("ok"):
            Counting.answered += 1
        return out


def test_a_running_index_answers_the_command_line_and_sees_every_saved_change(
    tmp_path: Path, runtime: Path
) -> None:
    root = _vault(tmp_path)
    settings = load_settings(root, FLAGS)
    index = VaultIndex(root, settings)
    index.open()
    server = Counting(root, index, settings)
    assert server.start()
    try:
        path = socket_path(root)
        assert (
            stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        )
        local = _cli(
            "search",
            "kites topic3",
            "--vault",
            str(root),
            "--json",
            "--no-embeddings",
            "--local",
            runtime=runtime,
        )
        served = _cli(
            "search", "kites topic3", "--vault", str(root), "--json", "--no-embeddings", runtime=runtime
        )
        assert local.returncode == served.returncode == 0, served.stderr
        assert Counting.answered == 1
        assert _results(served.stdout) == _results(local.stdout) and _results(served.stdout)[0][0].startswith(
            "n3.md"
        )
        # Read-your-writes: a note saved just before the command is in the answer.
        (root / "fresh.md").write_text("# Fresh\n\nzeppelins over the harbour\n", encoding="utf-8")
        served = _cli(
            "search", "zeppelins", "--vault", str(root), "--json", "--no-embeddings", runtime=runtime
        )
        assert Counting.answered == 2 and _results(served.stdout)[0][0].startswith("fresh.md")
        # Plain output too: the command rebuilds the served results and prints them itself, as it
        # prints its own (the timings line aside).
        plain = _cli("search", "zeppelins", "--vault", str(root), "--no-embeddings", runtime=runtime)
        assert plain.returncode == 0 and Counting.answered == 3
        local = _cli(
            "search", "zeppelins", "--vault", str(root), "--no-embeddings", "--local", runtime=runtime
        )
        assert plain.stdout.splitlines()[:-1] == local.stdout.splitlines()[:-1]
        assert "fresh.md" in plain.stdout
        # Other settings: not this server's business; the command answers itself, correctly.
        other = _cli(
            "search",
            "zeppelins",
            "--vault",
            str(root),
            "--json",
            "--no-embeddings",
            "--set",
            "search.top_k=3",
            runtime=runtime,
        )
        assert Counting.answered == 3 and _results(other.stdout)[0][0].startswith("fresh.md")
        assert ask(root, {"op": "search", "query": "kites", "settings": "nope"}) is None
        assert ask(root, {"op": "search", "query": "kites", "settings": settings_key(settings), "k": 2})[
            "results"
        ]["results"]
    finally:
        server.stop()
        index.close()
    assert not socket_path(root).exists()


def test_another_user_cannot_reach_the_socket(tmp_path: Path, runtime: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to run a client as another user")
    root = _vault(tmp_path)
    settings = load_settings(root, FLAGS)
    index = VaultIndex(root, settings)
    index.open()
    server = SearchServer(root, index, settings)
    assert server.start()
    try:
        probe = (
            "import socket, sys\ns = socket.socket(socket.AF_UNIX)\n"
            "try:\n    s.connect(sys.argv[1]); print('connected')\nexcept OSError as e:\n    print(type(e).__name__)\n"
        )
        python = shutil.which("python3", path="/usr/bin:/bin")
        if python is None:
            pytest.skip("no system python for another user")
        out = subprocess.run(
            [python, "-c", probe, str(socket_path(root))],
            capture_output=True,
            text=True,
            user=65534,
            group=65534,
            timeout=60,
            cwd="/",
        )
        assert out.stdout.strip() == "PermissionError", out
    finally:
        server.stop()
        index.close()


def test_watch_serves_the_vault_with_read_your_writes(tmp_path: Path, runtime: Path) -> None:
    root = _vault(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(REPO), XDG_RUNTIME_DIR=str(runtime))
    watch = subprocess.Popen(
        [sys.executable, "-m", "explorer", "watch", str(root), "--no-embeddings"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        while not socket_path(root).exists():
            assert watch.poll() is None and time.monotonic() < deadline, (
                watch.stderr.read() if watch.poll() is not None else ""
            )
            time.sleep(0.1)
        for i in range(3):
            (root / f"new{i}.md").write_text(f"# New {i}\n\nquokka{i} sightings\n", encoding="utf-8")
            out = _cli(
                "search", f"quokka{i}", "--vault", str(root), "--json", "--no-embeddings", runtime=runtime
            )
            assert out.returncode == 0 and _results(out.stdout)[0][0].startswith(f"new{i}.md"), out.stderr
        (root / "new0.md").unlink()
        out = _cli("search", "quokka0", "--vault", str(root), "--json", "--no-embeddings", runtime=runtime)
        assert all(not n.startswith("new0.md") for n, _ in _results(out.stdout))
    finally:
        watch.terminate()
        watch.wait(timeout=30)
    assert not socket_path(root).exists()


def test_a_server_loads_the_model_before_its_first_request(tmp_path: Path, runtime: Path) -> None:
    root = _vault(tmp_path)
    settings = load_settings(root)  # embeddings on
    index = VaultIndex(root, settings)
    index.open()
    assert index.stats().model_state == "not loaded"
    server = SearchServer(root, index, settings)
    assert server.start()
    try:
        deadline = time.monotonic() + 120
        while index.stats().model_state != "ready" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert index.stats().model_state == "ready", index.model_error
        answer = ask(root, {"op": "search", "query": "kites topic3", "settings": settings_key(settings)})
        assert answer["results"]["results"][0]["node_id"].startswith("n3.md")
    finally:
        server.stop()
        index.close()


def test_a_long_temporary_folder_still_gets_a_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A $TMPDIR or runtime folder too long for a socket path (107 bytes) falls back to /tmp/explorer-<uid>/."""
    long_dir = tmp_path / ("a folder with spaces " * 6).strip()
    long_dir.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(long_dir))
    root = _vault(tmp_path)
    path = socket_path(root)
    assert len(os.fsencode(path)) <= 107 and str(path).startswith("/tmp/explorer-")
    settings = load_settings(root, FLAGS)
    index = VaultIndex(root, settings)
    index.open()
    server = SearchServer(root, index, settings)
    try:
        assert server.start()
        answer = ask(
            root, {"op": "search", "query": "kites topic2", "settings": settings_key(settings), "k": 1}
        )
        assert answer["results"]["results"][0]["node_id"].startswith("n2.md")
    finally:
        server.stop()
        index.close()
    assert not path.exists()
