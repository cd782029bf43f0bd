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


#: The face of a backend: the modules of explorer/index that cli/ and tui/ may import.
FACE = {
    "explorer.index",
    "explorer.index.backend",
    "explorer.index.pinned",
    "explorer.index.targets",
    "explorer.index.transclusion",
}
#: Of those, what explorer/search may import (the interface alone).
SEARCH_MAY_IMPORT = {"explorer.index", "explorer.index.backend"}


def _contract(source: list[str]) -> dict:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return next(
        c
        for c in config["tool"]["importlinter"]["contracts"]
        if c["type"] == "forbidden" and c["source_modules"] == source
    )


def _index_modules() -> set[str]:
    """The modules and backend packages directly under explorer/index."""
    modules = {
        "explorer.index." + p.stem if p.stem != "__init__" else "explorer.index"
        for p in (REPO / "explorer" / "index").glob("*.py")
    }
    return modules | {
        "explorer.index." + p.parent.name for p in (REPO / "explorer" / "index").glob("*/__init__.py")
    }


def test_search_is_forbidden_every_index_module_but_the_interface() -> None:
    """A module added to explorer/index is kept from search/ until it is named an interface."""
    assert _index_modules() - SEARCH_MAY_IMPORT == set(_contract(["explorer.search"])["forbidden_modules"])


def test_front_ends_are_forbidden_every_index_module_but_the_face() -> None:
    """A module added to explorer/index is a backend's own: cli/ and tui/ may not import it."""
    assert _index_modules() - FACE == set(_contract(["explorer.cli", "explorer.tui"])["forbidden_modules"])
