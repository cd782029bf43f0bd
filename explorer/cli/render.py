"""Plain-text rendering of search results for the terminal (used by `explorer search`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from explorer.text.cells import fit
from explorer.text.safe import safe_json, safe_text

if TYPE_CHECKING:  # annotations only: printing an answer from a serving process needs no search code
    from explorer.search.schema import SearchResults

_BOLD, _DIM, _HL, _RESET = "\x1b[1m", "\x1b[2m", "\x1b[1;33m", "\x1b[0m"


def display_path(path: Path | str) -> str:
    """A folder as a person reads it: relative to the working folder when inside it, else `~/...`
    under the home folder, else absolute (JSON output keeps the absolute path). The working folder
    itself is named too (`. (notes)`): a command run inside its vault names the vault it found."""
    p = Path(path)
    if p == Path.cwd().resolve():
        return f". ({p.name})"
    for base, prefix in ((Path.cwd(), ""), (Path.home(), "~/")):
        try:
            rel = p.relative_to(base.resolve())
        except (ValueError, OSError, RuntimeError):
            continue
        return prefix + str(rel) if str(rel) != "." else (prefix.rstrip("/") or ".")
    return str(p)


def use_color(stream: TextIO | None = None) -> bool:
    """Whether to style output for a terminal: `stream` (stdout) is a TTY and NO_COLOR is not set."""
    stream = stream or sys.stdout
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        return False
    return tty and not os.environ.get("NO_COLOR")


def mark(text: str, spans: list[tuple[int, int]], color: bool) -> str:
    """`text` made terminal-safe, with spans (relative offsets into `text`) highlighted.

    On a terminal a span is drawn in highlight colours. Piped, it is written between `«` and `»`
    (brackets would read as Markdown and wikilink syntax in note text), and a `«` or `»` of the
    text itself is doubled (`««`, `»»`), so a single one is always a marker: a French quotation
    `« Un oignon »` cannot pass for a highlight.
    """
    out, pos = [], 0
    plain = safe_text if color else _escape_markers
    for s, e in sorted(spans):
        if s < pos or e > len(text):
            continue
        out.append(plain(text[pos:s]))
        hit = plain(text[s:e])
        out.append(f"{_HL}{hit}{_RESET}" if color else f"«{hit}»")
        pos = e
    out.append(plain(text[pos:]))
    return "".join(out)


def _escape_markers(text: str) -> str:
    """`text` made terminal-safe with its own `«` and `»` doubled (piped highlight output)."""
    text = safe_text(text)
    if "«" in text or "»" in text:
        text = text.replace("«", "««").replace("»", "»»")
    return text


def embed_lines(embed: Any, color: bool, prefix: str = "  ") -> list[str]:
    """An expanded embed as plain lines: a marked box with its source node_id and text (nested
    embeds boxed inside), or one marked line for an embed that is not expanded. Terminal-safe."""
    d, r = ("\x1b[2m", _RESET) if color else ("", "")
    if embed.status != "embedded":
        mark_ = "↪" if embed.status == "file" else "↪ ✗"
        return [f"{prefix}{d}{mark_} {safe_text(embed.label)}{r}"]
    out = [f"{prefix}{d}┌ ↪ {safe_text(embed.label)}{r}"]
    from explorer.index.transclusion import after_lines

    lines: list[str] = []  # terminal-safe already
    pos = 0
    for point, group in after_lines(embed.text, embed.start, embed.embeds):
        lines.extend(safe_text(line) for line in embed.text[pos:point].splitlines())
        for inner in group:
            lines.extend(embed_lines(inner, color, ""))
        pos = point
    lines.extend(safe_text(line) for line in embed.text[pos:].splitlines())
    out.extend(f"{prefix}{d}│{r} {line}" for line in lines)
    out.append(f"{prefix}{d}└{r}")
    return out


def print_json(data: Any, out: TextIO | None = None) -> None:
    """`data` as indented UTF-8 JSON and a newline: the `--json` output of every command.

    Control characters inside strings are written as `\\u` escapes (C1 and bidi controls too), so
    the JSON decodes to the exact vault text and printing it cannot act on a terminal.
    """
    out = out or sys.stdout
    out.write(safe_json(data, indent=2))
    out.write("\n")


def print_results(
    results: SearchResults, explain: bool = False, color: bool = False, out: TextIO | None = None
) -> None:
    """Human-readable results: rank, title, path, node_id, score, highlighted snippet."""
    out = out or sys.stdout
    b, d, r = (_BOLD, _DIM, _RESET) if color else ("", "", "")
    mode = results.mode
    head = f'{len(results.results)} results for "{safe_text(results.query)}"'
    if mode.browse:
        head += " (filters only)"
    elif not mode.dense:
        head += f" — BM25 only ({mode.model_state or 'no model'})"
    q = results.quality
    if q:
        head += f" — quality {q.level} ({q.score:.2f})"
    print(head, file=out)
    if results.search_terms_used:
        print(f"{d}terms: {safe_text(' | '.join(results.search_terms_used))}{r}", file=out)
    for c in results.corrections:
        shown = c.get("shown") or c["searched"]
        print(
            f"{d}typo: {safe_text(c['word'])} not in the vault, searched as {safe_text(' / '.join(shown))}"
            f" (--no-correct searches it as typed){r}",
            file=out,
        )
    if explain and results.stats.feedback_from:
        print(
            f"{d}feedback: query vector moved toward {safe_text(', '.join(results.stats.feedback_from))}{r}",
            file=out,
        )
    for w in results.warnings:
        print(f"warning: {safe_text(w)}", file=out)
    if results.advisory:
        print(f"advice: {safe_text(results.advisory)}", file=out)
    if not results.results:
        print("No match. Try other words, or fewer filters.", file=out)
    for i, res in enumerate(results.results, 1):
        # The terminal list names a pass only when it is the second; rerank moves show under --explain.
        badges = [
            b.text
            for b in res.badges()
            if b.kind not in ("classic", "rerank") and (b.kind != "pass" or res.pass_ == 2)
        ]
        print(
            f"\n{b}{i:>2}. {safe_text(res.title)}{r}  {d}{res.score:.4f}  [{safe_text(', '.join(badges))}]{r}",
            file=out,
        )
        print(f"    {d}{safe_text(res.node_id)}{date_label(res.date, res.date_from)}{r}", file=out)
        if res.context_shards:
            shard = res.context_shards[0]
            text = res.snippet
            spans = []
            # Highlight the snippet by re-finding highlighted words in it.
            for h in shard.highlights:
                word = shard.text[h.start - shard.start : h.end - shard.start]
                idx = text.lower().find(word.lower())
                while idx != -1:
                    spans.append((idx, idx + len(word)))
                    idx = text.lower().find(word.lower(), idx + len(word))
            print(f"    {mark(text, _dedupe(spans), color)}", file=out)
        if explain and res.explanation:
            ex = res.explanation
            print(
                f"    {d}why: fused {ex.fused_score:.5f} = sum of w_ret * w_term * w_src / ({ex.rrf_k} + rank); pass {ex.pass_}{r}",
                file=out,
            )
            if ex.note_score is not None:
                print(
                    f"    {d}note: {ex.note_score:.5f} = {ex.fused_score:.5f} + {ex.second_weight:g} x {ex.second_score:.5f} "
                    f"(second shard {safe_text(ex.second_node_id)}){r}",
                    file=out,
                )
            print(
                f"    {'term':<28} {'retriever':<9} {'rank':>4} {'raw':>8} {'w_ret':>5} {'w_term':>6} {'w_src':>5} {'contrib':>9}",
                file=out,
            )
            for part in ex.contributions:
                term = fit(safe_text(part.term), 28)
                print(
                    f"    {term} {part.retriever:<9} {part.rank:>4} {part.raw_score:>8.4f} {part.retriever_weight:>5.2f} "
                    f"{part.term_weight:>6.2f} {part.source_weight:>5.2f} {part.contribution:>9.5f}",
                    file=out,
                )
            if ex.recency is not None:
                print(
                    f"    {d}recency: score x {ex.recency:.3f} for its date ({safe_text(res.date or 'none')}){r}",
                    file=out,
                )
            if ex.rerank:
                rr = ex.rerank
                print(f"    rerank: {safe_text(rr.to_dict())}", file=out)
    if results.timings_ms:
        stages = ", ".join(f"{k} {v:.1f}" for k, v in results.stage_ms)
        print(f"\n{d}{results.total_ms:.0f} ms ({stages}){r}", file=out)


def date_label(date: str | None, date_from: str | None) -> str:
    """` · 2023-05-07` after a result's node_id (`(modified)` when only the file time gave it); '' without a date."""
    if not date:
        return ""
    return f"  · {safe_text(date)}{' (modified)' if date_from == 'modified' else ''}"


def _dedupe(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(set(spans)):
        if out and s < out[-1][1]:
            continue
        out.append((s, e))
    return out
