"""Command line: `explorer [VAULT]` opens the app; `explorer search|index|find|context|open|why-not|watch|stats` work headless.

This module parses the arguments and hands each command to its module in `explorer.cli`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from explorer.config import ConfigError, Settings, load_settings
from explorer.text.safe import SafeStream

COMMANDS = ("search", "index", "find", "context", "open", "watch", "stats", "mcp", "eval", "why-not", "serve")
#: The commands that take the vault as their first argument (the others take --vault).
_POSITIONAL = ("index", "stats", "watch", "eval", "mcp", "serve")


def default_vault(command: str | None = None) -> Path:
    """The vault of a command that names none, as git finds its repository.

    $EXPLORER_VAULT, else the current folder or its nearest parent holding `.obsidian/` or
    `.explorer/`. Nothing else: no index is ever written into a folder the user did not name or
    stand in.

    Raises:
        VaultError: when there is none, with one line saying how to name one.
    """
    from explorer.vault.scan import VaultError, discover_vault

    env = os.environ.get("EXPLORER_VAULT")
    if env:
        return Path(env)
    found = discover_vault(Path.cwd())
    if found is not None:
        return found
    if command is None:
        how = "explorer PATH"
    elif command in _POSITIONAL:
        how = f"explorer {command} PATH"
    else:
        how = f"explorer {command} --vault PATH ..."
    raise VaultError(
        f"no vault here: {Path.cwd()} and its parents hold no .obsidian/ or .explorer/ folder; "
        f"name one with `{how}` or EXPLORER_VAULT=PATH, or run explorer inside the vault"
    )


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--vault",
        "-V",
        type=Path,
        default=None,
        help="vault folder (default: $EXPLORER_VAULT, else the vault of the current folder)",
    )
    p.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a setting"
    )
    p.add_argument("--no-embeddings", action="store_true", help="BM25 only: do not load the embedding model")
    p.add_argument(
        "--force", action="store_true", help="open a system folder or the home folder itself as a vault"
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every sub-command."""
    parser = argparse.ArgumentParser(
        prog="explorer",
        usage="explorer [VAULT] [--set SECTION.KEY=VALUE] [--no-embeddings]\n       explorer COMMAND ...",
        description="Explore an Obsidian-style Markdown vault. `explorer VAULT` opens the app on VAULT; "
        "a COMMAND below works headless (explorer COMMAND -h for its options).",
        epilog="Without a vault named, explorer uses $EXPLORER_VAULT, else the current folder or its nearest "
        "parent holding .obsidian/ or .explorer/.",
    )
    sub = parser.add_subparsers(dest="command", title="commands", metavar="COMMAND")

    p = sub.add_parser("search", help="search the vault (hybrid BM25 + embeddings)")
    p.add_argument(
        "query",
        nargs="+",
        help='the query; filters: tag: path: file: section: "phrase" -word [property:value] after: before: on: recent: vault:',
    )
    _add_common(p)
    p.add_argument("-k", type=int, default=None, help="number of results (default 15)")
    p.add_argument("--json", action="store_true", help="print SearchResults as JSON")
    p.add_argument("--explain", action="store_true", help="print each result's contributions table")
    p.add_argument(
        "--rerank", dest="rerank", action="store_true", default=None, help="rerank (default: setting)"
    )
    p.add_argument("--no-rerank", dest="rerank", action="store_false", help="do not rerank")
    p.add_argument("--one-pass", action="store_true", help="skip the analysis and second pass")
    p.add_argument("--lexical", action="store_true", help="BM25 only for this search")
    p.add_argument(
        "--no-correct",
        dest="correct",
        action="store_false",
        help="search every word as typed (no typo correction)",
    )
    p.add_argument(
        "--local",
        action="store_true",
        help="search in this process even when a running Explorer serves the vault",
    )
    p.add_argument(
        "--team",
        default=None,
        metavar="URI[/COLLECTION]",
        help="search a team's shared Milvus collection with no vault on disk (read-only; every vault, "
        "as vault:* does)",
    )

    p = sub.add_parser(
        "why-not", help="why a note is not in the top k for a query, and what would bring it there"
    )
    p.add_argument("query", help="the query, quoted, as you would search it")
    p.add_argument(
        "note", help="the note you expected: a path, a link target, a title or a unique part of a path"
    )
    _add_common(p)
    p.add_argument("-k", type=int, default=None, help="the top k it should reach (default 15)")
    p.add_argument("--json", action="store_true", help="print the proof as JSON")

    p = sub.add_parser("index", help="build or refresh the index, embedding what changed")
    p.add_argument("vault_pos", nargs="?", type=Path, metavar="VAULT")
    _add_common(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")

    p = sub.add_parser("stats", help="index counts, model state, skipped files")
    p.add_argument("vault_pos", nargs="?", type=Path, metavar="VAULT")
    _add_common(p)
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--coverage",
        action="store_true",
        help="what is not indexed and why, shards without vectors, largest notes, ignored files, freshness",
    )

    p = sub.add_parser("find", help="classic cursor search tools: tfidf, phrase, and, fuzzy")
    p.add_argument(
        "keywords",
        nargs="*",
        help="words to find; tag:, path:, file:, section: and #tag items filter the notes, as in the search box",
    )
    _add_common(p)
    p.add_argument("--mode", choices=("tfidf", "phrase", "and", "fuzzy"), default="tfidf")
    p.add_argument("-n", "--max-results", type=int, default=None)
    p.add_argument("--context-chars", type=int, default=None)
    p.add_argument("--window", type=int, default=None, help="proximity window in words")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("context", help="text around a cursor in a note")
    p.add_argument("target", help="node_id or vault-relative path")
    _add_common(p)
    p.add_argument("--cursor", type=int, default=None, help="character offset (default: start of the node)")
    p.add_argument("--before", type=int, default=1000)
    p.add_argument("--after", type=int, default=1000)
    p.add_argument("--highlight", action="append", default=[], help="words to highlight")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("open", help="open a note in Obsidian or in $EDITOR at the passage's line")
    p.add_argument("target", help="node_id or vault-relative path (as search and context print them)")
    _add_common(p)
    how = p.add_mutually_exclusive_group()
    how.add_argument(
        "--obsidian", action="store_true", help="open in Obsidian through obsidian://open (the default)"
    )
    how.add_argument("--editor", action="store_true", help="open in $VISUAL / $EDITOR at the passage's line")
    p.add_argument(
        "--print", action="store_true", help="print the URI or the editor command instead of running it"
    )

    p = sub.add_parser("watch", help="keep the index current headless, logging each batch")
    p.add_argument("vault_pos", nargs="?", type=Path, metavar="VAULT")
    _add_common(p)

    p = sub.add_parser("eval", help="replay your relevance marks as a benchmark; exit 1 on a regression")
    p.add_argument("vault_pos", nargs="?", type=Path, metavar="VAULT")
    _add_common(p)
    p.add_argument(
        "--threshold",
        type=float,
        default=0.05,
        help="largest tolerated drop of mean nDCG@10 or MRR@10 (default 0.05)",
    )
    p.add_argument(
        "--update-baseline", action="store_true", help="store this run's scores as the new baseline"
    )
    p.add_argument("--json", action="store_true")

    p = sub.add_parser(
        "mcp", help="serve the vault to LLM agents as an MCP server (stdio, or HTTP with --http)"
    )
    p.add_argument("vault_pos", nargs="?", type=Path, metavar="VAULT")
    _add_common(p)
    p.add_argument(
        "--allow-write", action="store_true", help="enable the remember tool (writes notes into the vault)"
    )
    p.add_argument("--user", default=None, help="user folder remember writes under (Users/<user>/)")
    p.add_argument("--no-watch", action="store_true", help="do not watch the vault for changes while serving")
    p.add_argument(
        "--team",
        default=None,
        metavar="URI[/COLLECTION]",
        help="serve a team's shared Milvus collection with no vault on disk (read-only: search, get_context, stats)",
    )
    p.add_argument(
        "--http",
        default=None,
        metavar="HOST:PORT",
        help="serve several agents over streamable HTTP at http://HOST:PORT/mcp instead of stdio "
        "(bearer token from EXPLORER_MCP_TOKEN; required beyond loopback)",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="with --http: a name clients use to reach this machine (Host header check; repeatable)",
    )
    p = sub.add_parser(
        "serve", help="open the app in a browser: serves it at a URL it prints (this machine only)"
    )
    p.add_argument("vault_pos", nargs="?", type=Path, metavar="VAULT")
    _add_common(p)
    p.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (beyond loopback: EXPLORER_SERVE_TOKEN)"
    )
    p.add_argument(
        "--port", type=int, default=None, help="port (default 8771, or a free one when it is taken)"
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="another name browsers use to reach this machine (repeatable)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `explorer` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        build_parser().print_help()
        return 0
    if not argv or argv[0] not in COMMANDS:
        return _run_app(argv)
    args = build_parser().parse_args(argv)
    with _safe_stdio():
        return _run_command(args)


@contextlib.contextmanager
def _safe_stdio() -> Iterator[None]:
    """stdout and stderr pass every write through the terminal sanitiser while a command runs."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(saved[0], allow_sgr=True), SafeStream(saved[1], allow_sgr=True)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def _run_command(args: argparse.Namespace) -> int:
    try:
        return _dispatch(args)
    except ConfigError as exc:
        print(f"explorer: configuration error: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        # A module of explorer itself (or one it needs) failed to load: say which, never a traceback.
        print(f"explorer: a part of explorer could not be loaded ({exc}): reinstall it", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`explorer search ... | head`): stop quietly, as Unix tools do, and
        # point stdout at /dev/null so the interpreter's last flush cannot raise again.
        if sys.__stdout__ is not None:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.__stdout__.fileno())
        return 141
    except OSError as exc:
        print(f"explorer: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _run_app(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="explorer",
        description="Open the explorer app on a vault (default: $EXPLORER_VAULT, else the vault of the "
        "current folder: the nearest one holding .obsidian/ or .explorer/).",
        epilog=f"Sub-commands: {', '.join(COMMANDS)} (explorer COMMAND -h)",
    )
    parser.add_argument("vault", nargs="?", type=Path, default=None)
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--no-embeddings", action="store_true")
    parser.add_argument(
        "--force", action="store_true", help="open a system folder or the home folder itself as a vault"
    )
    args = parser.parse_args(argv)
    notices: list[str] = []
    try:
        vault, settings = _settings(args.vault, args, warn=notices.append)
    except (ConfigError, OSError) as exc:
        print(f"explorer: {exc}", file=sys.stderr)
        return 2
    from explorer.tui.app import run_app

    return run_app(vault, settings, notices=notices)


def _warn(message: str) -> None:
    print(f"explorer: warning: {message}", file=sys.stderr)


def _settings(
    vault: Path | None, args: argparse.Namespace, warn: Callable[[str], None] = _warn
) -> tuple[Path, Settings]:
    from explorer.vault.scan import VaultError, check_vault, system_root_reason

    root = check_vault(vault or default_vault(getattr(args, "command", None)))
    refused = system_root_reason(root)
    if refused and not getattr(args, "force", False):
        # Before anything reads the folder or writes an index into it.
        raise VaultError(f"not opening {root} as a vault: {refused}; pass --force if you mean it")
    flags: dict[str, Any] = {}
    for item in getattr(args, "set", []) or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: write SECTION.KEY=VALUE")
        flags[key.strip()] = value.strip()
    if getattr(args, "no_embeddings", False):
        flags["index.embeddings"] = False
    return root, load_settings(root, flags, warn=warn)


def command_settings(args: argparse.Namespace) -> tuple[Path, Settings]:
    """The vault a parsed command runs on and its settings (files, `EXPLORER_*`, `--set`, flags).

    Raises:
        ConfigError: A bad setting.
        OSError: No vault there (VaultError), or one refused without --force.
    """
    return _settings(getattr(args, "vault_pos", None) or args.vault, args)


def _dispatch(args: argparse.Namespace) -> int:
    if getattr(args, "team", None) is not None:
        from explorer.cli.team import cmd_team_search, run_team_mcp

        return cmd_team_search(args) if args.command == "search" else run_team_mcp(args)
    vault, settings = command_settings(args)
    if args.command == "search":
        from explorer.cli.search import cmd_search

        return cmd_search(args, vault, settings)
    if args.command == "index":
        from explorer.cli.index import cmd_index

        return cmd_index(args, vault, settings)
    if args.command == "stats":
        from explorer.cli.index import cmd_stats

        return cmd_stats(args, vault, settings)
    if args.command == "find":
        from explorer.cli.classic import cmd_find

        return cmd_find(args, vault, settings)
    if args.command == "context":
        from explorer.cli.classic import cmd_context

        return cmd_context(args, vault, settings)
    if args.command == "open":
        from explorer.cli.open import cmd_open

        return cmd_open(args, vault, settings)
    if args.command == "watch":
        from explorer.cli.index import cmd_watch

        return cmd_watch(vault, settings)
    if args.command == "eval":
        from explorer.cli.eval import cmd_eval

        return cmd_eval(args, vault, settings)
    if args.command == "why-not":
        from explorer.cli.whynot import cmd_why_not

        return cmd_why_not(args, vault, settings)
    if args.command == "serve":
        from explorer.cli.serve_web import run_serve

        return run_serve(vault, settings, args.host, args.port, args.allow_host)
    if args.command == "mcp" and args.http is not None:
        from explorer.cli.mcp_http import run_mcp_http

        return run_mcp_http(
            vault,
            settings,
            args.http,
            allow_write=args.allow_write,
            user=args.user,
            watch=not args.no_watch,
            allow_hosts=args.allow_host,
        )
    if args.command == "mcp":
        from explorer.cli.mcp import run_mcp

        if args.allow_host:
            print(
                "explorer: --allow-host goes with --http HOST:PORT (over stdio there is no Host to check)",
                file=sys.stderr,
            )
            return 2

        return run_mcp(vault, settings, allow_write=args.allow_write, user=args.user, watch=not args.no_watch)
    return 2
