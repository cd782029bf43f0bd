"""The checked habits: `ruff check`, `ruff format --check` and `mypy explorer` report nothing.

The rule set, the formatter's line length and mypy's settings live in pyproject.toml; each test
fails with the tool's findings in its message, so a failing run says what to fix.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from conftest import REPO


def _run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not installed: install the dev extra (pip install -e '.[dev]')")
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True, timeout=600
    )


def _findings(done: subprocess.CompletedProcess[str]) -> str:
    return (done.stdout + done.stderr).strip()


def test_ruff_check_finds_nothing() -> None:
    done = _run("ruff", "check", "--no-fix", "--output-format", "concise", ".")
    assert done.returncode == 0, f"ruff check:\n{_findings(done)}"


def test_ruff_format_changes_nothing() -> None:
    done = _run("ruff", "format", "--check", "--diff", ".")
    assert done.returncode == 0, f"ruff format --check (run `ruff format` on these files):\n{_findings(done)}"


def test_mypy_finds_nothing() -> None:
    done = _run("mypy", "explorer")
    assert done.returncode == 0, f"mypy explorer:\n{_findings(done)}"
