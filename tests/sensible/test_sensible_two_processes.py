"""Sensible answers: two Explorer processes on one vault embed it once, and each says what it waits for.

A person runs `explorer index` while the app is still embedding, or opens the app while
`explorer index` runs: the work is not done twice, the waiting one says whom it waits for, and
in the end both have every vector. The other process is real: tests/gated_owner.py embeds with
the real model and holds its first batch until the test lets it go, so the overlap is certain.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, CountingEmbedder, make_app, settle, sync, wait_for, write_notes

HELPER = REPO / "tests" / "gated_owner.py"
PATIENCE = 240.0

NOTES = {
    "Baking/sourdough.md": "# Sourdough\n\nFeed the starter twice a day and let the dough proof overnight.\n",
    "Pets/hamster.md": "# Hamster\n\nClean the cage weekly; hamsters hoard seeds in their cheeks.\n",
    "Garden/tomatoes.md": "# Tomatoes\n\nStake the seedlings and water them at the roots in the morning.\n",
    "Bikes/chain.md": "# Chain care\n\nDegrease the chain, then oil each link and wipe off the excess.\n",
}


def env(tmp_path: Path) -> dict[str, str]:
    runtime = tmp_path / "run"
    runtime.mkdir(exist_ok=True, mode=0o700)
    return dict(os.environ, PYTHONPATH=str(REPO), XDG_RUNTIME_DIR=str(runtime))


def until(check, what: str, proc: subprocess.Popen | None = None) -> None:
    end = time.monotonic() + PATIENCE
    while not check():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"{what}: the process ended ({proc.returncode})")
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting: {what}")
        time.sleep(0.05)


def embedding_elsewhere(vault: Path, tmp_path: Path, role: str) -> tuple[subprocess.Popen, Path]:
    """Another process (`role`, e.g. "explorer index") embedding `vault`, held at its first batch."""
    gate = tmp_path / "gate"
    gate.mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(HELPER), str(vault), str(gate), role],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(tmp_path),
    )
    until(lambda: (gate / "started").exists(), f"{role} starts embedding", proc)
    return proc, gate


def finish(proc: subprocess.Popen, gate: Path) -> dict:
    (gate / "go").write_text("go")
    out, err = proc.communicate(timeout=PATIENCE)
    assert proc.returncode == 0, err[-2000:]
    return json.loads(out)


def test_explorer_index_while_the_app_embeds_waits_for_it_and_embeds_nothing_twice(tmp_path: Path) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)
    app, gate = embedding_elsewhere(vault, tmp_path, "the Explorer app")
    err = tmp_path / "index.err"
    index = subprocess.Popen(
        [sys.executable, "-m", "explorer", "index", str(vault)],
        stdout=subprocess.PIPE,
        stderr=err.open("w"),
        text=True,
        env=env(tmp_path),
    )
    try:
        until(lambda: "waiting for" in err.read_text(), "explorer index says it waits", index)
        # The person reads whom it waits for, by name and process id.
        assert f"waiting for the Explorer app (pid {app.pid}) to finish embedding" in err.read_text()
        assert finish(app, gate)["embedded"] == 4
        out, _ = index.communicate(timeout=PATIENCE)
    finally:
        for p in (app, index):
            if p.poll() is None:
                p.kill()
    assert index.returncode == 0, err.read_text()
    # Every vector read from what the app embedded; none computed again, none missing.
    assert "vectors       0 embedded, 4 from cache, 0 missing" in out


@sync
async def test_the_app_opened_while_explorer_index_embeds_says_it_waits_then_has_every_vector(
    tmp_path: Path, embedder
) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)
    cli, gate = embedding_elsewhere(vault, tmp_path, "explorer index")
    counting = CountingEmbedder(embedder)
    app = make_app(vault, counting, tmp_path)
    try:
        async with app.run_test(size=(160, 30)) as pilot:
            await wait_for(pilot, lambda: app.status.model == "waiting", timeout=PATIENCE)
            right = str(app.screen.query_one("#status-right").render())
            assert f"waiting for explorer index (pid {cli.pid}) to finish embedding" in right
            assert finish(cli, gate)["embedded"] == 4
            await wait_for(pilot, lambda: app.status.model == "ready", timeout=PATIENCE)
            await settle(app, pilot)
            assert app.index is not None and app.index.stats().pending == 0
            assert "waiting" not in str(app.screen.query_one("#status-right").render())
    finally:
        if cli.poll() is None:
            cli.kill()
    assert counting.texts == 0  # the app embedded nothing explorer index had embedded


def test_explorer_watch_started_while_explorer_index_embeds_says_so_and_embeds_nothing(
    tmp_path: Path,
) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)
    cli, gate = embedding_elsewhere(vault, tmp_path, "explorer index")
    log = tmp_path / "watch.out"
    watch = subprocess.Popen(
        [sys.executable, "-m", "explorer", "watch", str(vault)],
        stdout=log.open("w"),
        stderr=subprocess.PIPE,
        text=True,
        env=env(tmp_path),
    )
    try:
        until(lambda: "waiting for" in log.read_text(), "explorer watch says it waits", watch)
        assert f"waiting for explorer index (pid {cli.pid}) to finish embedding" in log.read_text()
        assert finish(cli, gate)["embedded"] == 4
        # The one-shot search the watch process answers has every vector once it took them in.
        for _ in range(int(PATIENCE / 0.5)):
            answer = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "explorer",
                    "search",
                    "--vault",
                    str(vault),
                    "--json",
                    "hamster cheeks",
                ],
                capture_output=True,
                text=True,
                env=env(tmp_path),
                timeout=PATIENCE,
            )
            stats = json.loads(answer.stdout)["stats"]
            if stats["shards_without_vectors"] == 0:
                break
            time.sleep(0.5)
        assert stats["shards_without_vectors"] == 0
        assert stats["embedding_matches"] > 0
    finally:
        watch.terminate()
        watch.communicate(timeout=PATIENCE)
        if cli.poll() is None:
            cli.kill()
    assert "embedded" not in log.read_text().replace("to finish embedding", "")  # it embedded nothing itself
