"""`explorer search`: run one search and print it as JSON or as a readable list."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from explorer.cli.render import print_json, print_results, use_color
from explorer.config import Settings


def cmd_search(args: argparse.Namespace, vault: Path, settings: Settings) -> int:
    """Search the vault for the query words and print the results."""
    query = " ".join(args.query)
    if args.k is not None and args.k < 1:
        print("explorer: -k must be 1 or more", file=sys.stderr)
        return 2
    if not getattr(args, "local", False):
        served = _ask_server(args, query, vault, settings)
        if served is not None:
            return served
    from explorer.engine import make_pipeline, open_index
    from explorer.search.pipeline import QueryError

    index, _ = open_index(vault, settings, load_model=not args.lexical)
    pipeline = make_pipeline(index, settings)
    try:
        results = pipeline.search(
            query,
            k=args.k,
            dense=not args.lexical,
            two_pass=False if args.one_pass else None,
            rerank=args.rerank,
        )
    except QueryError as exc:
        print(f"explorer: {exc}", file=sys.stderr)
        return 2
    finally:
        index.close(exiting=True)
    if args.json:
        print_json(results.to_dict())
        return 0

    print_results(results, explain=args.explain, color=use_color())
    return 0


def _ask_server(args: argparse.Namespace, query: str, vault: Path, settings: Settings) -> int | None:
    """Answer through an Explorer process already serving `vault` (app, watch, MCP); None when there is none."""
    from explorer.engine import ask, settings_key

    color = use_color()
    answer = ask(
        vault,
        {
            "op": "search",
            "query": query,
            "k": args.k,
            "lexical": args.lexical,
            "one_pass": args.one_pass,
            "rerank": args.rerank,
            "settings": settings_key(settings),
            "format": "json" if args.json else "text",
            "explain": args.explain,
            "color": color,
        },
    )
    if answer is None:
        return None
    if "query_error" in answer:
        print(f"explorer: {answer['query_error']}", file=sys.stderr)
        return 2
    if args.json and isinstance(answer.get("results"), dict):
        print_json(answer["results"])
        return 0
    if not args.json and isinstance(answer.get("text"), str):
        sys.stdout.write(answer["text"])
        return 0
    return None
