"""The engine session: one object runs index, pipeline, watcher, embedding loop and server; served answers equal local ones.

The golden cases of `explorer search` are run through the command line while a session serves
the golden vault: the command rebuilds each served answer (`SearchResults.from_dict`) and prints
it itself, and every output must equal its golden file (tests/golden_compare.py) as the same
command opening the index itself does (tests/test_golden.py).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conftest import seed_vectors, write_notes
from explorer.config import load_settings
from explorer.engine import Session, SessionHooks
from explorer.engine.server import socket_path
from explorer.search.schema import SearchResults
from golden_compare import differences
from golden_update import CASES, golden_path, prepare_vault, run_case, set_test_environment

SEARCH_CASES = sorted(name for name, argv in CASES.items() if argv[0] == "search")

# What only says which process answered a lexical search: the serving one has its model loaded
# for other searches; a lexical command alone never loads it.
PROCESS_STATE = ('"model_state": ', '"runtime": ')


@pytest.fixture()
def runtime(monkeypatch: pytest.MonkeyPatch):
    folder = Path(tempfile.mkdtemp(prefix="xs"))  # short: socket paths are limited to 107 bytes
    folder.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


class Counted:
    """A pipeline that counts the searches it answers (the real one underneath)."""

    def __init__(self, pipeline: Any) -> None:
        self.pipeline = pipeline
        self.searches = 0

    def search(self, *args: Any, **kwargs: Any) -> Any:
        self.searches += 1
        return self.pipeline.search(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pipeline, name)


def _lines_without_process_state(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not any(p in line for p in PROCESS_STATE))


def test_served_answers_print_as_the_goldens(tmp_path: Path, runtime: Path, sample_index, cli_model) -> None:
    set_test_environment()
    vault = prepare_vault(tmp_path / "vault", seed=lambda v: seed_vectors(v, sample_index))
    counted: list[Counted] = []

    def factory(index: Any, settings: Any) -> Counted:
        from explorer.engine import make_pipeline

        counted.append(Counted(make_pipeline(index, settings)))
        return counted[-1]

    session = Session(vault, load_settings(vault), pipeline_factory=factory)
    session.open(defer=True)  # as `explorer watch` runs: the watcher's first batch opens the index
    session.start(watch=True, embed=True, serve=True)
    try:
        assert session.server is not None and socket_path(vault).exists()
        session.sync()
        assert session.embedding is not None and session.embedding.wait_idle(120)
        failures = []
        served = 0
        for name in SEARCH_CASES:
            before = counted[0].searches
            actual = run_case(name, vault)
            if counted[0].searches > before:
                served += 1
            expected = golden_path(name).read_text(encoding="utf-8")
            diff = differences(expected, actual)
            if diff and "--lexical" in CASES[name]:
                diff = differences(
                    _lines_without_process_state(expected), _lines_without_process_state(actual)
                )
            if diff:
                failures.append(f"{name}: " + "\n".join(diff[:5]))
        assert not failures, "\n".join(failures)
        # Every case but those run with other settings (`--set`) was answered by the session.
        assert served == sum(1 for n in SEARCH_CASES if "--set" not in CASES[n])
    finally:
        session.close()
    assert not socket_path(vault).exists()


def _query(argv: list[str]) -> str:
    """The query words of a `search` case (its flags and their values left out)."""
    words, skip = [], False
    for arg in argv[1:]:
        if skip:
            skip = False
        elif arg in ("--set", "-k"):
            skip = True
        elif not arg.startswith("-"):
            words.append(arg)
    return " ".join(words)


def test_from_dict_rebuilds_real_results(sample_pipeline: Any) -> None:
    """from_dict(to_dict(r)) == r for the goldens' queries (timings to the microsecond, as the JSON keeps them)."""
    queries = {_query(CASES[n]) for n in SEARCH_CASES}
    assert len(queries) > 20
    for query in sorted(queries):
        results = sample_pipeline.search(query, record=False)
        data = json.loads(json.dumps(results.to_dict()))
        rebuilt = SearchResults.from_dict(data)
        rounded = replace(results, timings_ms={k: round(v, 3) for k, v in results.timings_ms.items()})
        assert rebuilt == rounded, query
        assert rebuilt.to_dict() == data
        assert [b.text for r in rebuilt.results for b in r.badges()] == [
            b.text for r in results.results for b in r.badges()
        ]


