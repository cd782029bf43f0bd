"""Shared fixtures: a private copy of sample_vault, one embedding model per session, an indexed sample vault,
and the app tests' set-up (the app as tests build it, a warm index folder, waiting helpers)."""

from __future__ import annotations

import asyncio
import fcntl
import functools
import hashlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from golden_update import set_test_environment

if TYPE_CHECKING:
    from explorer.config import Settings
    from explorer.search.schema import SearchResults
    from explorer.tui.app import ExplorerApp
    from explorer.tui.widgets.results import ResultsList

# Offline model, and no test may reach an LLM endpoint it did not start itself.
set_test_environment()
# Every process of the run (the workers, and each command a test starts) keeps the bytecode it compiles:
# with PYTHONDONTWRITEBYTECODE set, each would compile Explorer's modules again, and each worker would
# rewrite every test module's asserts again (~0.5 s a command, ~11 s a worker).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# A run started in the background by a script (`make test &`, nohup, a CI runner's shell) inherits
# SIGINT ignored, and so would every process the tests start: a `milvus-lite server` stopped with
# Ctrl-C as its operator stops it would go on running (each stop waited its 30 s bound, then killed
# the server: minutes of a run), and an `explorer` child would not hear the Ctrl-C a test sends it.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parent.parent
SAMPLE_VAULT = REPO / "sample_vault"
TESTS = Path(__file__).resolve().parent


def write_notes(root: Path, notes: Mapping[str, str]) -> Path:
    """Write {vault-relative path: text} under `root` (folders made as needed); returns `root`."""
    for rel, text in notes.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root


def turn_notes(said: Sequence[tuple[str, str]], per_session: int = 4) -> dict[str, str]:
    """Conversation turns as notes ({path: text}): each (speaker, text) a turn with its `turn_id`, `speaker`,
    `session` (`per_session` turns to a session) and `date` (session n on 2023-05-n), written `Speaker: text`."""
    notes = {}
    for i, (speaker, text) in enumerate(said):
        number, session = i + 1, 1 + i // per_session
        front = f"---\nturn_id: {number}\nspeaker: {speaker}\nsession: {session}\ndate: 2023-05-{session:02d}\n---\n"
        notes[f"Users/{speaker}/turns/turn_{number:06d}/context.md"] = f"{front}{speaker}: {text}\n"
    return notes


@contextmanager
def embedded_index(vault: Path, embedder: Any) -> Iterator[Any]:
    """The vault's index at its own settings, opened with every shard embedded by `embedder`; closed after."""
    from explorer.config import load_settings
    from explorer.index.local.vault_index import VaultIndex

    index = VaultIndex(vault, load_settings(vault), embedder=embedder)
    index.open()
    try:
        index.embed_pending()
        yield index
    finally:
        index.close()


def copy_vault(src: Path, dst: Path) -> Path:
    """Copy a vault without its index folder."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".explorer"), symlinks=True)
    return dst


class CountingEmbedder:
    """The real model, recording each batch of texts it is asked to embed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_id, self.dim, self.runtime = inner.model_id, inner.dim, inner.runtime
        self.batches: list[list[str]] = []

    @property
    def calls(self) -> int:
        """How many batches were asked for."""
        return len(self.batches)

    @property
    def texts(self) -> int:
        """How many texts were asked for."""
        return sum(len(batch) for batch in self.batches)

    def encode(self, texts: Any, batch_size: int = 32) -> Any:
        self.batches.append(list(texts))
        return self.inner.encode(texts, batch_size)


@pytest.fixture(scope="session")
def embedder():
    """The bundled all-MiniLM-L6-v2 through the ONNX runtime, loaded once per test session."""
    from explorer.index.local.embed import load_embedder

    return load_embedder(None, "onnx")


class RememberingEmbedder:
    """The real model, answering a text it has embedded before with the vector it gave then: tests that
    write the same long notes into fresh vaults have each text embedded once per test process, or once
    per test run with `folder` (a folder every worker process of the run shares, one file a text)."""

    def __init__(
        self, inner: Any, folder: Path | None = None, known: Mapping[str, Any] | None = None
    ) -> None:
        self.inner = inner
        self.model_id, self.dim, self.runtime = inner.model_id, inner.dim, inner.runtime
        self.folder = folder
        self.known = known or {}  # vectors by the sha256 of their text (sample_vectors())
        self._vectors: dict[str, Any] = {}

    def _file(self, text: str) -> Path | None:
        if self.folder is None:
            return None
        return self.folder / (text_key(text) + ".npy")

    def _recall(self, text: str) -> bool:
        """Whether a vector of `text` is known (taking it from the shared folder if another process left it)."""
        import numpy as np

        if text in self._vectors:
            return True
        kept = self.known.get(text_key(text))
        if kept is not None:
            self._vectors[text] = kept
            return True
        file = self._file(text)
        if file is None or not file.exists():
            return False
        self._vectors[text] = np.load(file)
        return True

    def encode(self, texts: Any, batch_size: int = 32) -> Any:
        import numpy as np

        texts = list(texts)
        new = [t for t in dict.fromkeys(texts) if not self._recall(t)]
        if new:
            vectors = self.inner.encode(new, batch_size)
            self._vectors.update(zip(new, vectors))
            for text, vector in zip(new, vectors):
                file = self._file(text)
                if file is not None:  # whole files only: written aside, then renamed into place
                    part = file.with_suffix(f".{os.getpid()}.part")
                    with open(part, "wb") as fh:
                        np.save(fh, vector)
                    os.replace(part, file)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._vectors[t] for t in texts])


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


