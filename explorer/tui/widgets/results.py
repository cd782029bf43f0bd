"""The results list (rank, title, path, score bar, badges, highlighted snippet) and the summary line above it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from rich.cells import cell_len
from textual import events
from textual.content import Content
from textual.css.styles import RulesMap
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from explorer.search.schema import SearchResult, SearchResults
from explorer.text.cells import clip
from explorer.tui.safe import plain, safe_content, screen_text
from explorer.tui.widgets.steady import steady_update
from explorer.vault.windows import highlight_spans

BAR_WIDTH = 8
#: A result's snippet is shortened to this many terminal cells (a CJK character takes two).
SNIPPET_CELLS = 160
#: The longest title `ResultsList.mark` writes.
MARK_CHARS = 200


def score_bar(score: float, top: float, width: int = BAR_WIDTH) -> str:
    """A bar of `width` cells filled in proportion to `score / top`."""
    frac = 0.0 if top <= 0 else max(0.0, min(1.0, score / top))
    filled = round(frac * width)
    if score > 0 and filled == 0:
        filled = 1
    return "█" * filled + "░" * (width - filled)


#: The style of each kind of badge (see `SearchResult.badges`).
BADGE_STYLES = {
    "classic": "$text-primary",
    "bm25": "$text-primary",
    "emb": "$text-secondary",
    "pass": "$text-muted",
    "always": "$text-success",
    "rerank": "$text-accent",
    "type": "$text-muted",
}


def badges(res: SearchResult) -> list[tuple[str, str]]:
    """(text, style) of a result's badges; a second-pass result's pass badge stands out.

    The BM25 and embedding ranks are those of the tabulated shard (`shown_ranks`)."""
    bm25, emb = shown_ranks(res)
    ranks = {
        "bm25": f"bm25 #{bm25}" if bm25 is not None else None,
        "emb": f"emb #{emb}" if emb is not None else None,
    }
    out = []
    for b in res.badges():
        text = ranks.get(b.kind, b.text)
        if text is not None:
            out.append(
                (text, "$text-warning" if b.kind == "pass" and res.pass_ == 2 else BADGE_STYLES[b.kind])
            )
    return out


def shown_ranks(res: SearchResult) -> tuple[int | None, int | None]:
    """The (BM25, embedding) ranks a result shows: those of the shard its explanation tabulates,
    so the badge and the why-ranked table agree (the result's own fields are the best over all its
    shards, which the why pane states separately)."""
    ex = res.explanation
    if ex is None or not ex.contributions:
        return res.bm25_rank, res.embedding_rank
    bm25 = min((c.rank for c in ex.contributions if c.retriever == "bm25"), default=None)
    emb = min((c.rank for c in ex.contributions if c.retriever == "dense"), default=None)
    return bm25, emb


def highlighted(text: str, words: Sequence[str], phrases: Sequence[str] = ()) -> Content:
    """`text` (made terminal-safe) with the query's words and phrases highlighted."""
    text = screen_text(text)
    content = Content(text)
    for h in highlight_spans(text, words, phrases):
        content = content.stylize("bold $text-accent", h.start, h.end)
    return content


def badge_lines(badge_list: Sequence[tuple[str, str]], width: int = 0) -> list[Content]:
    """Badges joined by ` · `, broken into lines of `width` cells (0: one line) between two badges:
    a line never starts with a separator and a badge is never cut."""
    lines: list[list[tuple[str, str]]] = [[]]
    used = 0
    for text, style in badge_list:
        text = screen_text(text)
        cells = cell_len(text)
        if lines[-1] and width > 0 and used + 3 + cells > width:
            lines.append([])
            used = 0
        used += cells + (3 if lines[-1] else 0)
        lines[-1].append((text, style))
    out = []
    for line in lines:
        parts: list[str | tuple[str, str]] = []
        for i, badge in enumerate(line):
            if i:
                parts.append(" · ")
            parts.append(badge)
        out.append(Content.assemble(*parts))
    return out


def result_prompt(
    rank: int,
    res: SearchResult,
    top: float,
    words: Sequence[str],
    phrases: Sequence[str] = (),
    two_line: bool = False,
    width: int = 0,
) -> Content:
    """The multi-line prompt of one result: rank, bar, score, title / path / badges / snippet.

    `two_line` (narrow terminals): rank-bar-score-title, then path and badges, no snippet. In
    `width` cells (0: unknown) the badges follow the path when they all fit after it, else they
    take the next line, broken between two badges where they need more (`badge_lines`).
    """
    head = Content.assemble(
        (f"{rank:>2} ", "bold $text-muted"),
        (score_bar(res.score, top), "$accent"),
        (f" {res.score:.3f} ", "$text-muted"),
        (screen_text(res.title), "bold"),
    )
    path = plain(res.document_path, "$text-accent")
    if res.date and res.date_from != "modified":  # the note's own date; a bare file time is not shown
        path = Content.assemble(path, ("  ", ""), plain(res.date, "$text-muted"))
    badge_list = badges(res)
    snippet = " ".join(res.snippet.split())
    snippet = clip(snippet, SNIPPET_CELLS)
    if two_line:
        (line,) = badge_lines(badge_list)
        if width <= 0 or path.cell_length + 2 + line.cell_length <= width:
            return Content("\n").join([head, Content.assemble(path, ("  ", ""), line)])
        return Content("\n").join([head, path, *badge_lines(badge_list, width)])
    lines = [head, path, *badge_lines(badge_list)]
    if snippet:
        lines.append(highlighted(snippet, words, phrases))
    return Content("\n").join(lines)


#: The style rules that decide how many lines a prompt wraps to (Content.get_height reads these).
HEIGHT_RULES = (("line_pad", 0), ("text_overflow", "fold"), ("text_wrap", "wrap"))


@dataclass(frozen=True, slots=True)
class RowLayout:
    """How the results list lays out its rows, read from the widget on the UI thread."""

    two_line: bool
    """Two-line rows (narrow terminals)."""
    width: int
    """Cells a prompt wraps in (0: the list is not laid out yet)."""
    rules: RulesMap = field(default_factory=lambda: RulesMap())
    """The list's style rules that Content.get_height reads."""


@dataclass(frozen=True, slots=True)
class PreparedRows:
    """The rows of one results list, built (and measured) away from the UI thread."""

    results: SearchResults
    """The results they show."""
    words: tuple[str, ...]
    """The query words highlighted in them."""
    phrases: tuple[str, ...]
    """The phrases highlighted in them."""
    prompts: tuple[Content, ...]
    """One prompt per result, in order."""
    two_line: bool
    """Built as two-line rows."""
    width: int = 0
    """The cells they were laid out in (two-line rows place their badges for it)."""


def prepare_rows(
    results: SearchResults, words: Sequence[str], phrases: Sequence[str], layout: RowLayout
) -> PreparedRows:
    """Build the prompts of `results` and measure their wrapped heights for `layout`.

    Pure data work, safe in a worker thread: the list then finds each prompt's height cached, so
    showing a new list costs the UI thread only the rows it draws."""
    top = max((r.score for r in results.results), default=0.0)
    prompts = tuple(
        result_prompt(i, res, top, words, phrases, layout.two_line, layout.width)
        for i, res in enumerate(results.results, 1)
    )
    if layout.width > 0:
        for prompt in prompts:
            prompt.get_height(layout.rules, layout.width)
    return PreparedRows(results, tuple(words), tuple(phrases), prompts, layout.two_line, layout.width)


class ResultsList(OptionList):
    """The ranked results; highlighting one shows it in the context and why-ranked panes."""

    DEFAULT_CSS = """
    ResultsList {
        height: 1fr;
        border: round $border-blurred;
        border-title-color: $text-muted;
        padding: 0;
    }
    ResultsList:focus { border: round $border; }
    ResultsList > .option-list--option { padding: 0 1; }
    ResultsList.-weak > .option-list--option { text-opacity: 70%; }
    ResultsList.-two-line { scrollbar-gutter: stable; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.results: list[SearchResult] = []
        self._two_line = False
        self._shown: tuple[SearchResults, Sequence[str], Sequence[str]] | None = None
        self.mark: str | None = None
        """Written to the terminal's title once the list is drawn (`experimental.mark_results`)."""
        self._width = 0

    @property
    def two_line(self) -> bool:
        """Two-line results without snippets (narrow terminals)."""
        return self._two_line

    @two_line.setter
    def two_line(self, value: bool) -> None:
        if value != self._two_line:
            self._two_line = value
            # The same width with or without a scrollbar: the rows' badges are placed for it.
            self.set_class(value, "-two-line")
            if self._shown is not None and self.results:
                selected = self.selected
                self.show(*self._shown, keep=selected.document_path if selected else None)

    def on_mount(self) -> None:
        """Title the border."""
        self.border_title = "Results"

    def on_resize(self) -> None:
        """Two-line rows place their badges for the list's width: laid out again for a new one."""
        if (
            self._two_line
            and self._shown is not None
            and self.results
            and self.row_layout().width != self._width
        ):
            selected = self.selected
            self.show(*self._shown, keep=selected.document_path if selected else None)

    def row_layout(self) -> RowLayout:
        """The current row layout, for `prepare_rows` in a worker."""
        padding = self.get_component_styles("option-list--option").padding
        width = self.scrollable_content_region.width - self._get_left_gutter_width() - padding.width
        rules = cast(RulesMap, {name: self.styles.get(name, default) for name, default in HEIGHT_RULES})
        return RowLayout(self._two_line, max(0, width), rules)

    def show(
        self,
        results: SearchResults,
        words: Sequence[str],
        phrases: Sequence[str] = (),
        keep: str | None = None,
        prepared: PreparedRows | None = None,
    ) -> None:
        """Replace the list; keep the highlight on the note `keep` when it is still listed.

        `prepared`: the rows built for these results in the search worker (used when they were
        built for the current layout)."""
        self.results = list(results.results)
        self._shown = (results, words, phrases)
        width = self.row_layout().width if self._two_line else 0
        if (
            prepared is None
            or prepared.results is not results
            or prepared.two_line != self._two_line
            or (self._two_line and prepared.width != width)
            or prepared.words != tuple(words)
            or prepared.phrases != tuple(phrases)
        ):
            prepared = prepare_rows(results, words, phrases, RowLayout(self._two_line, width))
        self._width = width
        options: list[Option | None] = []
        for i, prompt in enumerate(prepared.prompts, 1):
            if i > 1 and not self._two_line:  # two-line results start with their rank bar: no rule between
                options.append(None)
            options.append(Option(prompt, id=f"r{i}"))
        self.set_options(options)
        weak = results.quality is not None and results.quality.level == "low"
        self.set_class(weak, "-weak")
        self.border_title = f"Results ({len(self.results)})"
        if self.results:
            idx = 0
            if keep:
                idx = next((i for i, r in enumerate(self.results) if r.document_path == keep), 0)
            self.highlighted = self._option_index(idx)
        self.call_later(self._prerender)

    def render_lines(self, crop: Region) -> list[Strip]:
        """Draw the list; a pending `mark` goes to the terminal after the frame being composed."""
        lines = super().render_lines(crop)
        if self.mark is not None:
            # The compositor writes this frame before this widget's next message is handled, and
            # the driver writes in order: the title reaches the terminal after the drawn rows.
            mark, self.mark = self.mark, None
            self.call_later(self._write_mark, mark)
        return lines

    def _write_mark(self, mark: str) -> None:
        driver = self.app._driver
        if driver is not None:
            title = "".join(ch for ch in screen_text(mark) if ch.isprintable())[:MARK_CHARS]
            driver.write(f"\x1b]2;{title}\x07")

    def _prerender(self) -> None:
        """Render the rows the next frame shows (OptionList keeps them), as a step of its own
        between the update and that frame: each of the three stays short (when the frame comes
        first, it rendered them and this finds them ready)."""
        region = self.scrollable_content_region
        for y in range(region.height if region.width > 0 else 0):
            self.render_line(y)

    async def _on_click(self, event: events.Click) -> None:
        """A click highlights a result (showing its context); a double click opens it."""
        event.prevent_default()
        clicked: int | None = event.style.meta.get("option")
        if clicked is None or self._options[clicked].disabled:
            return
        self.highlighted = clicked
        if event.chain >= 2:
            self.action_select()

    def clear(self, title: str = "Results") -> None:
        """Empty the list."""
        self.results = []
        self._shown = None
        self.clear_options()
        self.border_title = title

    def _option_index(self, result_index: int) -> int:
        return self.get_option_index(f"r{result_index + 1}")

    def result_at(self, option_index: int | None) -> SearchResult | None:
        """The result of an option index (separators are skipped)."""
        if option_index is None:
            return None
        try:
            option = self.get_option_at_index(option_index)
        except Exception:  # noqa: BLE001 - OptionDoesNotExist and friends
            return None
        if option.id is None or not option.id.startswith("r"):
            return None
        i = int(option.id[1:]) - 1
        return self.results[i] if 0 <= i < len(self.results) else None

    @property
    def selected(self) -> SearchResult | None:
        """The highlighted result."""
        return self.result_at(self.highlighted)


def search_mode(results: SearchResults, model: str) -> str:
    """What a finished search was, truthfully: hybrid, hybrid+rerank, or lexical and why."""
    if results.mode.dense:
        reranked = results.rerank is not None and results.rerank.applied
        return "hybrid+rerank" if reranked else "hybrid"
    reason = {
        "loading": "model loading",
        "embedding": "vectors coming",
        "waiting": "vectors coming",
        "off": "embeddings off",
        "unavailable": "semantic search not available",
    }.get(model, "")
    return f"lexical ({reason})" if reason else "lexical"


class ResultsSummary(Static):
    """Above the list: quality level, counts, mode, advisory and warnings, or an honest “no good match”.

    With the `-roomy` class (wide terminals) it keeps two lines even for a one-line summary, so a
    “no good match” line that wraps does not push the list down and back up between searches
    (each such shift moved every widget below it: a full-screen layout and repaint)."""

    DEFAULT_CSS = """
    ResultsSummary { height: auto; max-height: 4; padding: 0 1; color: $text-muted; }
    ResultsSummary.-roomy { min-height: 2; }
    ResultsSummary.-low { color: $text-warning; }
    ResultsSummary.-none { color: $text-error; }
    """

    def show(self, results: SearchResults, stage: str, final: bool = True, model: str = "ready") -> None:
        """Summarise `results` (stage: lexical, full or classic; `final` False while a better stage is coming).

        `model` is the embedding model's state (explorer.tui.widgets.status_bar.StatusInfo.model):
        lexical results say why they are lexical, and only a failed model is called unavailable.
        """
        q = results.quality
        n = len(results.results)
        mode = results.mode
        none = n == 0
        low = (q is not None and q.level == "low") or none
        self.set_class(none, "-none")
        self.set_class(low and not none, "-low")
        parts: list[str | tuple[str, str] | Content] = []
        if none:
            parts.append((f"No match for “{results.query}”. ", "bold"))
            parts.append(q.suggestion if q else "Try other words, or remove filters.")
        else:
            if low:
                parts.append(("No good match", "bold"))
                parts.append(" — weak candidates below. ")
            elif q is not None:
                style = "$text-success" if q.level == "high" else "$text-warning"
                parts.append((f"quality {q.level}", f"bold {style}"))
                parts.append(f" ({q.score:.2f}) · ")
            parts.append(f"{n} result{'s' if n != 1 else ''}")
            if mode.classic:
                parts.append(f" · {mode.classic} tool")
            elif mode.browse:
                parts.append(" · filters only")
            elif stage == "lexical" and not final:
                parts.append(" · lexical, hybrid coming…")
            else:
                parts.append(f" · {search_mode(results, model)}")
                if len(results.passes) > 1:
                    parts.append(" · 2 passes")
                if results.early_return:
                    parts.append(" · knowledge first")
            if low and q is not None:
                parts.append(
                    f" · {q.suggestion}" if mode.dense else " · Weak lexical matches only: try other words."
                )
        if results.advisory:
            parts.append(Content.assemble("\n", ("advice: ", "bold $text-warning"), results.advisory))
        for w in results.warnings[:2]:
            parts.append(Content.assemble("\n", ("note: ", "bold"), w))
        steady_update(self, safe_content(Content.assemble(*parts)))

    def message(self, text: str, style: str = "") -> None:
        """Show a plain message (index opening, a query error)."""
        self.set_class(style == "error", "-none")
        self.set_class(style == "warning", "-low")
        steady_update(self, plain(text))


class CorrectionLine(Static):
    """Above the list, as web search engines do: “Showing results for roof — search instead for proof”
    when a query word missing from the vault was searched as the vault's closest words, and the way
    back (a click on the word, or ctrl+r: the screen's `as_typed` action); “Searched as typed” then.
    Hidden when the query was searched as it is."""

    DEFAULT_CSS = """
    CorrectionLine { height: auto; padding: 0 1; color: $text-muted; display: none; }
    CorrectionLine.-shown { display: block; }
    """

    def show(self, results: SearchResults | None, as_typed: bool = False) -> None:
        """Say what `results` searched instead of the words typed (`as_typed`: corrections were turned off)."""
        parts: list[str | tuple[str, str] | Content] = []
        if as_typed:
            parts = ["Searched as typed — ", _link("correct typos", "screen.as_typed"), " (ctrl+r)"]
        elif results is not None and results.corrections:
            shown = ", ".join(" / ".join(c.get("shown") or c["searched"]) for c in results.corrections)
            typed = " ".join(str(c["word"]) for c in results.corrections)
            parts = [
                "Showing results for ",
                plain(shown, "bold"),
                " — search instead for ",
                _link(typed, "screen.as_typed"),
                " (ctrl+r)",
            ]
        self.set_class(bool(parts), "-shown")
        steady_update(self, safe_content(Content.assemble(*parts)) if parts else Content(""))


def _link(text: str, action: str) -> Content:
    """`text` (made terminal-safe) underlined, running `action` when clicked."""
    return Content.from_markup(f"[underline @click={action}]$text[/]", text=screen_text(text))