def test_from_dict_refuses_what_is_not_results() -> None:
    for bad in ({}, {"query": "x"}, [], "results"):
        with pytest.raises(ValueError):
            SearchResults.from_dict(bad)  # type: ignore[arg-type]


def test_a_session_keeps_the_index_current_embeds_once_and_closes_every_thread(
    tmp_path: Path, embedder
) -> None:
    root = write_notes(
        tmp_path / "v", {f"n{i}.md": f"# Note {i}\n\nabout kites and topic{i}\n" for i in range(5)}
    )
    settings = load_settings(root, {"experimental.watch_debounce_ms": 50})
    events: dict[str, list[Any]] = {"model": [], "batch": [], "embedded": [], "error": []}
    hooks = SessionHooks(
        on_model=lambda state, detail: events["model"].append(state),
        on_batch=events["batch"].append,
        on_embedded=events["embedded"].append,
        on_error=events["error"].append,
    )
    before = {t.ident for t in threading.enumerate()}
    session = Session(root, settings, embedder=embedder, hooks=hooks)
    assert session.open() is not None
    session.start(watch=True, embed=True, serve=False)
    try:
        assert session.embedding is not None and session.embedding.wait_idle(60)
        assert not session.index.pending() and sum(events["embedded"]) == 5
        # Read-your-writes: a note saved just before a search is found by it.
        (root / "fresh.md").write_text("# Fresh\n\nzeppelins over the harbour\n", encoding="utf-8")
        session.sync()
        top = session.pipeline.search("zeppelins", record=False).results[0]
        assert top.document_path == "fresh.md"
        # The one embedding loop embeds the new shard (woken by the batch), once.
        deadline = time.monotonic() + 60
        while session.index.pending() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert session.embedding.wait_idle(60) and not session.index.pending()
        assert sum(events["embedded"]) == 6 and events["model"][-1] == "ready"
        # A write through the session is applied at once, like a watcher batch.
        (root / "n0.md").write_text("# Note 0\n\nnow about quokkas\n", encoding="utf-8")
        report = session.refresh(paths=["n0.md"], reread=True)
        assert report.changed == ["n0.md"] and events["batch"][-1] is report
        assert session.pipeline.search("quokkas", record=False).results[0].document_path == "n0.md"
        # An edited shard keeps its node_id with a new text: it is embedded again.
        assert session.embedding.wait_idle(60) and not session.index.pending()
        assert sum(events["embedded"]) == 7
        # Paused (as the watcher pauses it while it opens the store again), it embeds nothing
        # until resumed, then what was left.
        session.embedding.pause()
        (root / "later.md").write_text("# Later\n\nmore kites\n", encoding="utf-8")
        session.refresh(paths=["later.md"])
        time.sleep(0.5)
        assert [s.path for s in session.index.pending()] == ["later.md"]
        session.embedding.resume()
        assert session.embedding.wait_idle(60) and not session.index.pending()
        assert sum(events["embedded"]) == 8
    finally:
        session.close()
    assert not events["error"], events["error"]
    left = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert not [n for n in left if n.startswith("explorer-")], left
    session.close()  # closing twice is harmless