SAMPLE_VECTORS = Path(__file__).resolve().parent / "data" / "sample-vectors.npz"
"""The model's vector of every text the index of sample_vault embeds, by the sha256 of the text, as this
model computed them (`python tests/sample_vectors.py` writes the file again after sample_vault changes;
tests/test_sample_vectors.py checks that it covers the vault and matches the model). Embedding the
vault takes ~45 s of CPU, which every run would otherwise spend before its first app test."""


WRITER_VECTORS = SAMPLE_VECTORS.with_name("writer-vectors.npz")
"""As SAMPLE_VECTORS, the vectors of the texts the writer's link scorer embeds when it fits on
sample_vault's links (~500 queries: ~7 s of CPU in the run's first writer)."""


@functools.cache
def sample_vectors(model_id: str) -> dict[str, Any]:
    """The stored vectors of sample_vault's texts for `model_id` (empty for another model)."""
    import numpy as np

    known: dict[str, Any] = {}
    for path in (SAMPLE_VECTORS, WRITER_VECTORS):
        if path.exists():
            with np.load(path) as data:
                if str(data["model_id"]) == model_id:
                    known.update(zip((str(k) for k in data["keys"]), data["vectors"]))
    return known


@pytest.fixture(scope="session")
def remembering_embedder(tmp_path_factory: pytest.TempPathFactory, embedder) -> RememberingEmbedder:
    """The session's model behind a memory of the texts it embedded, shared by the run's worker processes
    (for the app tests' long notes and writing mode)."""
    folder = (_run_shared_folder(tmp_path_factory) or tmp_path_factory.getbasetemp()) / "remembered-vectors"
    folder.mkdir(exist_ok=True)
    return RememberingEmbedder(embedder, folder, sample_vectors(embedder.model_id))


@pytest.fixture()
def cli_model(
    monkeypatch: pytest.MonkeyPatch, remembering_embedder: RememberingEmbedder
) -> RememberingEmbedder:
    """The bundled model, as the command line and the engine load it in this test's process, is the
    session's remembering one: each load of the ONNX model costs ~0.3 s of CPU, and a text (a query,
    a rerank pass's sentence window) is embedded once per run. Another model or runtime loads as usual."""
    from explorer.index.local import model_host
    from explorer.index.local.embed import DEFAULT_MODEL_ID

    real = model_host.load_embedder

    def load(model: str | None = None, runtime: str = "auto", *args: Any, **kwargs: Any) -> Any:
        if model in (None, DEFAULT_MODEL_ID) and runtime in ("auto", "onnx"):
            return remembering_embedder
        return real(model, runtime, *args, **kwargs)

    monkeypatch.setattr(model_host, "load_embedder", load)
    return remembering_embedder


@pytest.fixture(scope="session")
def sample_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A read-only-by-convention copy of sample_vault shared by the session (do not modify)."""
    return copy_vault(SAMPLE_VAULT, tmp_path_factory.mktemp("sample") / "vault")


def _run_shared_folder(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """A folder shared by every worker process of this test run (None when the run has one process)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    return tmp_path_factory.getbasetemp().parent


