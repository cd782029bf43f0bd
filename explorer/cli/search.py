"""`explorer search`: run one search and print it as JSON or as a readable list."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from explorer.cli.render import print_json, print_results, use_color
from explorer.config import Settings

if TYPE_CHECKING:
    from explorer.search.core.pipeline import SearchPipeline
    from explorer.search.schema import SearchResults


def cmd_search(args: argparse.Namespace, vault: Path, settings: Settings) -> int:
    """Search the vault for the query words and print the results.

    A process already serving the vault with these settings (the app, `explorer watch`,
    `explorer mcp`) answers the search, after applying every change saved before it; without
    one (or with `--local`) the command opens the index itself. Either way the same results
    print the same way.
    """
    query = " ".join(args.query)
    if args.k is not None and args.k < 1:
        print("explorer: -k must be 1 or more", file=sys.stderr)
        return 2
    results: SearchResults | dict[str, Any] | None = None
    if not getattr(args, "local", False):
        served = _ask_server(args, query, vault, settings)
        if isinstance(served, str):
            print(f"explorer: {served}", file=sys.stderr)
            return 2
        results = served
    if results is None:
        from explorer.engine import make_pipeline, open_index

        index, _ = open_index(vault, settings, load_model=not args.lexical, one_shot=True)
        try:
            results = search_once(make_pipeline(index, settings), query, args)
        finally:
            index.close(exiting=True)
        if results is None:
            return 2
    if args.json:
        print_json(results if isinstance(results, dict) else results.to_dict())
        return 0
    assert not isinstance(results, dict)
    print_results(results, explain=args.explain, color=use_color())
    return 0


def search_once(pipeline: SearchPipeline, query: str, args: argparse.Namespace) -> SearchResults | None:
    """`query` searched with the command's options (`-k`, `--lexical`, `--one-pass`, `--rerank`,
    `--no-correct`); a query the pipeline refuses is said on stderr and gives None."""
    from explorer.search.core.pipeline import QueryError

    try:
        return pipeline.search(
            query,
            k=args.k,
            dense=not args.lexical,
            two_pass=False if args.one_pass else None,
            rerank=args.rerank,
            correct=getattr(args, "correct", True),
        )
    except QueryError as exc:
        print(f"explorer: {exc}", file=sys.stderr)
        return None


def _ask_server(
    args: argparse.Namespace, query: str, vault: Path, settings: Settings
) -> SearchResults | dict[str, Any] | str | None:
    """The results from an Explorer process already serving `vault` (app, watch, MCP).

    For `--json`, the served JSON form as it is (what the search's own `to_dict()` printed: one
    form, so nothing to rebuild); for the plain list, the results rebuilt from it
    (`SearchResults.from_dict`) to be printed here. A query the server rejects comes back as its
    message; None when no process answers (or its answer is not a results form), so the command
    searches itself.
    """
    from explorer.engine.server import ask, settings_key

    answer = ask(
        vault,
        {
            "op": "search",
            "query": query,
            "k": args.k,
            "lexical": args.lexical,
            "one_pass": args.one_pass,
            "rerank": args.rerank,
            "correct": getattr(args, "correct", True),
            "settings": settings_key(settings),
        },
    )
    if answer is None:
        return None
    if isinstance(answer.get("query_error"), str):
        return answer["query_error"]
    data = answer.get("results")
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        return None
    if args.json:
        return data
    from explorer.search.schema import SearchResults

    try:
        return SearchResults.from_dict(data)
    except (ValueError, TypeError, AttributeError):
        return None
