"""Command line: `explorer [VAULT]` opens the app; `explorer search|index|find|context|watch|stats` work headless."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from explorer.config import ConfigError, Settings, load_settings
from explorer.render import print_json, print_results

SAMPLE_VAULT = Path(__file__).resolve().parent.parent / "sample_vault"
COMMANDS = ("search", "index", "find", "context", "watch", "stats", "mcp")


def default_vault() -> Path:
    """$EXPLORER_VAULT, else the bundled sample vault."""
    env = os.environ.get("EXPLORER_VAULT")
    return Path(env) if env else SAMPLE_VAULT


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vault", "-V", type=Path, default=None, help="vault folder (default: $EXPLORER_VAULT or sample_vault)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a setting")
    p.add_argument("--no-embeddings", action="store_true", help="BM25 only: do not load the embedding model")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every sub-command."""
    parser = argparse.ArgumentParser(prog="explorer", description="Explore an Obsidian-style Markdown vault.")
    sub = parser.add_subparsers(dest="command")

    p = sub.add_parser("search", help="search the vault (hybrid BM25 + embeddings)")
    p.add_argument("query", nargs="+", help="the query; filters: tag: path: file: section: \"phrase\" -word")
    _add_common(p)
    p.add_argument("-k", type=int, default=None, help="number of results (default 15)")
    p.add_argument("--json", action="store_true", help="print SearchResults as JSON")
    p.add_argument("--explain", action="store_true", help="print each result's contributions table")
    p.add_argument("--rerank", dest="rerank", action="store_true", default=None, help="rerank (default: setting)")
    p.add_argument("--no-rerank", dest="rerank", action="store_false", help="do not rerank")
    p.add_argument("--one-pass", action="store_true", help="skip the analysis and second pass")
    p.add_argument("--lexical", action="store_true", help="BM25 only for this search")

    p = sub.add_parser("index", help="build or refresh the index, embedding what changed")
    p.add_argument("vault_pos", nargs="?", type=Path, metavar="VAULT")
    _add_common(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")

    p = sub.add_parser("stats", help="index counts, model state, skipped files")
    p.add_argument("vault_pos", nargs="?", type=Path, metavar="VAULT")
    _add_common(p)
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("find", help="classic cursor search tools: tfidf, phrase, and, fuzzy")
    p.add_argument("keywords", nargs="*")
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

    p = sub.add_parser("watch", help="keep the index current headless, logging each batch")
    p.add_argument("vault_pos", nargs="?", type=Path, metavar="VAULT")
    _add_common(p)

    p = sub.add_parser("mcp", help="serve the vault to LLM agents as an MCP server over stdio")
    p.add_argument("vault_pos", nargs="?", type=Path, metavar="VAULT")
    _add_common(p)
    p.add_argument("--allow-write", action="store_true", help="enable the remember tool (writes notes into the vault)")
    p.add_argument("--user", default=None, help="user folder remember writes under (Users/<user>/)")
    p.add_argument("--no-watch", action="store_true", help="do not watch the vault for changes while serving")
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
    try:
        return _dispatch(args)
    except ConfigError as exc:
        print(f"explorer: configuration error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"explorer: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _run_app(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="explorer", description="Open the explorer on a vault (default: sample_vault).",
                                     epilog=f"Sub-commands: {', '.join(COMMANDS)} (explorer COMMAND -h)")
    parser.add_argument("vault", nargs="?", type=Path, default=None)
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--no-embeddings", action="store_true")
    args = parser.parse_args(argv)
    try:
        vault, settings = _settings(args.vault, args)
    except (ConfigError, OSError) as exc:
        print(f"explorer: {exc}", file=sys.stderr)
        return 2
    from explorer.tui.app import run_app

    return run_app(vault, settings)


def _settings(vault: Path | None, args: argparse.Namespace) -> tuple[Path, Settings]:
    from explorer.vault.scan import check_vault

    root = check_vault(vault or default_vault())
    flags: dict[str, Any] = {}
    for item in getattr(args, "set", []) or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: write SECTION.KEY=VALUE")
        flags[key.strip()] = value.strip()
    if getattr(args, "no_embeddings", False):
        flags["index.embeddings"] = False
    return root, load_settings(root, flags)


def open_index(vault: Path, settings: Settings, quiet: bool = False, progress: bool = False):
    """Open (load + refresh) the index of `vault`, printing store messages to stderr."""
    from explorer.index.vault_index import VaultIndex

    index = VaultIndex(vault, settings, on_message=lambda m: print(f"explorer: {m}", file=sys.stderr))
    bar = _ProgressBar() if progress and sys.stderr.isatty() else None
    report = index.open(progress=bar.update if bar else None)
    if bar:
        bar.done()
    return index, report


def make_pipeline(index, settings: Settings):
    """The SearchPipeline with the configured term writer, analyser and reranker."""
    from explorer.search.pipeline import SearchPipeline

    term_writer = analyser = reranker = None
    try:
        from explorer.search.setup import build_components

        term_writer, analyser, reranker = build_components(index, settings)
    except ImportError:
        pass
    return SearchPipeline(index, settings, term_writer=term_writer, analyser=analyser, reranker=reranker)


def _dispatch(args: argparse.Namespace) -> int:
    vault_arg = getattr(args, "vault_pos", None) or args.vault
    vault, settings = _settings(vault_arg, args)
    if args.command == "search":
        return _cmd_search(args, vault, settings)
    if args.command == "index":
        return _cmd_index(args, vault, settings)
    if args.command == "stats":
        return _cmd_stats(args, vault, settings)
    if args.command == "find":
        from explorer.classic_cli import cmd_find

        return cmd_find(args, vault, settings)
    if args.command == "context":
        from explorer.classic_cli import cmd_context

        return cmd_context(args, vault, settings)
    if args.command == "watch":
        from explorer.vault.watch import run_watch

        return run_watch(vault, settings)
    if args.command == "mcp":
        from explorer.mcp_server import run_mcp

        return run_mcp(vault, settings, allow_write=args.allow_write, user=args.user, watch=not args.no_watch)
    return 2


def _cmd_search(args: argparse.Namespace, vault: Path, settings: Settings) -> int:
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


def _cmd_index(args: argparse.Namespace, vault: Path, settings: Settings) -> int:
    t0 = time.perf_counter()
    index, report = open_index(vault, settings, progress=True)
    bar = _ProgressBar() if sys.stderr.isatty() else None
    pending_before = len(index.pending())
    cached = index.stats().embedded
    embedded = 0
    if settings.index.embeddings:
        embedded = index.embed_pending(progress=bar.update if bar else None)
        if bar:
            bar.done()
    st = index.stats()
    out = {
        "vault": str(vault),
        "notes": st.notes,
        "shards": st.shards,
        "added": len(report.added),
        "changed": len(report.changed),
        "removed": len(report.removed),
        "skipped": dict(sorted(index.skipped.items())),
        "shards_embedded": embedded,
        "shards_from_cache": cached,
        "shards_without_vectors": st.pending,
        "model": st.model_id if settings.index.embeddings else "off",
        "model_state": st.model_state,
        "runtime": st.runtime,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    if index.model_error:
        out["model_error"] = index.model_error
    index.close()
    if args.json:
        print_json(out)
        return 0
    print(f"Indexed {vault}")
    print(f"  notes   {out['notes']:>7}  ({out['added']} added, {out['changed']} changed, {out['removed']} removed)")
    print(f"  shards  {out['shards']:>7}")
    print(f"  vectors {embedded:>7} embedded, {cached} from cache, {st.pending} missing  [{out['model']} {out['runtime']}, {st.model_state}]")
    if pending_before and not settings.index.embeddings:
        print("  embeddings are off (index.embeddings = false)")
    if index.model_error:
        print(f"  model: {index.model_error}")
    print(f"  skipped {len(out['skipped']):>7}")
    for path, reason in out["skipped"].items():
        print(f"    {path}: {reason}")
    print(f"  time    {out['seconds']:>7.2f} s")
    return 0


def _cmd_stats(args: argparse.Namespace, vault: Path, settings: Settings) -> int:
    index, _ = open_index(vault, settings)
    st = index.stats()
    out = {
        "vault": str(vault), "notes": st.notes, "shards": st.shards, "embedded": st.embedded,
        "shards_without_vectors": st.pending, "model": st.model_id, "model_state": st.model_state,
        "skipped": dict(sorted(index.skipped.items())), "cache_dir": str(index.cache_dir),
    }
    index.close()
    if args.json:
        print_json(out)
    else:
        for key, value in out.items():
            if key == "skipped":
                print(f"{key}: {len(value)}")
                for p, r in value.items():
                    print(f"  {p}: {r}")
            else:
                print(f"{key}: {value}")
    return 0


class _ProgressBar:
    """A one-line progress bar on stderr."""

    def __init__(self) -> None:
        self._last = 0.0
        self._shown = False

    def update(self, stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        width = 30
        filled = int(width * done / total) if total else width
        sys.stderr.write(f"\r{stage:<10} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        sys.stderr.flush()
        self._shown = True

    def done(self) -> None:
        if self._shown:
            sys.stderr.write("\n")
            self._shown = False
