"""A process that embeds a vault with the real model, holding each batch until the test lets it go.

Run as `python tests/gated_owner.py VAULT GATE_DIR [ROLE]`: opens the vault's index, and starts
embedding; before its first model batch it writes `GATE_DIR/started` (it holds the embedding lock
by then) and waits for `GATE_DIR/go`. At the end it prints one JSON line: texts embedded, shard
vectors taken from another process, the shards left without a vector.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from golden_update import set_test_environment

set_test_environment()


class GatedEmbedder:
    """The real model; its first batch waits for the gate file `go`."""

    def __init__(self, inner: Any, gate: Path) -> None:
        self.inner, self.gate = inner, gate
        self.model_id, self.dim, self.runtime = inner.model_id, inner.dim, inner.runtime
        self.opened = False

    def encode(self, texts: Any, batch_size: int = 32) -> Any:
        if not self.opened:
            (self.gate / "started").write_text("started")
            while not (self.gate / "go").exists():
                time.sleep(0.02)
            self.opened = True
        return self.inner.encode(texts, batch_size)


def main() -> int:
    vault, gate = Path(sys.argv[1]), Path(sys.argv[2])
    from explorer.config import load_settings
    from explorer.index.local.embed import load_embedder
    from explorer.index.local.vault_index import VaultIndex

    if len(sys.argv) > 3:
        try:
            from explorer.index.local.store.owner import name_this_process
        except ImportError:  # a version without an embedding owner
            pass
        else:
            name_this_process(sys.argv[3])
    index = VaultIndex(vault, load_settings(vault), embedder=GatedEmbedder(load_embedder(None, "onnx"), gate))
    index.open()
    done = index.embed_pending()
    run = getattr(index, "embed_run", None)
    st = index.stats()
    index.close()
    print(json.dumps({"embedded": done, "borrowed": run.borrowed if run else 0, "missing": st.pending}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
