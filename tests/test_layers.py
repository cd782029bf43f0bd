"""The import-linter contracts of pyproject.toml hold: one-way layers, Textual only under tui/, no cycles."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_import_contracts_are_kept() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert exe, "lint-imports not found: install the dev extra (import-linter)"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([exe, "--no-cache"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout
