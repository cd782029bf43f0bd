"""The why-ranked pane: per term and retriever contributions, pass, rerank, stage timings, and “Why not?”."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.suggester import SuggestFromList
from textual.widgets import Input, Static

from explorer.search.explain.whynot import Proof, WhyNotReport, why_not
from explorer.search.schema import SearchResult, SearchResults
from explorer.tui.safe import SafeInput, safe_content, screen_text
from explorer.tui.widgets.fit_table import FitTable
from explorer.tui.widgets.results import shown_ranks

if TYPE_CHECKING:
    from explorer.index.backend import IndexBackend
    from explorer.search.core.pipeline import SearchPipeline

CONTRIB_COLUMNS = ("term", "retriever", "rank", "raw", "RRF contrib", "w_ret·term·src")


def rerank_summary(results: SearchResults) -> str:
    """What reranking did for a search: backend, passes, early exit, or why it did not run."""
    rr = results.rerank
    if rr is None or (not rr.applied and not rr.backend):
        return "not run" if not results.mode.rerank else "not applied"
    bits = [f"{rr.backend}" + ("" if rr.applied else " (not applied)")]
    for name, info in (("pass1", rr.pass1), ("pass2", rr.pass2)):
        if info.applied:
            timed = ", timed out" if info.timed_out else ""
            bits.append(f"{name} {info.candidates} candidates {info.latency_ms:.0f} ms{timed}")
        elif info.skipped:
            bits.append(f"{name} skipped ({info.skipped})")
    if rr.early_exit:
        bits.append(f"early exit: {rr.early_exit_reason or 'yes'}")
    if rr.skipped:
        bits.append(f"skipped: {rr.skipped}")
    if rr.error:
        bits.append(f"error: {rr.error}")
    return " · ".join(bits)


class WhyPane(VerticalScroll):
    """Explains the selected result from `SearchResult.explanation` and the search's metadata."""

    DEFAULT_CSS = """
    WhyPane { height: 1fr; padding: 0 1; }
    WhyPane Static { height: auto; }
    WhyPane #why-head { color: $text; }
    WhyPane #why-search, WhyPane #why-timings { color: $text-muted; margin: 1 0 0 0; }
    WhyPane #why-not { margin: 1 0 0 0; }
    WhyPane #why-not-verdict { margin: 1 0 0 0; }
    WhyPane #why-not-verdict.-found { color: $text-success; }
    WhyPane #why-not-verdict.-missing { color: $text-warning; }
    WhyPane #why-not-proof { margin: 1 0 0 0; display: none; }
    WhyPane #why-not-proof.-shown { display: block; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.index: IndexBackend | None = None
        self.results: SearchResults | None = None
        self.result: SearchResult | None = None
        self.report: WhyNotReport | None = None
        self.proof: Proof | None = None
        """The last proven answer (each change run), once its worker finished."""
        self.pipeline: SearchPipeline | None = None
        """The search pipeline the proof re-runs (set by the screen with the index)."""
        self._pending = False

    def compose(self) -> ComposeResult:
        """Head, contributions table, search-level facts, timings, the “Why not?” box and its table."""
        yield Static("Select a result to see why it ranked.", id="why-head")
        yield FitTable(CONTRIB_COLUMNS, min_width=64, id="why-contrib")
        yield Static(id="why-search")
        yield Static(id="why-timings")
        yield SafeInput(placeholder="Why not…? a note you expected (path or title)", id="why-not")
        yield Static(id="why-not-verdict")
        yield Static(id="why-not-proof")
        yield FitTable(("stage", "outcome"), min_width=40, id="why-not-table")

    def set_suggestions(self, names: list[str]) -> None:
        """Note paths and titles offered while typing a “Why not?” name."""
        self.query_one("#why-not", Input).suggester = SuggestFromList(
            [screen_text(n) for n in names], case_sensitive=False
        )

    # -- showing ---------------------------------------------------------------------
    def show(
        self,
        index: IndexBackend | None,
        results: SearchResults | None,
        result: SearchResult | None,
        visible: bool = True,
    ) -> None:
        """Explain `result` within `results` (drawn now when `visible`, else when `render_pending` is called)."""
        self.index, self.results, self.result = index, results, result
        self._pending = not visible
        if visible:
            self._draw()

    def render_pending(self) -> None:
        """Draw what `show` was given while the pane was hidden."""
        if self._pending:
            self._pending = False
            self._draw()

    def _draw(self) -> None:
        results, result = self.results, self.result
        head = self.query_one("#why-head", Static)
        table = self.query_one("#why-contrib", FitTable)
        table.clear()
        if results is None:
            head.update("Select a result to see why it ranked.")
            self.query_one("#why-search", Static).update("")
            self.query_one("#why-timings", Static).update("")
            self.query_one("#why-not-verdict", Static).update("")
            self.query_one("#why-not-proof", Static).update("")
            self.query_one("#why-not-proof", Static).set_class(False, "-shown")
            self.query_one("#why-not-table", FitTable).clear()
            return
        if result is None:
            head.update("No result selected.")
        else:
            head.update(safe_content(self._head(result)))
            ex = result.explanation
            if ex is not None:
                for c in ex.contributions:
                    table.add_row(
                        c.term,
                        c.retriever,
                        f"#{c.rank}",
                        f"{c.raw_score:.4f}",
                        f"{c.contribution:.5f}",
                        f"{c.retriever_weight:.2f}·{c.term_weight:.2f}·{c.source_weight:.2f}",
                    )
        self.query_one("#why-search", Static).update(safe_content(self._search_facts(results)))
        self.query_one("#why-timings", Static).update(self._timings(results))
        if self.report is not None and self.report.name:
            self.ask(self.report.name)
        box = self.query_one("#why-not", Input)
        if box.has_focus:
            # What stands above the box changed height: keep the box the person is typing in in view.
            self.call_after_refresh(box.scroll_visible, animate=False)

    def _head(self, r: SearchResult) -> Content:
        ex = r.explanation
        parts: list[str | tuple[str, str]] = [(r.title, "bold"), "\n", (r.node_id, "$text-primary"), "\n"]
        if r.source == "classic":
            parts.append(
                f"classic {r.reason or 'tool'} hit · score {r.score:.4f} · no fusion for classic tools"
            )
            return Content.assemble(*parts)
        if r.source == "always_include":
            parts.append(("always-include", "bold $text-success"))
            parts.append(f": {r.reason or 'rule'}")
            if ex is None:
                parts.append(" · no ranking found it; it is listed by rule")
                return Content.assemble(*parts)
            parts.append(" · ")
        if ex is None:
            parts.append("no explanation recorded")
            return Content.assemble(*parts)
        parts.append((f"fused {ex.fused_score:.5f}", "bold"))
        if ex.fusion == "score":
            parts.append(" = Σ w_ret·w_term·w_src · score (normalised within each ranking)")
        else:
            parts.append(f" = Σ w_ret·w_term·w_src / ({ex.rrf_k} + rank)")
        parts.append(
            f"\npass {ex.pass_} · {ex.shards_matched} shard{'s' if ex.shards_matched != 1 else ''} matched"
        )
        parts.append(f" · source {r.source_type} ×{ex.source_weight:g}")
        if (r.bm25_rank, r.embedding_rank) != shown_ranks(r):
            parts.append(
                f"\nacross all {ex.shards_matched} shards: best bm25 #{r.bm25_rank or '–'}, emb #{r.embedding_rank or '–'}"
            )
        if ex.best_node_id != r.node_id:
            parts.append(f"\nbest shard {ex.best_node_id}")
        if ex.recency is not None:
            parts.append(
                f"\nrecency ×{ex.recency:.3f}: dated {r.date or 'unknown'}"
                + (f" ({r.date_from})" if r.date_from else "")
            )
        if ex.rerank:
            rr = ex.rerank
            move = rr.rank_before - rr.rank_after
            bits = [
                f"#{rr.rank_before} → #{rr.rank_after}"
                + (f" ({'↑' if move > 0 else '↓'}{abs(move)})" if move else " (no move)")
            ]
            if rr.pass_ is not None:
                bits.append(f"pass {rr.pass_}")
            if rr.rerank_score is not None:
                bits.append(f"rerank score {rr.rerank_score:.3f}")
            bits.append(f"fused share {rr.fused_share:.3f}")
            parts.append(("\nrerank ", "bold $text-accent"))
            parts.append(" · ".join(bits))
            if ex.final_score is not None:
                parts.append(f" · final {ex.final_score:.4f}")
        return Content.assemble(*parts)

    def _search_facts(self, results: SearchResults) -> Content:
        parts: list[str | tuple[str, str]] = [("search", "bold"), f" “{results.query}”"]
        if results.search_terms_used:
            parts.append("\nterms: " + " | ".join(results.search_terms_used))
        feedback = results.stats.feedback_from or []
        if feedback:
            parts.append("\nfeedback: query vector moved toward " + ", ".join(feedback))
        for p in results.passes:
            parts.append(
                f"\npass {p.number}: “{p.query}” ke={p.entries} kc={p.shards} found {p.found}, new {p.new}"
            )
        if results.analysis is not None:
            a = results.analysis
            parts.append(f"\nanalysis: {a.decision} ({a.analyser})")
            if a.reason:
                parts.append(f" — {a.reason}")
        parts.append("\nrerank: " + rerank_summary(results))
        if results.early_return:
            parts.append("\nknowledge first: returned early from knowledge notes")
        if results.quality is not None:
            q = results.quality
            parts.append(f"\nquality {q.level} {q.score:.2f} (confidence {q.confidence:.2f})")
        return Content.assemble(*parts)

    def _timings(self, results: SearchResults) -> Content:
        if not results.timings_ms:
            return Content("")
        stages = " · ".join(f"{k} {v:.1f}" for k, v in results.stage_ms)
        return Content.assemble(
            ("timings ", "bold"), f"{results.total_ms:.1f} ms", ("\n" + stages) if stages else ""
        )

    # -- why not ----------------------------------------------------------------------
    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Trace the named note through the search."""
        if event.input.id == "why-not":
            event.stop()
            self.ask(event.value)

    def ask(self, name: str) -> WhyNotReport | None:
        """Show where note `name` ranked at each stage of the current search, then prove in a
        worker what would bring it into the top k (each change run as a search before it is shown)."""
        verdict = self.query_one("#why-not-verdict", Static)
        proof = self.query_one("#why-not-proof", Static)
        table = self.query_one("#why-not-table", FitTable)
        table.clear()
        proof.update("")
        proof.set_class(False, "-shown")
        self.proof = None
        self.workers.cancel_group(self, "why-not")
        if not name.strip():
            self.report = None
            verdict.update("")
            return None
        if self.index is None or self.results is None:
            verdict.update("Search first, then ask why a note is missing.")
            return None
        report = why_not(self.index, self.results, name)
        self.report = report
        for row in report.rows:
            table.add_row(row.stage, row.outcome, style="" if row.found else "dim")
        found = report.path is not None and any(r.stage == "final list" and r.found for r in report.rows)
        verdict.set_class(found, "-found")
        verdict.set_class(not found, "-missing")
        title = f"{report.path}: " if report.path else ""
        verdict.update(safe_content(Content.assemble((title, "bold"), report.verdict)))
        if (
            report.path is not None
            and not found
            and self.pipeline is not None
            and not self.results.mode.classic
        ):
            proof.update(
                Content.styled(
                    "Checking what would bring it into the top k (each change is run first)…", "dim"
                )
            )
            proof.set_class(True, "-shown")
            self._prove(self.pipeline, self.results.query, report.path)
        return report

    @work(thread=True, exclusive=True, group="why-not", exit_on_error=False)
    def _prove(self, pipeline: SearchPipeline, query: str, path: str) -> None:
        """Run the proof off the UI thread; show it when it is done (a newer question cancels it)."""
        from textual.worker import get_current_worker

        from explorer.engine import make_pipeline
        from explorer.search.explain.whynot import prove

        worker = get_current_worker()
        try:
            result = prove(pipeline, query, path, make_pipeline=make_pipeline)
        except Exception as exc:  # noqa: BLE001 - the pane says so, the app lives on
            if not worker.is_cancelled:
                self.app.call_from_thread(
                    self._show_proof, None, f"could not check: {type(exc).__name__}: {exc}"
                )
            return
        if not worker.is_cancelled:
            self.app.call_from_thread(self._show_proof, result, "")

    def _show_proof(self, proof: Proof | None, error: str) -> None:
        self.proof = proof
        box = self.query_one("#why-not-proof", Static)
        if proof is None:
            box.update(safe_content(Content.styled(error, "dim")))
            return
        parts: list[Any] = [(proof.summary, "bold")]
        for line in proof.advice:
            parts.append(f"\n{line}")
        for fact in proof.facts:
            parts.append(f"\n  · {fact}")
        for change in proof.changes:
            parts.append(("\n  ✓ " if change.holds else "\n  ✗ ", "bold" if change.holds else "dim"))
            parts.append(change.claim if change.holds else (change.claim, "dim"))
        for line in proof.unchecked:
            parts.append((f"\n  not checked: {line}", "dim"))
        box.update(safe_content(Content.assemble(*parts)))
        self.call_after_refresh(box.scroll_visible, animate=False)
