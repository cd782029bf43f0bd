"""The import-linter contracts of pyproject.toml hold: one-way layers, Textual only under tui/, no cycles."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_import_contracts_are_kept() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert exe, "lint-imports not found: install the dev extra (import-linter)"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([exe, "--no-cache"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


#: The modules of explorer/index that explorer/search may import: the interface and text helpers.
SEARCH_MAY_IMPORT = {"explorer.index", "explorer.index.backend", "explorer.index.windows"}


def test_search_is_forbidden_every_index_module_but_the_interface() -> None:
    """A module added to explorer/index is kept from search/ until it is named an interface."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(
        c
        for c in config["tool"]["importlinter"]["contracts"]
        if c["type"] == "forbidden" and c["source_modules"] == ["explorer.search"]
    )
    modules = {
        "explorer.index." + p.stem if p.stem != "__init__" else "explorer.index"
        for p in (REPO / "explorer" / "index").glob("*.py")
    }
    modules |= {
        "explorer.index." + p.parent.name for p in (REPO / "explorer" / "index").glob("*/__init__.py")
    }
    assert modules - SEARCH_MAY_IMPORT == set(contract["forbidden_modules"])
