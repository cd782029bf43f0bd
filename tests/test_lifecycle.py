"""Clean exits: each long-lived command started and stopped many times ends with its exit code and no native abort.

A thread left inside the embedding runtime (ONNX) when the interpreter exits aborts the process
("terminate called without an active exception", exit 134). `explorer watch` (Ctrl-C and SIGTERM),
`explorer mcp` over stdio (the client closing the pipe, with and without the watcher) and the
app in a pseudo-terminal (quit key) are stopped at moments when the model is loading or embedding:
every run must exit 0 with nothing on stderr but the program's own `explorer:` notices.

Time limits here only stop a stuck child (generous, for a loaded machine); nothing is timed.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from fcntl import ioctl
from pathlib import Path

import pytest

from conftest import REPO, SAMPLE_VAULT, copy_vault, write_notes

GUARD_S = 300
"""A child still running after this long is killed (and the test fails): a bound, not a measurement."""
BAD = (
    "terminate called",
    "Aborted",
    "core dumped",
    "Traceback",
    "Fatal Python error",
    "Exception ignored",
    "Segmentation fault",
)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def _default_sigint() -> None:
    # A child inherits an ignored SIGINT from a shell that started the tests in the background
    # (`make test &`, some CI runners); Ctrl-C must reach it as it reaches a user's terminal.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _popen(args: list[str], **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "explorer", *args], cwd=REPO, env=_env(), preexec_fn=_default_sigint, **kwargs
    )


def _assert_clean(code: int | None, err: str, what: str) -> None:
    assert code == 0, f"{what}: exit {code}\n{err}"
    assert not any(b in err for b in BAD), f"{what}:\n{err}"
    stray = [line for line in err.splitlines() if line.strip() and not line.startswith("explorer: ")]
    assert not stray, f"{what}: unexpected stderr lines {stray}"


PART = ("Pets", "Coffee", "Travel", "Recipes", "Programming")
"""The part of sample_vault the children open: 26 notes, enough for the embedding to take a while."""


@pytest.fixture()
def fresh_vault(tmp_path: Path):
    """A function returning a new copy of part of sample_vault without an index (so the model loads and embeds)."""
    count = iter(range(1000))

    def make() -> Path:
        dest = tmp_path / f"vault{next(count)}"
        for folder in PART:
            copy_vault(SAMPLE_VAULT / folder, dest / folder)
        return dest

    return make


def _read_until(stream, needle: str, lines: list[str]) -> None:
    while True:
        line = stream.readline()
        assert line, f"exited before {needle!r}: {lines}"
        lines.append(line)
        if needle in line:
            return


def test_processes_the_tests_start_hear_ctrl_c_in_a_run_started_in_the_background() -> None:
    """A run started with Ctrl-C ignored (a background job, nohup, a CI runner's shell) gives it back to
    the processes its tests start: a `milvus-lite server` or `explorer watch` that a test stops with
    Ctrl-C must stop, not run on until a bound kills it. Without the tests' set-up the child inherits
    the ignored signal (the control)."""
    child = "import signal; print(signal.getsignal(signal.SIGINT) == signal.SIG_IGN)"
    start = f"import subprocess, sys; print(subprocess.run([sys.executable, '-c', {child!r}], capture_output=True, text=True).stdout.strip())"
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests")}
    ignored = ["sh", "-c", 'trap "" INT; exec "$0" -c "$1"', sys.executable]
    control = subprocess.run([*ignored, start], env=env, capture_output=True, text=True, timeout=120)
    assert control.stdout.strip() == "True", control.stderr
    tests = subprocess.run(
        [*ignored, f"import conftest; {start}"], env=env, capture_output=True, text=True, timeout=120
    )
    assert tests.stdout.strip() == "False", tests.stderr


# (signal, what to wait for before sending it, extra seconds after that)
WATCH_STOPS = [
    (signal.SIGINT, "watching", 0.0),  # the first batch and the model load still running
    (signal.SIGTERM, "watching", 0.0),
    (signal.SIGINT, "watching", 1.0),  # embedding in the background
    (signal.SIGTERM, "watching", 2.0),
]


@pytest.mark.parametrize(
    ("sig", "after", "extra"), WATCH_STOPS, ids=[f"{s.name}-{a}-{e}" for s, a, e in WATCH_STOPS]
)
def test_watch_stops_cleanly(fresh_vault, sig: signal.Signals, after: str, extra: float) -> None:
    proc = _popen(
        ["watch", str(fresh_vault()), "--set", "experimental.watch_debounce_ms=100"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    guard = threading.Timer(GUARD_S, proc.kill)
    guard.start()
    lines: list[str] = []
    try:
        _read_until(proc.stdout, after, lines)
        time.sleep(extra)
        proc.send_signal(sig)
        _out, err = proc.communicate()
    finally:
        guard.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _assert_clean(proc.returncode, err, f"watch stopped by {sig.name} after {after!r}")


def _mcp_request(proc: subprocess.Popen, req_id: int, method: str, params: dict) -> dict:
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params}) + "\n")
    proc.stdin.flush()
    while True:
        line = proc.stdout.readline()
        assert line, "the server closed its output"
        msg = json.loads(line)
        if msg.get("id") == req_id:
            return msg


@pytest.mark.parametrize(
    ("extra", "talk"),
    [
        (["--no-watch"], False),  # the client goes away at once: the model loading or embedding
        ([], True),  # a search first (the model loaded), the watcher embedding meanwhile
    ],
    ids=["no-watch-silent", "watch-talk"],
)
def test_mcp_over_stdio_stops_cleanly_when_the_client_leaves(
    fresh_vault, extra: list[str], talk: bool
) -> None:
    proc = _popen(
        ["mcp", str(fresh_vault()), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    guard = threading.Timer(GUARD_S, proc.kill)
    guard.start()
    try:
        if talk:
            init = _mcp_request(
                proc,
                1,
                "initialize",
                {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "lifecycle", "version": "1"},
                },
            )
            assert "result" in init, init
            proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
            found = _mcp_request(
                proc, 2, "tools/call", {"name": "search", "arguments": {"query": "hamster cage"}}
            )
            assert not found["result"].get("isError"), found
        else:
            time.sleep(1.0)
        _out, err = proc.communicate(input="")  # closes stdin: the client left
    finally:
        guard.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _assert_clean(proc.returncode, err, f"mcp {extra} talk={talk}")


SMALL = {
    "Pets/hamster-care.md": "# Hamster care\n\nA Syrian hamster needs a 30 cm wheel and deep bedding.\n",
    "Coffee/espresso.md": "# Espresso\n\nA fine grind slows the shot.\n",
}


def _drain(fd: int, until: float, want: bytes | None = None) -> bytes:
    """Read a pseudo-terminal until `want` appears, the child closes it, or `until` (monotonic) passes."""
    got = b""
    while time.monotonic() < until:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        got += chunk
        if want is not None and want in got:
            break
    return got


@pytest.mark.parametrize("moment", ["at-once", "when-drawn", "after-a-search"])
def test_the_app_in_a_terminal_quits_cleanly(fresh_vault, tmp_path: Path, moment: str) -> None:
    master, slave = pty.openpty()
    ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {**_env(), "TERM": "xterm-256color", "COLUMNS": "80", "LINES": "24"}
    # Quitting at once or on the first frame stops the index opening and the model loading; after
    # a search, a small vault keeps the wait for its embeddings short.
    vault = fresh_vault() if moment != "after-a-search" else write_notes(tmp_path / "small", SMALL)
    proc = subprocess.Popen(
        [sys.executable, "-m", "explorer", str(vault)],
        cwd=REPO,
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        preexec_fn=os.setsid,
        close_fds=True,
    )
    os.close(slave)
    try:
        deadline = time.monotonic() + GUARD_S
        screen = _drain(master, deadline, want=b"Search" if moment != "at-once" else b"\x1b[?1049h")
        # Until the app puts the terminal in raw mode, the terminal itself takes ctrl+q (XON).
        while termios.tcgetattr(master)[3] & termios.ICANON and time.monotonic() < deadline:
            screen += _drain(master, time.monotonic() + 0.05)
        if moment == "after-a-search":
            os.write(master, b"hamster wheel")
            screen += _drain(master, deadline, want=b"hamster-care.md")
        os.write(master, b"\x11")  # ctrl+q
        screen += _drain(master, deadline)
        try:
            code = proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # The app draws on the terminal, and anything the process or the runtime prints lands there too.
    assert code == 0, f"app quit {moment}: exit {code}\n{screen[-2000:]!r}"
    assert not any(b.encode() in screen for b in BAD), screen[-2000:]
