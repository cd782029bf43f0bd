"""The status bar: index state and progress, watcher, model, LLM mode and the last search's timings."""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.widgets import ProgressBar, Static

from explorer.tui.safe import safe_content
from explorer.tui.widgets.steady import steady_update


@dataclass(frozen=True, slots=True)
class StatusInfo:
    """Everything the status bar shows; the app holds one and replaces it on each change."""

    index: str = "opening"
    """`opening`, `ready`, `updating` or `failed`."""
    notes: int = 0
    """Notes indexed."""
    shards: int = 0
    """Shards indexed."""
    stage: str = ""
    """Stage of the running progress (`reading`, `embedding`), or ''."""
    done: int = 0
    """Progress: items finished."""
    total: int = 0
    """Progress: items in all."""
    watcher: str = "off"
    """`watching`, `off`, `unavailable` or `error`."""
    model: str = "not loaded"
    """`not loaded`, `loading`, `embedding`, `waiting`, `ready`, `off` or `unavailable`."""
    waiting_for: str = ""
    """While `waiting`: the other process embedding into the same index (its vectors come in as it goes)."""
    runtime: str = ""
    """Embedding runtime once loaded (onnx, sentence-transformers)."""
    llm: str = "off"
    """The LLM model name, or `off`."""
    rerank: bool = False
    """Reranking is on (hybrid results are then reranked)."""
    last_search: str = ""
    """Timing of the last search, e.g. `18 ms (lexical 6 ms)`."""

    @property
    def hybrid(self) -> bool:
        """True when searches use embeddings."""
        return self.model in ("ready", "embedding", "waiting")


#: Below this many columns the status line leaves out what matters least.
NARROW_WIDTH = 100


class StatusBar(Horizontal):
    """One line at the bottom of every screen; follows the app's `status`."""

    DEFAULT_CSS = """
    StatusBar {
        height: 1;
        background: $panel;
        color: $text-muted;
    }
    StatusBar #status-left { width: auto; padding: 0 1; }
    StatusBar ProgressBar { width: 24; display: none; }
    StatusBar ProgressBar.-active { display: block; }
    StatusBar ProgressBar Bar { width: 14; }
    StatusBar #status-right { width: 1fr; text-align: right; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        """Left: index and progress; right: watcher, model, LLM, timings."""
        yield Static(id="status-left")
        yield ProgressBar(total=100, show_eta=False, id="status-progress")
        yield Static(id="status-right")

    def on_mount(self) -> None:
        """Follow the app's status."""
        self._info: StatusInfo | None = None
        self.watch(self.app, "status", self.show, init=True)

    def on_resize(self) -> None:
        """Narrow or wide: say less or more."""
        if self._info is not None:
            self.show(self._info)

    def show(self, info: StatusInfo) -> None:
        """Render `info`; under NARROW_WIDTH columns the shard count, an unused LLM and the
        search's slowest stage are left out, so the line fits instead of being cut."""
        self._info = info
        narrow = 0 < self.size.width < NARROW_WIDTH
        left = self.query_one("#status-left", Static)
        bar = self.query_one("#status-progress", ProgressBar)
        if info.index == "opening":
            idx = Content.from_markup("[$text-warning]opening index…[/]")
        elif info.index == "failed":
            idx = Content.from_markup("[$text-error]index failed[/]")
        else:
            idx = Content.assemble(
                (f"{info.notes} notes", "$text-primary"), "" if narrow else f" · {info.shards} shards"
            )
            if info.index == "updating":
                idx = Content.assemble(idx, (" · updating", "$text-warning"))
        if info.stage and info.total:
            idx = Content.assemble(idx, f" · {info.stage} {info.done}/{info.total}")
            bar.add_class("-active")
            bar.update(total=info.total, progress=info.done)
        else:
            bar.remove_class("-active")
        steady_update(left, idx)
        parts: list[Content | str | tuple[str, str]] = []
        watch_style = "$text-success" if info.watcher == "watching" else "$text-muted"
        parts.append((f"watch: {'on' if info.watcher == 'watching' else info.watcher}", watch_style))
        parts.append(" │ ")
        hybrid = "hybrid+rerank" if info.rerank else "hybrid"
        if info.model == "ready":
            parts.append((f"{hybrid} ({info.runtime or 'model'})", "$text-success"))
        elif info.model == "embedding":
            parts.append((f"{hybrid} · embedding…", "$text-warning"))
        elif info.model == "waiting":
            who = "another process" if narrow else (info.waiting_for or "another process")
            parts.append((f"{hybrid} · waiting for {who} to finish embedding…", "$text-warning"))
        elif info.model == "loading":
            parts.append(("lexical · model loading…", "$text-warning"))
        elif info.model == "off":
            parts.append(("lexical (embeddings off)", "$text-muted"))
        elif info.model == "unavailable":
            parts.append(("lexical (semantic not available)", "$text-error"))
        else:
            parts.append(("lexical", "$text-muted"))
        if not (narrow and info.llm == "off"):
            parts.append(" │ ")
            parts.append((f"LLM: {info.llm}", "$text-muted"))
        if info.last_search:
            parts.append(" │ ")
            parts.append(info.last_search.split(" (")[0] if narrow else info.last_search)
        steady_update(self.query_one("#status-right", Static), safe_content(Content.assemble(*parts)))
