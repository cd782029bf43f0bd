"""`explorer index` progress: plain lines with counts when piped; counts, rate and time left in the line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from explorer.cli.index import _ProgressBar, format_eta

REPO = Path(__file__).resolve().parents[1]


def test_index_piped_prints_plain_progress_lines(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    for i in range(40):
        (vault / f"n{i}.md").write_text(f"# Note {i}\n\nHamsters hoard seed number {i}.\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "explorer", "index", str(vault), "--no-embeddings"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("reading ")]
    assert lines and lines[-1].startswith("reading 40/40 (100%)")
    assert "\r" not in proc.stderr and "\x1b" not in proc.stderr
    assert len(lines) <= 12, "one line per tenth, not one per note"
    assert "notes        40" in proc.stdout


def test_progress_line_has_rate_and_time_left() -> None:
    bar = _ProgressBar(tty=False)
    assert bar.line("embedding", 0, 1000, now=100.0) == "embedding 0/1000 (0%)"
    assert bar.line("embedding", 250, 1000, now=110.0) == "embedding 250/1000 (25%) 25.0/s, 30s left"
    assert bar.line("embedding", 1000, 1000, now=140.0).endswith("(100%) 25.0/s")
    assert format_eta(3725) == "1h02m" and format_eta(185) == "3m05s" and format_eta(9) == "9s"