@pytest.fixture(scope="session")
def sample_index_folder(tmp_path_factory: pytest.TempPathFactory, embedder) -> Path:
    """An index folder of sample_vault with every shard embedded, built once per test run: the first
    worker process to ask builds it (its vectors taken from SAMPLE_VECTORS, any text missing there
    embedded by the model) while the others wait, then each copies it."""
    from explorer.index.local.vault_index import VaultIndex

    shared = _run_shared_folder(tmp_path_factory)
    where = (shared or tmp_path_factory.getbasetemp()) / "sample-index"
    with open(where.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (where / "built").exists():
            shutil.rmtree(where, ignore_errors=True)
            vault = copy_vault(SAMPLE_VAULT, where / "vault")
            known = RememberingEmbedder(embedder, known=sample_vectors(embedder.model_id))
            index = VaultIndex(vault, embedder=known)
            index.open()
            index.embed_pending()
            index.close()
            (where / "built").touch()
    return where / "vault" / ".explorer"


@pytest.fixture(scope="session")
def sample_index(sample_copy: Path, sample_index_folder: Path, embedder):
    """The sample vault indexed with vectors (shared; do not modify its files). Its index folder starts
    as a copy of the run's `sample_index_folder`, so opening it embeds nothing."""
    from explorer.index.local.vault_index import VaultIndex

    if not (sample_copy / ".explorer").exists():
        shutil.copytree(sample_index_folder, sample_copy / ".explorer")
    index = VaultIndex(sample_copy, embedder=embedder)
    index.open()
    index.embed_pending()
    yield index
    index.close()


@pytest.fixture()
def vault_copy(tmp_path: Path) -> Path:
    """A fresh, writable copy of sample_vault for one test."""
    return copy_vault(SAMPLE_VAULT, tmp_path / "vault")


def seed_vectors(vault: Path, sample_index) -> None:
    """Open `vault`'s index and cache in it every vector of the shared sample index (nothing embedded)."""
    from explorer.config import Settings
    from explorer.index.local.vault_index import VaultIndex

    index = VaultIndex(vault, Settings(), embedder=None)
    index.open()
    with sample_index.snapshot() as snap:
        hashes = {s.hash for s in snap.shards.values()}
    index.store.put_vectors(
        sample_index.model_id, sample_index.store.get_vectors(sample_index.model_id, hashes)
    )
    index.close()


# The app tests' warm index, shared by every tests/test_tui*.py.
@pytest.fixture(scope="session")
def warm_cache(tmp_path_factory: pytest.TempPathFactory, sample_index) -> Path:
    """An index folder for sample_vault with every vector cached (taken from the shared sample index)."""
    vault = copy_vault(SAMPLE_VAULT, tmp_path_factory.mktemp("tui-warm") / "vault")
    seed_vectors(vault, sample_index)
    return vault / ".explorer"


@pytest.fixture()
def tui_vault(vault_copy: Path, warm_cache: Path) -> Path:
    """A fresh, writable copy of sample_vault whose index opens warm (nothing to parse or embed)."""
    shutil.copytree(warm_cache, vault_copy / ".explorer")
    return vault_copy


@pytest.fixture(scope="session")
def sample_pipeline(sample_index):
    """A SearchPipeline over the shared sample index (offline defaults)."""
    from explorer.engine import make_pipeline

    return make_pipeline(sample_index, sample_index.settings)


@pytest.fixture
def snapshot(snapshot):
    """syrupy's snapshot, with SVG screenshots compared at the golden tolerance (printed scores may
    differ by one unit of their last digit on another CPU; every tag and all other text exactly)."""
    return _TolerantSnapshots(snapshot)


class _TolerantSnapshots:
    """Hands out the tolerant SVG extension where pytest-textual-snapshot asks for its own."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def use_extension(self, extension_class=None):
        from pytest_textual_snapshot import SVGImageExtension

        if extension_class is SVGImageExtension:
            extension_class = _tolerant_svg_extension()
        return self._inner.use_extension(extension_class)

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


@functools.cache
def _tolerant_svg_extension():
    from pytest_textual_snapshot import SVGImageExtension

    from golden_compare import svg_differences

    class TolerantSVGExtension(SVGImageExtension):
        def matches(self, *, serialized_data, snapshot_data) -> bool:
            if serialized_data == snapshot_data:
                return True
            if not isinstance(serialized_data, str) or not isinstance(snapshot_data, str):
                return False
            return not svg_differences(snapshot_data, serialized_data)

    return TolerantSVGExtension


# -- a full disk (a real tmpfs mount; root only) ------------------------------------------------
def run_mount(*args: str) -> bool:
    """Run `mount` with `args`; whether it worked (it needs root)."""
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


@pytest.fixture()
def tiny_disk(tmp_path: Path):
    """A real 1 MiB tmpfs under tmp_path (skips the test when it cannot be mounted: root only)."""
    where = tmp_path / "tiny"
    where.mkdir()
    if os.geteuid() != 0 or not run_mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)):
        pytest.skip("needs root to mount a small tmpfs")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill_disk(where: Path) -> Path:
    """Write zeros under `where` until the disk is full; returns the filler file."""
    filler = where / "filler"
    with open(filler, "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass
    return filler


# -- the app under test (run headless with Pilot) ------------------------------------------------
SIZE = (120, 40)


def sync(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run an async test in its own event loop (no asyncio plugin needed)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def quiet_settings(**overrides: Any) -> Settings:
    """Deterministic settings: reranking (time-budgeted) off unless asked for."""
    from explorer.config import Settings

    return Settings().with_overrides({"rerank.enabled": False, **overrides})


def make_app(vault: Path, embedder: Any, tmp_path: Path, **kwargs: Any) -> ExplorerApp:
    """The app as the tests build it: no watcher, shipped themes only, a private state file."""
    from explorer.tui.app import ExplorerApp
    from explorer.tui.themes import SHIPPED_THEMES_DIR

    kwargs.setdefault("settings", quiet_settings())
    kwargs.setdefault("state_path", tmp_path / "state.json")
    kwargs.setdefault("theme_dirs", [SHIPPED_THEMES_DIR])
    kwargs.setdefault("watch", False)
    return ExplorerApp(vault, kwargs.pop("settings"), embedder=embedder, **kwargs)


async def settle(app: ExplorerApp, pilot: Any, rounds: int = 3) -> None:
    """Let timers fire and every worker finish, a few times over (workers start workers)."""
    from textual.worker import WorkerFailed

    for _ in range(rounds):
        await pilot.pause(0.05)
        try:
            await app.workers.wait_for_complete()
        except WorkerFailed:
            pass  # the app reports worker errors itself; tests assert on that
    await pilot.pause()


async def wait_for(pilot: Any, predicate, timeout: float = 60.0) -> None:
    """Pause until `predicate()` holds (fails the test after `timeout` seconds: a bound for a stuck
    app, generous because a loaded machine can take tens of seconds to index and load the model)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await pilot.pause(0.05)


async def open_note(app: ExplorerApp, pilot: Any, path: str, cursor: int | None = None) -> None:
    """Ask the app to open `path` (at `cursor`) and wait until the note view has drawn a first frame."""
    from explorer.tui.messages import OpenNote
    from explorer.tui.screens.note import NoteScreen

    app.post_message(OpenNote(path, cursor))
    await wait_for(
        pilot, lambda: isinstance(app.screen, NoteScreen) and app.screen.first_screen_s is not None
    )


async def search(app: ExplorerApp, pilot: Any, query: str, typing: bool = False) -> SearchResults:
    """Put `query` in the search box (typed key by key with `typing`) and wait for the final results."""
    from explorer.tui.widgets.search_box import SearchBox

    box = app.main_screen.query_one(SearchBox)
    box.focus()
    if typing:
        box.value = ""
        await pilot.press(*query)
    else:
        box.value = query
    await pilot.pause(0.25)
    screen = app.main_screen
    if not query.startswith("/"):
        # On a loaded machine the debounce timer can fire late: wait for this query's final results.
        await wait_for(
            pilot,
            lambda: (
                screen.results is not None and screen.results.query == query and screen.stage != "lexical"
            ),
            timeout=60.0,
        )
    await settle(app, pilot)
    assert screen.results is not None
    return screen.results


def option_text(results_list: ResultsList, i: int = 0) -> str:
    """The plain text of the i-th result's prompt."""
    option = results_list.get_option(f"r{i + 1}")
    return str(option.prompt)


# -- the order the files are handed to the worker processes (`make test`: -n 3 --dist loadfile) --------
SLOW_FILES = (
    "test_tui.py",
    "test_milvus.py",
    "test_tui_firstscreen.py",
    "test_milvus_faults.py",
    "test_tui_snapshots.py",
    "test_tui_layout.py",
    "test_tui_keys.py",
    "test_embed.py",
    "test_faults_engine.py",
    "sensible/test_sensible_screen.py",
    "test_lifecycle.py",
    "test_style.py",
    "test_embed_owner.py",
    "test_tui_views.py",
    "test_mcp_http.py",
    "test_watch.py",
    "test_browser_serve.py",
    "test_tui_progressive.py",
    "test_vaultfiles.py",
    "test_milvus_reader.py",
    "test_terminal_safety.py",
    "test_milvus_oneshot.py",
    "test_exit_codes.py",
    "sensible/test_sensible_faults.py",
)
"""The files that take longest, longest first (wall time per file, measured in a run), those that mostly
wait on processes they start (engines, servers, commands) between those that keep a core busy: each
worker takes the next file when it finishes one, so the long ones go first and the short ones fill in
at the end, instead of one long file keeping a worker busy while the others have nothing left to do."""


def pytest_configure(config: pytest.Config) -> None:
    # xdist would hand out the files by their number of tests, most first: the order below replaces it.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files in SLOW_FILES first, in its order; then the others, most tests first (xdist's own
    order); the tests of each file keep their order."""
    counts: dict[Path, int] = {}
    for item in items:
        counts[item.path] = counts.get(item.path, 0) + 1

    def rank(item: pytest.Item) -> tuple[int, int]:
        name = item.path.relative_to(TESTS).as_posix() if item.path.is_relative_to(TESTS) else ""
        if name in SLOW_FILES:
            return (0, SLOW_FILES.index(name))
        return (1, -counts[item.path])

    items.sort(key=rank)