def test_a_session_serves_the_vault_and_the_command_line_reads_its_writes(
    tmp_path: Path, runtime: Path
) -> None:
    """`explorer search` (JSON and text) is answered by a session, with a note saved just before it."""
    from golden_update import _run_cli

    root = write_notes(
        tmp_path / "v", {f"n{i}.md": f"# Note {i}\n\nabout kites and topic{i}\n" for i in range(5)}
    )
    settings = load_settings(root, {"index.embeddings": False})
    counted: list[Counted] = []

    def factory(index: Any, s: Any) -> Counted:
        from explorer.engine import make_pipeline

        counted.append(Counted(make_pipeline(index, s)))
        return counted[-1]

    session = Session(root, settings, pipeline_factory=factory)
    session.open(defer=True)  # the watcher's first batch opens the index
    session.start(watch=True, embed=False, serve=True)
    try:
        (root / "fresh.md").write_text("# Fresh\n\nzeppelins over the harbour\n", encoding="utf-8")
        code, out, err = _run_cli(["search", "--vault", str(root), "zeppelins", "--json", "--no-embeddings"])
        assert code == 0, err
        assert json.loads(out)["results"][0]["document_path"] == "fresh.md"
        code, text, err = _run_cli(["search", "--vault", str(root), "zeppelins", "--no-embeddings"])
        assert code == 0 and "fresh.md" in text
        assert counted[0].searches == 2
        # A query the pipeline refuses gets the same message and exit code either way.
        code, _, err = _run_cli(["search", "--vault", str(root), " ", "--no-embeddings"])
        code_local, _, err_local = _run_cli(
            ["search", "--vault", str(root), " ", "--no-embeddings", "--local"]
        )
        assert counted[0].searches == 3 and code == code_local == 2 and err == err_local != ""
    finally:
        session.close()


def test_the_command_line_reaches_a_running_app(tmp_path: Path, runtime: Path) -> None:
    """A running app serves `explorer search` of its vault (text and JSON), a note saved just before included."""
    import asyncio

    from explorer.tui.app import ExplorerApp
    from explorer.tui.themes import SHIPPED_THEMES_DIR
    from golden_update import _run_cli

    root = write_notes(
        tmp_path / "v", {f"n{i}.md": f"# Note {i}\n\nabout kites and topic{i}\n" for i in range(5)}
    )
    settings = load_settings(root, {"index.embeddings": False, "rerank.enabled": False})
    counted: list[Counted] = []

    def factory(index: Any, s: Any) -> Counted:
        from explorer.engine import make_pipeline

        counted.append(Counted(make_pipeline(index, s)))
        return counted[-1]

    app = ExplorerApp(
        root,
        settings,
        pipeline_factory=factory,
        state_path=tmp_path / "state.json",
        theme_dirs=[SHIPPED_THEMES_DIR],
        watch=True,
    )

    async def run() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            while app.status.watcher != "watching" or app.session.server is None:
                await pilot.pause(0.05)
            (root / "fresh.md").write_text("# Fresh\n\nzeppelins over the harbour\n", encoding="utf-8")
            argv = [
                "search",
                "--vault",
                str(root),
                "zeppelins",
                "--no-embeddings",
                "--set",
                "rerank.enabled=false",
            ]
            code, out, err = await asyncio.to_thread(_run_cli, [*argv, "--json"])
            assert code == 0, err
            assert json.loads(out)["results"][0]["document_path"] == "fresh.md"
            code, text, err = await asyncio.to_thread(_run_cli, argv)
            assert code == 0 and "fresh.md" in text
            assert counted[0].searches == 2

    asyncio.run(asyncio.wait_for(run(), 300))
    assert not socket_path(root).exists()


def test_a_session_closed_while_its_index_opens_leaves_nothing_open(tmp_path: Path) -> None:
    """The app can quit while its index is still opening: the opening ends by closing what it opened."""
    from explorer.engine.session import SessionClosed

    root = write_notes(tmp_path / "v", {f"n{i}.md": f"# Note {i}\n\nabout kites\n" for i in range(5)})
    session = Session(root, load_settings(root, {"index.embeddings": False}))
    closed_during: list[bool] = []

    def progress(stage: str, done: int, total: int) -> None:
        if not closed_during:
            session.close()  # as the app's unmount does, from another thread, while this one reads
            closed_during.append(True)

    with pytest.raises(SessionClosed):
        session.open(progress=progress)
    assert closed_during and session.index is None and session.pipeline is not None
    with pytest.raises(SessionClosed):
        session.start()
    # The index folder is free again: another session opens it at once.
    other = Session(root, load_settings(root, {"index.embeddings": False}))
    assert other.open() is not None
    other.close()
