"""`explorer search --team URI[/COLLECTION]`: search a team's shared collection with no vault on disk.

The reader's notes are the collection's rows (explorer.index.milvus.reader): every search covers
every vault of the collection, as `vault:*` does for a writer; `vault:NAME` in the query narrows it.
Nothing is written: not to the collection, not to disk. An engine that cannot be reached, or a
collection that does not exist, is one line naming the URI and exit status 2.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from explorer.cli.render import print_json, print_results, use_color
from explorer.config import ConfigError, Settings, load_settings

if TYPE_CHECKING:
    from explorer.engine.tools import ToolSpec


def team_query(query: str) -> str:
    """The query as a team reader searches it: `vault:*` added when it names no vault."""
    from explorer.search.core.query import parse_query

    return query if parse_query(query).vaults else f"{query} vault:*"


def team_settings(args: argparse.Namespace) -> Settings:
    """Settings without a vault: defaults, the environment, `--set` and `--no-embeddings`."""
    flags: dict[str, Any] = {}
    for item in getattr(args, "set", []) or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: write SECTION.KEY=VALUE")
        flags[key.strip()] = value.strip()
    if getattr(args, "no_embeddings", False):
        flags["index.embeddings"] = False
    return load_settings(None, flags, warn=lambda m: print(f"explorer: warning: {m}", file=sys.stderr))


def refuse_vault(args: argparse.Namespace) -> str:
    """Why the options cannot go with `--team` ("" when they can)."""
    if getattr(args, "vault", None) is not None or getattr(args, "vault_pos", None) is not None:
        return "--team reads a shared collection, not a vault: leave out the vault"
    if getattr(args, "allow_write", False):
        return "--team is read-only: --allow-write needs a vault"
    return ""


def cmd_team_search(args: argparse.Namespace) -> int:
    """One search of the team's collection, printed as `explorer search` prints one."""
    from explorer.cli.search import search_once
    from explorer.engine.build import make_pipeline, open_team_reader

    why = refuse_vault(args)
    if why:
        print(f"explorer: {why}", file=sys.stderr)
        return 2
    if args.k is not None and args.k < 1:
        print("explorer: -k must be 1 or more", file=sys.stderr)
        return 2
    settings = team_settings(args)
    reader = open_team_reader(args.team, settings, load_model=not args.lexical)
    try:
        results = search_once(make_pipeline(reader, settings), team_query(" ".join(args.query)), args)
    finally:
        reader.close(exiting=True)
    if results is None:
        return 2
    if args.json:
        print_json(results.to_dict())
        return 0
    print_results(results, explain=args.explain, color=use_color())
    return 0


class TeamService:
    """What `explorer mcp --team` serves (the tools of explorer.cli.mcp.MemoryService, read-only):
    `search`, `get_context` and `stats` over the team's collection; the tools that read a vault on
    disk (`recent`, `find`, `explain`, `why_not`) say they need one."""

    allow_write = False

    def __init__(self, target: str, settings: Settings) -> None:
        from explorer.engine.build import make_pipeline, open_team_reader

        self.settings = settings
        self.index = open_team_reader(target, settings, load_model=settings.index.embeddings)
        self.pipeline = make_pipeline(self.index, settings)
        self._opened = time.time()

    def close(self) -> None:
        self.index.close(exiting=True)

    def freshness(self) -> dict[str, Any]:
        """What the reader reads: the collection's rows as the engine holds them now."""
        stats = self.index.statistics()
        return {
            "backend": "milvus (team reader, read-only)",
            "backend_uri": self.index.backend_uri,
            "collection": self.index.engine.collection,
            "vaults": sorted(stats.vaults),
            "notes": stats.notes,
            "shards": stats.n,
            "shards_without_vectors": stats.n - stats.vectors,
            "model_state": self.index.model_state.value,
        }

    def tools(self) -> Iterator[tuple[Callable[..., dict[str, Any]], ToolSpec]]:
        """The memory service's read-only tools, each answered by this service's method of that name
        (offered with the memory service's signature and description, so an agent sees one tool list)."""
        from explorer.engine.memory import MemoryService
        from explorer.engine.tools import tool_spec

        for name, attr in vars(MemoryService).items():
            spec = tool_spec(attr)
            if spec is None or spec.writes:
                continue
            mine = getattr(self, name)

            def call(
                *args: Any, _mine: Callable[..., dict[str, Any]] = mine, **kwargs: Any
            ) -> dict[str, Any]:
                return _mine(*args, **kwargs)

            signature = inspect.signature(attr)
            call.__signature__ = signature.replace(parameters=list(signature.parameters.values())[1:])  # type: ignore[attr-defined]
            call.__name__, call.__doc__ = name, attr.__doc__
            yield call, spec

    def search(self, query: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        from explorer.engine.memory import MemoryService

        return MemoryService.search(self, team_query(query), *args, **kwargs)  # type: ignore[arg-type]

    def get_context(
        self,
        target: str,
        cursor: int | None = None,
        before: int = 1000,
        after: int = 1000,
        window: int | None = None,
    ) -> dict[str, Any]:
        from explorer.engine.tools import MAX_CONTEXT, ToolInputError, check_int
        from explorer.index.targets import ContextError, context_for

        if window is not None:
            check_int(window, "window", 0, 2 * MAX_CONTEXT)
            before, after = window // 2, window - window // 2
        for name, value in (("before", before), ("after", after)):
            if not isinstance(value, int) or value < 0 or value > MAX_CONTEXT:
                raise ToolInputError(f"{name} must be 0-{MAX_CONTEXT} characters, got {value!r}")
        if not isinstance(target, str) or not target.strip().startswith("vault:"):
            raise ToolInputError("give a node_id or path as search returned it: vault:NAME/PATH[#...]")
        try:
            found = context_for(self.index, target.strip(), cursor, before, after)
        except ContextError as exc:
            raise ToolInputError(str(exc)) from exc
        return {**found.to_dict(), "index": self.freshness()}

    def stats(self) -> dict[str, Any]:
        return {**self.freshness(), "read_only": True}

    def _needs_vault(self, *_args: Any, **_kwargs: Any) -> dict[str, Any]:
        from explorer.engine.tools import ToolInputError

        raise ToolInputError("this tool reads a vault on disk: a team reader (explorer mcp --team) has none")

    recent = find = explain = why_not = _needs_vault


def run_team_mcp(args: argparse.Namespace) -> int:
    """`explorer mcp --team URI[/COLLECTION]`: serve the team's collection over stdio, read-only."""
    from explorer.cli.mcp import build_server

    why = refuse_vault(args)
    if why or getattr(args, "http", None) is not None:
        print(f"explorer: {why or '--team serves over stdio only'}", file=sys.stderr)
        return 2
    service = TeamService(args.team, team_settings(args))
    try:
        build_server(service).run("stdio")  # type: ignore[arg-type]
    finally:
        service.close()
    return 0
