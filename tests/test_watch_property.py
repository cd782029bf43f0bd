"""Random create/edit/rename/delete sequences on a watched vault: the live index equals a fresh build."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from explorer.config import Settings
from explorer.engine.watch import VaultWatcher
from explorer.index.local.vault_index import VaultIndex
from explorer.text.tokenize import tokenize

# watchdog's own notice when a new folder is registered twice during its recursive walk.
pytestmark = pytest.mark.filterwarnings("ignore:Callback with id:RuntimeWarning")
FAST = Settings().with_overrides({"index.embeddings": False, "experimental.watch_debounce_ms": 100})
VOCAB = (
    "otter",
    "heron",
    "lichen",
    "granite",
    "harbour",
    "violin",
    "ember",
    "quartz",
    "meadow",
    "copper",
    "saffron",
    "glacier",
    "tundra",
    "falcon",
    "willow",
    "cobalt",
)
FOLDERS = ("", "Notes", "Notes/Deep", "Archive", "Inbox/Sub")
NAMES = ("alpha", "beta", "gamma", "delta", "epsilon")

words = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=10)


def note_text(title: str, body: list[str], section: list[str]) -> str:
    """A note with one or two sections, so notes cut into one or several shards."""
    text = f"# {title}\n\n{' '.join(body)}\n"
    if section:
        text += f"\n## Part\n\n{' '.join(section)}\n"
    return text


class WatchedVault(RuleBasedStateMachine):
    """A real tmp vault under a running VaultWatcher, and a model of which notes exist."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="explorer-watch-prop-"))
        self.root = self.tmp / "vault"
        self.root.mkdir()
        self.files: set[str] = set()
        self.written: set[str] = set()
        self.checks = 0
        self.errors: list[str] = []
        self.index = VaultIndex(self.root, FAST)
        self.watcher = VaultWatcher(self.index, on_error=self.errors.append)
        self.watcher.start()
        assert self.watcher.wait_idle(120)

    # -- file operations ------------------------------------------------------------------
    def _write(self, rel: str, text: str, atomic: bool = False) -> None:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if atomic:
            tmp = p.with_name(f".{p.name}.tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, p)
        else:
            p.write_text(text, encoding="utf-8")
        self.files.add(rel)
        self.written.update(text.replace("#", " ").split())

    @rule(
        folder=st.sampled_from(FOLDERS),
        name=st.sampled_from(NAMES),
        body=words,
        section=st.lists(st.sampled_from(VOCAB), max_size=6),
    )
    def create(self, folder: str, name: str, body: list[str], section: list[str]) -> None:
        rel = f"{folder}/{name}.md" if folder else f"{name}.md"
        self._write(rel, note_text(name.title(), body, section))

    @precondition(lambda self: self.files)
    @rule(
        data=st.data(), body=words, section=st.lists(st.sampled_from(VOCAB), max_size=6), atomic=st.booleans()
    )
    def edit(self, data: st.DataObject, body: list[str], section: list[str], atomic: bool) -> None:
        rel = data.draw(st.sampled_from(sorted(self.files)))
        self._write(rel, note_text("Edited", body, section), atomic=atomic)

    @precondition(lambda self: self.files)
    @rule(data=st.data(), folder=st.sampled_from(FOLDERS), name=st.sampled_from(NAMES))
    def rename(self, data: st.DataObject, folder: str, name: str) -> None:
        src = data.draw(st.sampled_from(sorted(self.files)))
        dest = f"{folder}/{name}.md" if folder else f"{name}.md"
        if dest == src:
            return
        (self.root / dest).parent.mkdir(parents=True, exist_ok=True)
        os.rename(self.root / src, self.root / dest)
        self.files.discard(src)
        self.files.add(dest)

    @precondition(lambda self: self.files)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        rel = data.draw(st.sampled_from(sorted(self.files)))
        (self.root / rel).unlink()
        self.files.discard(rel)

    @precondition(lambda self: any("/" in f for f in self.files))
    @rule(data=st.data(), dest=st.sampled_from(("Moved", "Notes2", "Archive/Old")))
    def rename_folder(self, data: st.DataObject, dest: str) -> None:
        top = data.draw(st.sampled_from(sorted({f.split("/", 1)[0] for f in self.files if "/" in f})))
        if (self.root / dest).exists() or dest.startswith(top + "/"):
            return
        (self.root / dest).parent.mkdir(parents=True, exist_ok=True)
        os.rename(self.root / top, self.root / dest)
        self.files = {f"{dest}/{f[len(top) + 1 :]}" if f.startswith(top + "/") else f for f in self.files}

    @precondition(lambda self: any("/" in f for f in self.files))
    @rule(data=st.data())
    def delete_folder(self, data: st.DataObject) -> None:
        top = data.draw(st.sampled_from(sorted({f.split("/", 1)[0] for f in self.files if "/" in f})))
        shutil.rmtree(self.root / top)
        self.files = {f for f in self.files if not f.startswith(top + "/")}

    @rule()
    def settle_and_compare(self) -> None:
        self.compare()

    # -- the property ---------------------------------------------------------------------
    def compare(self) -> None:
        assert self.watcher.wait_idle(120), f"not idle: {self.watcher.state} {self.errors}"
        self.checks += 1
        fresh_settings = FAST.with_overrides({"index.cache_dir": str(self.tmp / f"fresh{self.checks}")})
        fresh = VaultIndex(self.root, fresh_settings)
        fresh.open()
        # The persisted state: a restart on the live store finds nothing to do.
        restarted = VaultIndex(self.root, FAST)
        report = restarted.open()
        try:
            queries = self._queries()
            live_skipped = self.index.skipped_files()
            with self.index.snapshot() as live:  # what a search reads: one version
                live_notes = set(live.notes)
                live_shards = {k: s.hash for k, s in live.shards.items()}
                live_scores = [live.lexical.scores(tokenize(q), list(live.shards)) for q in queries]
            assert live_notes == self.files, (sorted(live_notes ^ self.files), self.errors)
            assert live_notes == set(fresh.notes)
            assert live_shards == {k: s.hash for k, s in fresh.shards.items()}
            assert live_skipped == fresh.skipped == {}
            for q, live_q in zip(queries, live_scores):
                with fresh.snapshot() as ref_snap:
                    ref = ref_snap.lexical.scores(tokenize(q), list(ref_snap.shards))
                assert live_q.keys() == ref.keys()
                for key, score in ref.items():
                    assert abs(live_q[key] - score) <= 1e-9, (q, key, live_q[key], score)
            assert report.empty, (report.added, report.changed, report.removed)
            assert set(restarted.notes) == live_notes
            assert {k: s.hash for k, s in restarted.shards.items()} == live_shards
        finally:
            fresh.close()
            restarted.close()
        assert self.errors == []

    def _queries(self) -> list[str]:
        pool = sorted(w for w in self.written if w.isalpha() and w.lower() in VOCAB)
        if not pool:
            return ["otter"]
        picks = pool[:: max(1, len(pool) // 3)][:3]
        return [*picks, " ".join(pool[-2:])]

    def teardown(self) -> None:
        try:
            self.compare()
        finally:
            self.watcher.stop()
            self.index.close()
            shutil.rmtree(self.tmp, ignore_errors=True)


WatchedVault.TestCase.settings = settings(
    max_examples=15,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestWatchedVault = WatchedVault.TestCase
