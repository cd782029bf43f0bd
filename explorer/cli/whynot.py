"""`explorer why-not QUERY NOTE`: why a note is not in the top k for a query, and what would bring it there (each claim run first)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from explorer.cli.render import print_json, use_color
from explorer.config import Settings
from explorer.text.safe import safe_text

_BOLD, _DIM, _RESET = "\x1b[1m", "\x1b[2m", "\x1b[0m"


def cmd_why_not(args: argparse.Namespace, vault: Path, settings: Settings) -> int:
    """Prove why NOTE is not in the top k for QUERY and print the report."""
    if args.k is not None and args.k < 1:
        print("explorer: -k must be 1 or more", file=sys.stderr)
        return 2
    from explorer.engine import make_pipeline, open_index
    from explorer.search.core.pipeline import QueryError
    from explorer.search.explain.whynot import check_query, prove

    try:
        check_query(args.query)  # before the index is opened: a hostile query costs nothing
    except QueryError as exc:
        print(f"explorer: {exc}", file=sys.stderr)
        return 2
    index, _ = open_index(vault, settings, load_model=settings.index.embeddings, one_shot=True)
    try:
        proof = prove(
            make_pipeline(index, settings), args.query, args.note, k=args.k, make_pipeline=make_pipeline
        )
    except QueryError as exc:
        print(f"explorer: {exc}", file=sys.stderr)
        return 2
    finally:
        index.close(exiting=True)
    if args.json:
        print_json(proof.to_dict())
    else:
        print_proof(proof, color=use_color())
    return 0 if proof.path is not None else 2  # no such note: could not run (README's exit codes)


def print_proof(proof: object, color: bool = False, out: TextIO | None = None) -> None:
    """The proof as text: summary, facts, the changes run (holding first), what was not checked, the stages."""
    from explorer.search.explain.whynot import Proof

    assert isinstance(proof, Proof)
    out = out or sys.stdout
    b, d, r = (_BOLD, _DIM, _RESET) if color else ("", "", "")
    print(
        f"{b}why not {safe_text(proof.path or proof.note)}{r} for “{safe_text(proof.query)}” (top {proof.k})",
        file=out,
    )
    print(safe_text(proof.summary), file=out)
    if proof.path is None:
        return
    for line in proof.advice:
        print(safe_text(line), file=out)
    if proof.facts:
        print(f"\n{b}Today{r}", file=out)
        for fact in proof.facts:
            print(f"  - {safe_text(fact)}", file=out)
    if proof.changes:
        print(f"\n{b}Changes, each run before it is stated{r}", file=out)
        for change in proof.changes:
            mark = "yes" if change.holds else "no "
            print(f"  {mark} {safe_text(change.claim)}", file=out)
    for line in proof.unchecked:
        print(f"{d}not checked: {safe_text(line)}{r}", file=out)
    if proof.trace.rows:
        print(f"\n{b}Stages{r}", file=out)
        width = max(len(row.stage) for row in proof.trace.rows)
        for row in proof.trace.rows:
            print(f"  {safe_text(row.stage).ljust(width)}  {safe_text(row.outcome)}", file=out)
    print(f"{d}{safe_text(proof.trace.verdict)}{r}", file=out)
