"""`explorer find` and `explorer context`: the classic cursor search tools and context windows on the command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from explorer.cli.render import embed_lines, mark, print_json, use_color
from explorer.config import Settings
from explorer.index.backend import ClassicQueryError, ClassicResult
from explorer.index.targets import ContextError, context_for
from explorer.index.transclusion import after_lines, with_embeds
from explorer.search.core.classic import find
from explorer.text.safe import safe_text
from explorer.vault.windows import ContextWindow

_BOLD, _DIM, _RESET = "\x1b[1m", "\x1b[2m", "\x1b[0m"

#: Characters of a hit's note printed each side of its match unless --context-chars is given
#: (the phrase and AND tools read up to 2,000 each side, a whole note: the hit got lost in it).
PRINTED_CHARS = 240
#: Lines of a hit's note printed above and below its match's line unless --context-chars is given.
PRINTED_LINES = 3


def _fail(message: str) -> int:
    print(f"explorer: {message}", file=sys.stderr)
    return 2


def cmd_find(args: argparse.Namespace, vault: Path, settings: Settings) -> int:
    """Run one classic tool (`--mode tfidf|phrase|and|fuzzy`) and print its hits."""
    keywords = [k for k in (args.keywords or []) if k.strip()]
    if not keywords:
        return _fail("find needs at least one keyword, e.g. explorer find hamster cage")
    for flag, value, least in (
        ("-n", args.max_results, 1),
        ("--context-chars", args.context_chars, 0),
        ("--window", args.window, 1),
    ):
        if value is not None and value < least:
            return _fail(f"{flag} must be {least} or more, got {value}")
    from explorer.engine import open_index

    index, _ = open_index(vault, settings, one_shot=True)
    try:
        result = find(index, settings, args.mode, keywords, args.max_results, args.context_chars, args.window)
    except ClassicQueryError as exc:
        return _fail(str(exc))
    finally:
        index.close()
    if args.json:
        print_json(result.to_dict())
        return 0
    bound = (PRINTED_CHARS, PRINTED_LINES) if args.context_chars is None else None
    print_find(result, color=use_color(), bound=bound)
    return 0


def cmd_context(args: argparse.Namespace, vault: Path, settings: Settings) -> int:
    """Print the window around a cursor in the note a node_id or path names."""
    from explorer.engine import open_index

    index, _ = open_index(vault, settings, one_shot=True)
    try:
        window = with_embeds(
            index,
            context_for(
                index, args.target, args.cursor, args.before, args.after, words=list(args.highlight or ())
            ),
        )
    except ContextError as exc:
        return _fail(str(exc))
    finally:
        index.close()
    if args.json:
        print_json(window.to_dict())
        return 0
    print_context(window, color=use_color())
    return 0


def around(text: str, cursor: int, end: int, chars: int, lines: int) -> tuple[int, int]:
    """(start, end) of the part of `text` printed around its match text[cursor:end]: at most `chars`
    characters and `lines` lines each side of it, cut between words."""
    lo = max(0, cursor - chars, _nth_newline_before(text, cursor, lines + 1))
    hi = min(len(text), end + chars, _nth_newline_after(text, end, lines + 1))
    if lo > 0 and not text[lo - 1].isspace():
        space = next((i for i in range(lo, cursor) if text[i].isspace()), cursor)
        lo = space + 1 if space < cursor else cursor
    if hi < len(text) and not text[hi].isspace():
        space = next((i for i in range(hi - 1, end - 1, -1) if text[i].isspace()), end)
        hi = space if space >= end else end
    while hi > end and text[hi - 1].isspace():
        hi -= 1
    while lo < cursor and text[lo].isspace():
        lo += 1
    return lo, hi


def _nth_newline_before(text: str, pos: int, n: int) -> int:
    """Just past the n-th newline before `pos` (0 when there are fewer)."""
    for _ in range(n):
        pos = text.rfind("\n", 0, pos)
        if pos < 0:
            return 0
    return pos + 1


def _nth_newline_after(text: str, pos: int, n: int) -> int:
    """The n-th newline at or after `pos` (the end when there are fewer)."""
    pos -= 1
    for _ in range(n):
        pos = text.find("\n", pos + 1)
        if pos < 0:
            return len(text)
    return pos


def print_find(
    result: ClassicResult,
    color: bool = False,
    out: TextIO | None = None,
    bound: tuple[int, int] | None = None,
) -> None:
    """Hits in the reference layout: score, cursor, node_id, matched keywords, highlighted snippet.

    `bound` (characters, lines) prints only that much of each snippet around its match, marking
    each cut with `…`, and says once how to see more."""
    out = out or sys.stdout
    b, d, r = (_BOLD, _DIM, _RESET) if color else ("", "", "")
    n = len(result.hits)
    more = f" (of {result.total})" if result.total > n else ""
    print(
        f"{b}{result.mode}: {n} result{'s' if n != 1 else ''}{more} for {safe_text(list(result.keywords))} — stage {result.stage}{r}",
        file=out,
    )
    for w in result.warnings:
        print(f"{d}note: {safe_text(w)}{r}", file=out)
    for word, terms in result.expansions:
        print(
            f"{d}fuzzy: {safe_text(word)} ~ {safe_text(', '.join(terms)) if terms else '(nothing)'}{r}",
            file=out,
        )
    if not result.hits:
        print("No match. Try other words, another --mode, or a wider --window.", file=out)
        return
    cut = False
    for i, hit in enumerate(result.hits, 1):
        print(f"\n{b}--- {i}  score {hit.score:.3f}  cursor {hit.cursor}{r}  {safe_text(hit.path)}", file=out)
        print(f"    {d}node: {safe_text(hit.node_id or '-')}{r}", file=out)
        print(f"    matched: {safe_text(', '.join(hit.keywords))}  ({safe_text(repr(hit.match))})", file=out)
        text, start = hit.snippet, hit.snippet_start
        lo, hi = 0, len(text)
        if bound is not None:
            lo, hi = around(text, hit.cursor - start, hit.cursor - start + len(hit.match), *bound)
        spans = [(h.start - start - lo, h.end - start - lo) for h in hit.highlights]
        shown = mark(text[lo:hi], [(a, b) for a, b in spans if a >= 0 and b <= hi - lo], color)
        shown = ("… " if lo > 0 else "") + shown + (" …" if hi < len(text) else "")
        print(_indent(shown, "    | "), file=out)
        cut = cut or lo > 0 or hi < len(text)
    if cut and bound is not None:
        print(
            f"\n{d}(each hit printed with up to {bound[1]} lines or {bound[0]} characters each side;"
            f" --context-chars N prints N characters around it){r}",
            file=out,
        )


def print_context(window: ContextWindow, color: bool = False, out: TextIO | None = None) -> None:
    """A context window with a header (path, node_id, offsets) and highlighted matches; each embed
    in it is shown below its line, boxed and marked with its source node_id (or as a marked link)."""
    out = out or sys.stdout
    b, d, r = (_BOLD, _DIM, _RESET) if color else ("", "", "")
    print(
        f"{b}{safe_text(window.path)}{r}  cursor {window.cursor}  chars {window.start}-{window.end} of {window.note_chars}",
        file=out,
    )
    print(f"{d}node: {safe_text(window.node_id or '-')}{r}", file=out)
    for note in window.notes:
        print(f"{d}note: {safe_text(note)}{r}", file=out)
    spans = [(h.start - window.start, h.end - window.start) for h in window.highlights]
    pos = 0
    for point, embeds in after_lines(window.text, window.start, window.embeds):
        piece = window.text[pos:point]
        print(
            mark(piece, [(s - pos, e - pos) for s, e in spans if pos <= s and e <= point], color),
            end="" if piece.endswith("\n") else "\n",
            file=out,
        )
        for embed in embeds:
            print("\n".join(embed_lines(embed, color)), file=out)
        pos = point
    if pos < len(window.text) or not window.embeds:
        rest = window.text[pos:]
        print(mark(rest, [(s - pos, e - pos) for s, e in spans if pos <= s], color), file=out)


def _indent(text: str, prefix: str) -> str:
    lines = list(text.splitlines())
    # Runs of blank lines shrink to one, so long snippets stay readable.
    kept: list[str] = []
    for line in lines:
        if not line.strip() and kept and not kept[-1].strip():
            continue
        kept.append(line)
    return "\n".join(prefix + line for line in kept)
