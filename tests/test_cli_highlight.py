"""CLI output in a terminal and in a pipe: styling on a TTY, an unambiguous «marker» when piped or with
NO_COLOR, and a quiet end when the reader closes the pipe."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

from conftest import write_notes

REPO = Path(__file__).resolve().parent.parent
NOTE = "Proverbe : « Un oignon pressé, c'est un oignon gâché. » [[oignon]] et [oignon](oignon.md)\n"


def _context(vault: Path, tty: bool, **env: str) -> str:
    """`explorer context` on the note with `oignon` highlighted, its stdout a pipe or a real terminal."""
    cmd = [
        sys.executable,
        "-m",
        "explorer",
        "context",
        "soupe",
        "--vault",
        str(vault),
        "--no-embeddings",
        "--highlight",
        "oignon",
    ]
    full_env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    full_env.update(PYTHONPATH=str(REPO), **env)
    if not tty:
        return subprocess.run(
            cmd, capture_output=True, text=True, env=full_env, check=True, timeout=120
        ).stdout
    main, child = pty.openpty()
    proc = subprocess.Popen(cmd, stdout=child, stderr=subprocess.PIPE, env=full_env)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # the terminal closes when the process exits
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    return b"".join(chunks).decode("utf-8").replace("\r\n", "\n")


def _unmark(text: str) -> tuple[str, list[str]]:
    """Read piped output back: `««` / `»»` are the text's own quotes, single ones enclose a highlight."""
    out, hits, i, start = [], [], 0, None
    while i < len(text):
        ch = text[i]
        if ch in "«»" and text[i + 1 : i + 2] == ch:
            out.append(ch)
            i += 2
            continue
        if ch == "«":
            assert start is None, "a highlight opened inside another"
            start = len(out)
        elif ch == "»":
            assert start is not None, "a highlight closed that was never opened"
            hits.append("".join(out[start:]))
            start = None
        else:
            out.append(ch)
        i += 1
    assert start is None
    return "".join(out), hits


def test_piped_highlights_are_unambiguous_markers_and_a_tty_gets_styling(tmp_path: Path) -> None:
    vault = write_notes(tmp_path / "v", {"soupe.md": NOTE})

    piped = _context(vault, tty=False)
    assert "\x1b" not in piped
    body = piped.split("\n", 2)[2]
    text, hits = _unmark(body)
    # The note's text comes back exactly, with every `oignon` (and only those) highlighted.
    assert text.rstrip("\n") == NOTE.rstrip("\n")
    assert [h.lower() for h in hits] == ["oignon"] * NOTE.lower().count("oignon")
    assert "«« Un «oignon» pressé" in body and "gâché. »»" in body

    styled = _context(vault, tty=True)
    assert "\x1b[1;33moignon\x1b[0m" in styled
    assert "« Un " in styled and "««" not in styled and "«oignon»" not in styled

    no_color = _context(vault, tty=True, NO_COLOR="1")
    assert "\x1b" not in no_color and "«oignon»" in no_color and "«« Un" in no_color
    assert re.sub(r"\s+", " ", no_color) == re.sub(r"\s+", " ", piped)


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path):
    """`explorer search ... | head`: a closed pipe ends the command without an error message or traceback."""
    vault = write_notes(tmp_path / "v", {f"n{i}.md": f"# Oignon {i}\n\n{NOTE * 40}" for i in range(30)})
    cmd = [
        sys.executable,
        "-m",
        "explorer",
        "search",
        "oignon",
        "--vault",
        str(vault),
        "--no-embeddings",
        "-k",
        "30",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # the reader is gone before the first line is written
    err = proc.stderr.read().decode("utf-8", "replace")
    assert proc.wait(timeout=120) == 141, err
    assert err == ""
