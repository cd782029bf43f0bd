"""The status bar: index state and progress, watcher, model, LLM mode and the last search's timings."""

from __future__ import annotations

from dataclasses import dataclass

from rich.cells import cell_len
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.widgets import ProgressBar, Static

from explorer.text.durations import format_eta
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
    eta: float | None = None
    """Seconds the running progress still needs (embedding: the embedding loop's estimate), or None."""

    @property
    def hybrid(self) -> bool:
        """True when searches use embeddings."""
        return self.model in ("ready", "embedding", "waiting")


#: Cells the progress bar widget takes (its bar and its percentage).
BAR_WIDTH = 24
#: Cells of padding around the two texts (one each side of each).
PADDING = 4
#: What the line gives up, least useful first, until it fits: the search's slowest stage, an unused
#: LLM, the shard count, the embedding runtime, the long forms of the model state, the bar (the
#: percentage stays in the text), the counts (the percentage stands for them), the watcher when it
#: watches, a named LLM, the last search's time. The note count, the progress with its time left
#: and the model state (hybrid or lexical) always stay.
SHED = ("slowest", "llm-off", "shards", "runtime", "model-long", "bar", "counts", "watching", "llm", "timing")
SEP = " │ "


@dataclass(frozen=True, slots=True)
class StatusLine:
    """The status line as fitted to a width: its left text, whether the bar shows, its right text."""

    left: Content
    """Index state, note count, progress and time left."""
    bar: bool
    """The progress bar widget shows (between the two texts)."""
    right: Content
    """Watcher, model state, LLM, last search."""

    @property
    def cells(self) -> int:
        """Cells the whole line takes, padding and bar included."""
        return (
            cell_len(self.left.plain) + cell_len(self.right.plain) + PADDING + (BAR_WIDTH if self.bar else 0)
        )


def status_line(info: StatusInfo, width: int = 0) -> StatusLine:
    """The status line for `info` within `width` cells (0: any width): each part of SHED is given
    up in turn, least useful first, until the line fits (the last form is the shortest there is)."""
    line = _line(info, frozenset())
    if width <= 0 or line.cells <= width:
        return line
    shed: set[str] = set()
    for part in SHED:
        shed.add(part)
        line = _line(info, frozenset(shed))
        if line.cells <= width:
            break
    return line


def _line(info: StatusInfo, shed: frozenset[str]) -> StatusLine:
    if info.index == "opening":
        idx = Content.from_markup("[$text-warning]opening index…[/]")
    elif info.index == "failed":
        idx = Content.from_markup("[$text-error]index failed[/]")
    else:
        idx = Content.assemble(
            (f"{info.notes} notes", "$text-primary"), "" if "shards" in shed else f" · {info.shards} shards"
        )
        if info.index == "updating":
            idx = Content.assemble(idx, (" · updating", "$text-warning"))
    progress = bool(info.stage and info.total)
    bar = progress and "bar" not in shed
    if progress:
        pct = 100 * info.done // info.total
        if "counts" not in shed:
            count = f"{info.done}/{info.total}" + ("" if bar else f" ({pct}%)")
        else:
            count = f"{pct}%"
        left = f" · {info.stage} {count}"
        if info.eta is not None and info.done < info.total:
            left += f" · {format_eta(info.eta)} left"
        idx = Content.assemble(idx, left)
    parts: list[Content | str | tuple[str, str]] = []
    if not (info.watcher == "watching" and "watching" in shed):
        watch_style = "$text-success" if info.watcher == "watching" else "$text-muted"
        parts.append((f"watch: {'on' if info.watcher == 'watching' else info.watcher}", watch_style))
        parts.append(SEP)
    long = "model-long" not in shed
    hybrid = "hybrid+rerank" if info.rerank else "hybrid"
    if info.model == "ready":
        runtime = f" ({info.runtime or 'model'})" if "runtime" not in shed else ""
        parts.append((f"{hybrid}{runtime}", "$text-success"))
    elif info.model == "embedding":
        # While the left says `embedding n/m`, the short form leaves the repetition out.
        embedding = " · embedding…" if long or not progress else ""
        parts.append((f"{hybrid}{embedding}", "$text-warning"))
    elif info.model == "waiting":
        who = (info.waiting_for or "another process") if long else "another process"
        parts.append((f"{hybrid} · waiting for {who} to finish embedding…", "$text-warning"))
    elif info.model == "loading":
        parts.append(("lexical · model loading…" if long else "model loading…", "$text-warning"))
    elif info.model == "off":
        parts.append(("lexical (embeddings off)" if long else "lexical", "$text-muted"))
    elif info.model == "unavailable":
        parts.append(("lexical (semantic not available)" if long else "lexical (no model)", "$text-error"))
    else:
        parts.append(("lexical", "$text-muted"))
    if not ("llm" in shed or (info.llm == "off" and "llm-off" in shed)):
        parts.append(SEP)
        parts.append((f"LLM: {info.llm}", "$text-muted"))
    if info.last_search and "timing" not in shed:
        parts.append(SEP)
        parts.append(info.last_search.split(" (")[0] if "slowest" in shed else info.last_search)
    return StatusLine(idx, bar, safe_content(Content.assemble(*parts)))


class StatusBar(Horizontal):
    """One line at the bottom of every screen; follows the app's `status`, fitted to its width."""

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
        self.line: StatusLine | None = None
        """The line as last shown."""
        self.watch(self.app, "status", self.show, init=True)

    def on_resize(self) -> None:
        """Narrow or wide: say less or more."""
        if self._info is not None:
            self.show(self._info)

    def show(self, info: StatusInfo) -> None:
        """Render `info`, fitted to the bar's width (`status_line`): it leaves out what matters
        least, part by part, so the line fits instead of being cut."""
        self._info = info
        line = self.line = status_line(info, self.size.width)
        bar = self.query_one("#status-progress", ProgressBar)
        bar.set_class(line.bar, "-active")
        if line.bar:
            bar.update(total=info.total, progress=info.done)
        steady_update(self.query_one("#status-left", Static), line.left)
        steady_update(self.query_one("#status-right", Static), line.right)
