"""Building the parts: settings + index + pipeline (+ its optional LLM and reranker parts)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from explorer.config import Settings

if TYPE_CHECKING:
    from explorer.index.backend import BatchReport, Encoder, IndexBackend
    from explorer.search.core.llm import LLMClient
    from explorer.search.core.pipeline import Analyser, Reranker, SearchPipeline
    from explorer.search.core.terms import SearchTerms

# The index and pipeline modules (numpy, the model runtime) are imported where they are used, so
# that a one-shot command asking a running process pays only for this package.

Progress = Callable[[str, int, int], object]
"""A progress hook: (stage, done, total)."""


def _to_stderr(message: str) -> None:
    print(f"explorer: {message}", file=sys.stderr)


def _local_index(
    vault: Path,
    settings: Settings,
    embedder: Encoder | None,
    on_message: Callable[[str], None],
    interactive: bool,
    one_shot: bool,
) -> IndexBackend:
    from explorer.index.local.vault_index import VaultIndex

    return VaultIndex(vault, settings, embedder=embedder, on_message=on_message)


def _milvus_index(
    vault: Path,
    settings: Settings,
    embedder: Encoder | None,
    on_message: Callable[[str], None],
    interactive: bool,
    one_shot: bool,
) -> IndexBackend:
    from explorer.index.milvus import MilvusIndex

    return MilvusIndex(
        vault, settings, embedder=embedder, on_message=on_message, interactive=interactive, one_shot=one_shot
    )


BackendFactory = Callable[
    [Path, Settings, "Encoder | None", Callable[[str], None], bool, bool], "IndexBackend"
]
"""Makes a backend's index of a vault, unopened: (vault, settings, embedder, on_message, interactive, one_shot)."""

BACKENDS: dict[str, BackendFactory] = {"local": _local_index, "milvus": _milvus_index}
"""The index backends by their `index.backend` name: a new backend is one entry here (and a name
`explorer.config` accepts). Each module is imported only when its backend is chosen."""


def new_index(
    vault: Path,
    settings: Settings,
    on_message: Callable[[str], None] | None = None,
    embedder: Encoder | None = None,
    interactive: bool = False,
    one_shot: bool = False,
) -> IndexBackend:
    """The index of `vault` by the backend `index.backend` names (`BACKENDS`), not opened yet; store
    messages go to `on_message` (default: stderr).

    `interactive`: an app's index (a Milvus-backed one answers from the vault's own index until its
    engine is ready: `MilvusIndex.interactive`). `one_shot`: a command that searches once or not at
    all and ends (a Milvus-backed one prepares nothing for later searches: `MilvusIndex.one_shot`).
    """
    make = BACKENDS[settings.index.backend]
    return make(vault, settings, embedder, on_message or _to_stderr, interactive, one_shot)


def open_index(
    vault: Path,
    settings: Settings,
    progress: Progress | None = None,
    on_message: Callable[[str], None] | None = None,
    embedder: Any = None,
    load_model: bool = False,
    one_shot: bool = False,
) -> tuple[IndexBackend, BatchReport]:
    """Open (load + refresh) the index of `vault`; closed again if opening fails.

    With `load_model`, the embedding model loads in a background thread meanwhile (for a caller
    that will embed a query right after: the two loads overlap instead of adding up). `one_shot`:
    the command searches once (or not at all) and ends (`new_index`).
    """
    index = new_index(vault, settings, on_message, embedder, one_shot=one_shot)
    if load_model:
        index.load_model_in_background()
    try:
        report = index.open(progress=progress)
    except BaseException:
        index.close()
        raise
    return index, report


def build_components(
    index: IndexBackend, settings: Settings
) -> tuple[Callable[[str], SearchTerms] | None, Analyser | None, Reranker | None]:
    """(term_writer, analyser, reranker) for SearchPipeline; None where the offline default applies.

    Raises ImportError when a configured component's module cannot be loaded (`make_pipeline`
    turns that into a message instead).
    """
    term_writer, analyser, llm = _llm_components(index, settings)
    return term_writer, analyser, _reranker(index, settings, llm)


def _llm_components(
    index: IndexBackend, settings: Settings
) -> tuple[Callable[[str], SearchTerms] | None, Analyser | None, LLMClient | None]:
    """(term_writer, analyser, llm client) as configured; Nones without an LLM."""
    term_writer = analyser = llm = None
    if settings.llm.configured:
        from explorer.search.core.llm import LLMClient, llm_analyser, llm_term_writer

        llm = LLMClient(settings.llm)
        term_writer = llm_term_writer(llm, index, settings)
        if settings.experimental.analyser in ("auto", "llm"):
            analyser = llm_analyser(llm, index, settings)
    elif settings.experimental.analyser == "llm":
        # Asked for but not configured: the analyser falls back and names the reason.
        from explorer.search.core.llm import LLMClient, llm_analyser

        analyser = llm_analyser(LLMClient(settings.llm), index, settings)
    return term_writer, analyser, llm


def _reranker(index: IndexBackend, settings: Settings, llm: LLMClient | None) -> Reranker | None:
    """The configured reranker, or None with `rerank.backend = "none"`."""
    if settings.rerank.backend == "none":
        return None
    from explorer.search.rerank import build_reranker

    return build_reranker(index, settings, llm)


def _failed_import(exc: ImportError) -> str:
    """What could not be imported, in a few words."""
    name = getattr(exc, "name", None)
    detail = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    return f"{name}: {detail}" if name and name not in detail else detail


def make_pipeline(index: IndexBackend, settings: Settings) -> SearchPipeline:
    """The SearchPipeline with the configured term writer, analyser and reranker.

    A component whose module fails to load is left out, and the pipeline says so: the message is
    one of its `notices`, which every search repeats among its warnings (so the CLI, MCP and the
    app all show it). The pipeline module itself failing to load is an error, never silence.
    """
    from explorer.search.core.pipeline import SearchPipeline

    notices: list[str] = []
    term_writer = analyser = llm = reranker = None
    try:
        term_writer, analyser, llm = _llm_components(index, settings)
    except ImportError as exc:
        notices.append(
            f"the LLM could not be loaded ({_failed_import(exc)}): "
            "keyword search terms and the heuristic analysis are used"
        )
    try:
        reranker = _reranker(index, settings, llm)
    except ImportError as exc:
        notices.append(
            f"the reranker could not be loaded ({_failed_import(exc)}): results keep their fused order"
        )
    return SearchPipeline(
        index, settings, term_writer=term_writer, analyser=analyser, reranker=reranker, notices=notices
    )


def open_team_reader(target: str, settings: Settings, load_model: bool = False) -> Any:
    """A read-only team reader (explorer.index.milvus.reader.TeamReader) of the collection `target`
    names (`URI[/COLLECTION]`; the collection defaults to `index.collection`), connected and its
    statistics read; raises BackendError (one line naming the URI) when it cannot serve.
    """
    import os

    from explorer.index.milvus import TOKEN_ENV
    from explorer.index.milvus.reader import TeamReader, split_target

    uri, collection = split_target(target, settings.index.collection)
    reader = TeamReader(uri, collection, settings, os.environ.get(TOKEN_ENV, ""))
    if load_model:
        reader.load_model_in_background()
    try:
        return reader.open()
    except BaseException:
        reader.close()
        raise
