"""A component of the search that fails to load is a message the user sees, never a silent downgrade."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import write_notes

REPO = Path(__file__).resolve().parent.parent
NOTES = {
    "kites.md": "# Kites\n\nKites fly over the beach on windy days.\n",
    "boats.md": "# Boats\n\nBoats rest in the harbour.\n",
}


def search_without(module: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """`explorer search` in a process where importing `module` fails (as a broken or missing file would)."""
    blocker = tmp_path / "blocker"
    blocker.mkdir(exist_ok=True)
    (blocker / "sitecustomize.py").write_text(
        f"import sys\nsys.modules[{module!r}] = None\n", encoding="utf-8"
    )
    vault = write_notes(tmp_path / "vault", NOTES)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), str(REPO)])}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "explorer",
            "search",
            "--vault",
            str(vault),
            "--no-embeddings",
            "--local",
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_a_reranker_that_fails_to_load_is_named_in_every_answer(tmp_path: Path) -> None:
    out = search_without("explorer.search.rerank", tmp_path, "--json", "kites")
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert answer["results"][0]["document_path"] == "kites.md"  # the search itself works
    notice = [w for w in answer["warnings"] if "reranker could not be loaded" in w]
    assert notice and "explorer.search.rerank" in notice[0], answer["warnings"]
    plain = search_without("explorer.search.rerank", tmp_path, "kites")
    assert plain.returncode == 0 and "reranker could not be loaded" in plain.stdout + plain.stderr


def test_an_llm_module_that_fails_to_load_stops_the_command_with_one_line(tmp_path: Path) -> None:
    out = search_without("explorer.search.core.llm", tmp_path, "kites")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert (
        out.stderr.startswith("explorer: a part of explorer could not be loaded")
        and "explorer.search.core.llm" in out.stderr
    )


def test_a_pipeline_with_every_component_loaded_has_no_notice(tmp_path: Path) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "explorer",
            "search",
            "--vault",
            str(vault),
            "--no-embeddings",
            "--local",
            "--json",
            "kites",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert not [w for w in json.loads(out.stdout)["warnings"] if "could not be loaded" in w]
