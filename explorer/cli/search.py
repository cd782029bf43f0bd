"""`explorer search`: run one search and print it as JSON or as a readable list."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from explorer.cli.render import print_json, print_results
from explorer.config import Settings


def cmd_search(args: argparse.Namespace, vault: Path, settings: Settings) -> int:
    """Search the vault for the query words and print the results."""
    from explorer.engine import make_pipeline, open_index
    from explorer.search.pipeline import QueryError

    query = " ".join(args.query)
    if args.k is not None and args.k < 1:
        print("explorer: -k must be 1 or more", file=sys.stderr)
        return 2
    index, _ = open_index(vault, settings)
    pipeline = make_pipeline(index, settings)
    try:
        results = pipeline.search(query, k=args.k, dense=not args.lexical,
                                  two_pass=False if args.one_pass else None, rerank=args.rerank)
    except QueryError as exc:
        print(f"explorer: {exc}", file=sys.stderr)
        return 2
    finally:
        index.close()
    if args.json:
        print_json(results.to_dict())
        return 0

    print_results(results, explain=args.explain, color=sys.stdout.isatty())
    return 0
