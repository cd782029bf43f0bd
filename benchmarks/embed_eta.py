"""The embedding ETA on uneven real texts: time left by text volume (what the index reports) vs by count.

A vault of LoCoMo dialog turns (short) and SciFact abstracts (long) is indexed without vectors,
then embedded by the index's one embedding loop with the bundled model. At each progress report
the ETA by volume (`ModelHost.eta`) and the ETA a count rate gives are recorded; when the run
has ended, each is divided by the time the rest of the run really took. A ratio of 1.0 is a
perfect forecast; below 1 says "sooner" than it was.

    nice -n 10 python -m benchmarks.embed_eta [--turns 600] [--abstracts 120] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import offline_environment

BENCH = Path("/work/shared/bench")


def _texts(turns: int, abstracts: int) -> dict[str, str]:
    notes: dict[str, str] = {}
    data = json.loads((BENCH / "locomo" / "locomo10-dev.json").read_text(encoding="utf-8"))
    for conv in data:
        c = conv["conversation"]
        for key in [k for k in c if k.startswith("session_") and isinstance(c[k], list)]:
            for turn in c[key]:
                if len(notes) < turns:
                    notes[f"turns/{conv['sample_id']}-{turn['dia_id'].replace(':', '-')}.md"] = (
                        f"{turn['speaker']}: {turn['text']}"
                    )
    with (BENCH / "scifact" / "corpus.jsonl").open(encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i >= abstracts:
                break
            doc = json.loads(line)
            notes[f"papers/{doc['_id']}.md"] = f"# {doc['title']}\n\n{doc['text']}"
    return notes


def run_once(notes: dict[str, str]) -> dict[str, float]:
    from explorer.config import Settings
    from explorer.index.local.vault_index import VaultIndex

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "vault"
        for path, text in notes.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text, encoding="utf-8")
        index = VaultIndex(root, Settings())
        index.open()
        emb = index.embedder()
        assert emb is not None, index.model_error
        emb.encode(["warm up"] * 8)
        seen: list[tuple[float, int, int, float | None]] = []
        t0 = time.monotonic()
        index.embed_pending(
            progress=lambda _s, d, t: seen.append((time.monotonic() - t0, d, t, index.model.eta()))
        )
        end = time.monotonic() - t0
        index.close()
    by_volume, by_count = [], []
    for at, done, total, eta in seen:
        left = end - at
        if done >= total or done < total * 0.1 or eta is None or left <= 0:
            continue
        by_volume.append(eta / left)
        by_count.append(at * (total - done) / done / left)
    return {
        "texts": seen[-1][2] if seen else 0,
        "seconds": round(end, 1),
        "reports": len(by_volume),
        "volume_median": round(statistics.median(by_volume), 2),
        "volume_min": round(min(by_volume), 2),
        "count_median": round(statistics.median(by_count), 2),
        "count_min": round(min(by_count), 2),
    }


def main() -> None:
    offline_environment()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=600)
    ap.add_argument("--abstracts", type=int, default=120)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    notes = _texts(args.turns, args.abstracts)
    for _ in range(args.runs):
        print(json.dumps(run_once(notes)), flush=True)


if __name__ == "__main__":
    main()
