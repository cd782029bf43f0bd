"""One embedding owner per index folder, and a vector store that two processes can share.

Real processes throughout: a gated owner (tests/gated_owner.py: the real model, its first batch
held until the test lets it go), `python -m explorer index`, and store writers and readers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import REPO, write_notes

HELPER = Path(__file__).resolve().parent / "gated_owner.py"

#: Seconds a test waits for a process to reach a step before it fails (a loaded machine is slow).
PATIENCE = 240.0


def small_vault(root: Path, n: int = 6) -> Path:
    """`n` short notes on different subjects (one shard each)."""
    subjects = ["sourdough starters", "hamster cages", "bicycle chains", "tomato seedlings", "tide pools"]
    subjects += ["violin strings", "compost heaps", "lighthouse lamps", "owl pellets", "kayak paddles"]
    return write_notes(
        root,
        {
            f"note-{i}.md": f"# Note {i}\n\nA few lines about {subjects[i % len(subjects)]} and how to care for them.\n"
            for i in range(n)
        },
    )


def env(tmp_path: Path) -> dict[str, str]:
    runtime = tmp_path / "run"
    runtime.mkdir(exist_ok=True, mode=0o700)
    return dict(os.environ, PYTHONPATH=str(REPO), XDG_RUNTIME_DIR=str(runtime))


def wait_for(check, what: str, proc: subprocess.Popen | None = None) -> None:
    """Poll `check()` until true; fail saying `what` (and the process's output if it ended)."""
    end = time.monotonic() + PATIENCE
    while not check():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"{what}: the process ended ({proc.returncode}): {out[-2000:]} {err[-2000:]}")
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting: {what}")
        time.sleep(0.05)


def start_owner(vault: Path, gate: Path, tmp_path: Path, role: str = "") -> subprocess.Popen:
    gate.mkdir(exist_ok=True)
    args = [sys.executable, str(HELPER), str(vault), str(gate)] + ([role] if role else [])
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(tmp_path)
    )
    wait_for(lambda: (gate / "started").exists(), "the owner starts embedding", proc)
    return proc


