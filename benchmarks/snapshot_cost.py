"""Snapshot cost: taking one per search, and what a change batch pays when it lands while one is held.

Run with ``python -m benchmarks.snapshot_cost --vault DIR [--edits 30] [--takes 2000]``, on a copy
of a generated speed vault (``bench-out/speed-vault-<N>``; the notes are edited in place).

Measures, in one process on a lexical index (no model): `VaultIndex.snapshot()` + `release()`
(what every search adds), and one-note change batches (`refresh(paths=[...])`, what save ->
searchable costs in the indexer) alternately with no snapshot held and with one held, so that the
batch forks what it changes (copy-on-write of the tables, the BM25 slot tables, the vector slot
tables). Medians and p95 of each, and the paired ratio held / free.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import DEFAULT_OUT, log, machine, summary, write_json
from explorer.config import Settings
from explorer.index.local.vault_index import VaultIndex


def run(vault: Path, edits: int, takes: int) -> dict:
    settings = Settings().with_overrides({"index.embeddings": False})
    index = VaultIndex(vault, settings)
    t = time.perf_counter()
    index.open()
    opened = time.perf_counter() - t
    notes = sorted(index.note_titles())
    take: list[float] = []
    for _ in range(takes):
        t = time.perf_counter()
        snap = index.snapshot()
        snap.release()
        take.append((time.perf_counter() - t) * 1e6)
    rng = random.Random(7)
    free: list[float] = []
    held: list[float] = []
    for i in range(edits):
        for hold in (False, True) if i % 2 == 0 else (True, False):
            path = rng.choice(notes)
            p = vault / path
            p.write_text(p.read_text(encoding="utf-8") + f"\nedit {i} {hold} zzbench{i}\n", encoding="utf-8")
            snap = index.snapshot() if hold else None
            t = time.perf_counter()
            index.refresh(paths=[path], reread=True)
            ms = (time.perf_counter() - t) * 1000
            if snap is not None:
                snap.release()
            (held if hold else free).append(ms)
    counts = index.stats()
    index.close()
    out = {
        "notes": counts.notes,
        "shards": counts.shards,
        "open_s": round(opened, 2),
        "snapshot_us": summary(take),
        "batch_free_ms": summary(free),
        "batch_held_ms": summary(held),
        "held_over_free_median": round(summary(held)["median"] / summary(free)["median"], 3),
        "machine": machine(),
    }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.snapshot_cost", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--vault", type=Path, required=True)
    parser.add_argument("--edits", type=int, default=30)
    parser.add_argument("--takes", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    result = run(args.vault, args.edits, args.takes)
    log(str(result))
    write_json(args.out / "snapshot_cost.json", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
