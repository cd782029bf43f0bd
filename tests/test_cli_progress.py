"""`explorer index` progress: plain lines with counts when piped (none for a short run); rate and time left."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from explorer.cli.index import _ProgressBar, format_eta

REPO = Path(__file__).resolve().parents[1]


def test_a_short_piped_index_prints_no_progress(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    for i in range(40):
        (vault / f"n{i}.md").write_text(f"# Note {i}\n\nHamsters hoard seed number {i}.\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "explorer", "index", str(vault), "--no-embeddings"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "reading" not in proc.stderr and "\r" not in proc.stderr
    assert "notes        40" in proc.stdout


def test_piped_progress_is_one_plain_line_per_tenth(capsys: pytest.CaptureFixture[str]) -> None:
    bar = _ProgressBar(tty=False)
    for i in range(0, 1001, 5):
        bar.update("embedding", i, 1000, now=100.0 + i / 10)  # 10 items a second
    bar.done()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("embedding 20/1000 (2%)"), "quiet for the first 2 s"
    assert lines[-1] == "embedding 1000/1000 (100%) 10.0/s"
    assert len(lines) == 11 and all("\r" not in ln and "\x1b" not in ln for ln in lines)
    assert "(50%) 10.0/s, 50s left" in lines[5]


def test_progress_line_has_rate_and_time_left() -> None:
    bar = _ProgressBar(tty=False)
    assert bar.line("embedding", 0, 1000, now=100.0) == "embedding 0/1000 (0%)"
    assert bar.line("embedding", 250, 1000, now=110.0) == "embedding 250/1000 (25%) 25.0/s, 30s left"
    assert bar.line("embedding", 1000, 1000, now=140.0).endswith("(100%) 25.0/s")
    assert format_eta(3725) == "1h02m" and format_eta(185) == "3m05s" and format_eta(9) == "9s"