def start_index(vault: Path, tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    err = tmp_path / "index.err"
    proc = subprocess.Popen(
        [sys.executable, "-m", "explorer", "index", str(vault), "--json"],
        stdout=subprocess.PIPE,
        stderr=err.open("w"),
        text=True,
        env=env(tmp_path),
    )
    return proc, err


def test_index_waits_for_the_owner_then_reads_its_vectors(tmp_path: Path) -> None:
    vault = small_vault(tmp_path / "vault")
    gate = tmp_path / "gate"
    owner = start_owner(vault, gate, tmp_path)
    index, err = start_index(vault, tmp_path)
    try:
        wait_for(lambda: "waiting for" in err.read_text(), "`explorer index` says it waits", index)
        assert f"(pid {owner.pid})" in err.read_text()
        (gate / "go").write_text("go")
        out, _ = index.communicate(timeout=PATIENCE)
        owned = json.loads(owner.communicate(timeout=PATIENCE)[0])
    finally:
        for p in (owner, index):
            if p.poll() is None:
                p.kill()
    report = json.loads(out)
    assert index.returncode == 0, err.read_text()
    assert owned == {"embedded": 6, "borrowed": 0, "missing": 0}
    # Nothing embedded twice: every vector of `explorer index` came from the owner.
    assert report["shards_embedded"] == 0
    assert report["shards_from_cache"] == 6
    assert report["shards_without_vectors"] == 0
    assert f"(pid {owner.pid})" in report["waited_for"]


def test_an_owner_killed_mid_run_leaves_the_lock_free(tmp_path: Path) -> None:
    vault = small_vault(tmp_path / "vault")
    owner = start_owner(vault, tmp_path / "gate", tmp_path)
    owner.send_signal(signal.SIGKILL)  # holding the lock, inside its first model batch
    owner.wait(timeout=PATIENCE)
    index, err = start_index(vault, tmp_path)
    out, _ = index.communicate(timeout=PATIENCE)
    report = json.loads(out)
    assert index.returncode == 0, err.read_text()
    assert "waiting for" not in err.read_text()
    assert report["shards_embedded"] == 6
    assert report["shards_without_vectors"] == 0
    assert report["waited_for"] == ""


def test_a_waiting_process_stops_waiting_when_cancelled(tmp_path: Path, embedder) -> None:
    from explorer.config import load_settings
    from explorer.index.local.vault_index import VaultIndex

    vault = small_vault(tmp_path / "vault")
    gate = tmp_path / "gate"
    owner = start_owner(vault, gate, tmp_path, role="explorer watch")
    heard: list[str] = []
    index = VaultIndex(vault, load_settings(vault), embedder=embedder)
    try:
        index.open()
        done = index.embed_pending(waiting=heard.append, cancelled=lambda: bool(heard))
        assert done == 0
        assert heard == [f"explorer watch (pid {owner.pid})"]
        assert index.stats().pending == 6  # nothing embedded here, nothing the owner wrote yet
        (gate / "go").write_text("go")
        assert json.loads(owner.communicate(timeout=PATIENCE)[0])["embedded"] == 6
        # The owner is done: the next run takes its vectors and embeds nothing.
        assert index.embed_pending(waiting=heard.append) == 0
        assert index.stats().pending == 0
        assert index.embed_run is not None and index.embed_run.borrowed == 6
    finally:
        if owner.poll() is None:
            owner.kill()
        index.close()


def test_the_lock_is_one_per_folder_across_processes(tmp_path: Path) -> None:
    from explorer.index.local.store.owner import EmbedOwner, name_this_process

    folder = tmp_path / "idx"
    folder.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, time
                from pathlib import Path
                from explorer.index.local.store.owner import EmbedOwner, name_this_process
                name_this_process("explorer mcp")
                lock = EmbedOwner(Path({str(folder)!r}))
                assert lock.acquire()
                print("held", flush=True)
                sys.stdin.readline()
                lock.release()
                print("released", flush=True)
                sys.stdin.readline()
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env(tmp_path),
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "held"
        mine = EmbedOwner(folder)
        assert not mine.acquire()
        assert mine.holder() == f"explorer mcp (pid {holder.pid})"
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "released"
        name_this_process("explorer index")
        assert mine.acquire()
        assert mine.acquire()  # held already by this process: taken again, released twice
        mine.release()
        assert mine.held
        mine.release()
        assert not mine.held
        holder.stdin.write("\n")
        holder.stdin.flush()
    finally:
        name_this_process("")
        holder.wait(timeout=PATIENCE)


STORE_WORKER = """
import os, sys, time, random
import numpy as np
from pathlib import Path
from explorer.index.local.store import Store
folder, role, prune = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
go = folder.parent / "go"
(folder.parent / f"ready-{os.getpid()}").touch()
while not go.exists():
    time.sleep(0.005)
until = float(go.read_text())  # the end of the work, set when every process is at the gate
rnd = random.Random(os.getpid())
if role == "write":
    s = Store(folder)
    i = 0
    while i == 0 or time.time() < until:
        s.put_vectors("m", {f"{os.getpid()}-{i + j}": np.random.rand(8).astype("f4") for j in range(16)})
        i += 16
        if prune and rnd.random() < 0.03:
            keep = [h for (h,) in s.conn.execute("SELECT hash FROM vec_rows")]
            s.prune_vectors("m", set(keep[: len(keep) * 3 // 4]))
    s.close()
    print("wrote", i)
else:
    short = 0
    rounds = 0
    while rounds == 0 or time.time() < until:
        rounds += 1
        s = Store(folder)
        for _ in range(5):
            hashes = [h for (h,) in s.conn.execute("SELECT hash FROM vec_rows WHERE model='m'")]
            found, _m = s.get_matrix("m", hashes)
            lost = set(hashes) - set(found)
            # A prune meanwhile may drop rows from the catalogue; a row still catalogued must read.
            short += bool(lost & {h for (h,) in s.conn.execute("SELECT hash FROM vec_rows WHERE model='m'")})
        short += len(s.messages)
        s.close()
    print("short", short)
"""


@pytest.mark.parametrize("prune", [False, True], ids=["append", "append-and-prune"])
def test_two_writers_and_a_reader_share_one_store(tmp_path: Path, prune: bool) -> None:
    """Processes opening a new index folder at once, appending vectors, pruning and reading:
    one database stays (none moved aside as damaged), and every catalogued vector reads back."""
    folder = tmp_path / "idx"
    script = tmp_path / "worker.py"
    script.write_text(STORE_WORKER)
    roles = ["write", "write", "write", "read"]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(folder), role, "1" if prune else "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env(tmp_path),
        )
        for role in roles
    ]
    # Every process imported and at the gate, then 4 s of work at once (each does some, however loaded
    # the machine is).
    end = time.monotonic() + PATIENCE
    while len(list(tmp_path.glob("ready-*"))) < len(roles) and time.monotonic() < end:
        time.sleep(0.05)
    (tmp_path / "go").write_text(str(time.time() + 4))
    outs = [p.communicate(timeout=PATIENCE + 60) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    assert outs[-1][0].split() == ["short", "0"]
    assert not [p.name for p in folder.iterdir() if p.name.startswith("index.sqlite.")]  # none moved aside
    from explorer.index.local.store import Store

    store = Store(folder)
    hashes = [h for (h,) in store.conn.execute("SELECT hash FROM vec_rows")]
    found, _m = store.get_matrix("m", hashes)
    assert len(found) == len(hashes) > 0
    assert store.messages == []
    if not prune:
        written = sum(int(out.split()[1]) for out, _ in outs[:-1])
        assert len(hashes) == written
    store.close()


OPEN_WORKER = """
import os, sys, time
import numpy as np
from pathlib import Path
from explorer.index.local.store import Store
base, start, rounds = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
for k in range(rounds):
    at = start + 0.4 * k
    while at - time.time() > 0.003:  # asleep until just before the moment, then spinning to it
        time.sleep(max(0.0, at - time.time() - 0.003))
    while time.time() < at:
        pass
    s = Store(base / f"idx-{k}")
    s.put_vectors("m", {f"{os.getpid()}-{j}": np.random.rand(8).astype("f4") for j in range(16)})
    s.close()
print("ok")
"""


def test_processes_opening_a_new_index_folder_at_once_keep_one_database(tmp_path: Path) -> None:
    """Several processes opening the same new index folder at the same moment (the app and
    `explorer index` started together on a new vault): none takes the others' new database for
    damage and moves it aside, and every vector each of them wrote is there."""
    script = tmp_path / "opener.py"
    script.write_text(OPEN_WORKER)
    rounds, workers = 12, 4
    start = time.time() + 3.0  # every worker imported by then, on a loaded machine too
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path), str(start), str(rounds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env(tmp_path),
        )
        for _ in range(workers)
    ]
    outs = [p.communicate(timeout=PATIENCE) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    from explorer.index.local.store import Store

    for k in range(rounds):
        folder = tmp_path / f"idx-{k}"
        assert not [p.name for p in folder.iterdir() if p.name.startswith("index.sqlite.")], k
        store = Store(folder)
        hashes = [h for (h,) in store.conn.execute("SELECT hash FROM vec_rows")]
        found, _m = store.get_matrix("m", hashes)
        assert len(found) == len(hashes) == workers * 16, k
        store.close()
