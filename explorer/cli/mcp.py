"""`explorer mcp`: the memory service's tools as a Model Context Protocol server over stdio, for LLM agents.

The tools are declared once, in explorer.engine.memory (`MemoryService` methods marked `@tool`):
this module only offers them (`build_server`: name, docstring, the signature the SDK turns into an
input schema, annotations) and runs the transport (stdio here; streamable HTTP in
explorer.cli.mcp_http). Bad input is a tool error (`is_error` with a message for the model), never
a dead server.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from explorer.config import Settings
from explorer.engine.memory import MemoryService
from explorer.engine.tools import ToolInputError, arguments, sized

INSTRUCTIONS = """\
Explorer searches an Obsidian-style Markdown vault that serves as long-term memory (notes,
knowledge, beliefs, preferences, past conversation turns).
Typical use: `search` with a natural-language question; read `quality.level` (high / medium / low)
and `no_good_match`; open the best hits with `get_context` (pass a result's `node_id`).
`no_good_match: true` means the vault may not hold the answer, so say so rather than guess.
Answers are brief by default (under 8000 characters): page with `offset`, ask for `detail` only
when you need scores and passages. Use `recent` for a user's latest turns, `find` for exact words
or phrases, `why_not` when a note you expected is missing, `explain` to see why a note ranked.
Every answer has an `index` block: `seconds_since_update` and `watcher` tell how fresh it is."""


def load_sdk() -> None:
    """Import the MCP SDK's server (~2 s of CPU) before a service opens its index and starts its model.

    Imported after, it competes for the interpreter with the embedding thread, and nothing reads
    the client's messages until it is in: the first answer waits, and a client that left at once
    keeps the process embedding until the import ends.
    """
    import mcp.server.mcpserver  # noqa: F401


def build_server(service: MemoryService) -> Any:
    """An MCPServer offering each tool of `service`; anticipated failures become tool errors, and so
    does an argument the tool does not take (the SDK would drop it without a word: a misnamed date
    filter would answer as if it had been applied)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import ToolAnnotations

    takes: dict[str, list[str]] = {}

    class Server(MCPServer):
        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            known = takes.get(name)
            unknown = [a for a in arguments or {} if known is not None and a not in known]
            if unknown:
                raise ToolError(_unknown_arguments(name, unknown, known or []))
            return await super().call_tool(name, arguments, context)

    server = Server(name="explorer", instructions=INSTRUCTIONS, version=_version())
    for handler, spec in service.tools():
        takes[spec.name] = list(inspect.signature(handler).parameters)
        annotations = (
            ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
            if spec.writes
            else ToolAnnotations(read_only_hint=True, open_world_hint=False)
        )
        server.add_tool(
            _guarded(handler),
            name=spec.name,
            description=spec.description,
            annotations=annotations,
            structured_output=False,
        )
    return server


def _guarded(handler: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """`handler` with every failure a ToolError whose message never quotes a long argument back
    (its signature, which the SDK reads for the input schema, is the handler's)."""
    from mcp.server.mcpserver.exceptions import ToolError

    signature = inspect.signature(handler)

    @functools.wraps(handler)
    def call(*args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            return handler(*args, **kwargs)
        except ToolInputError as exc:
            raise ToolError(sized(str(exc), arguments(signature, args, kwargs))) from exc
        except Exception as exc:  # the server must outlive any one call
            raise ToolError(
                sized(f"{type(exc).__name__}: {exc}", arguments(signature, args, kwargs))
            ) from exc

    return call


def _unknown_arguments(tool: str, unknown: list[str], known: list[str]) -> str:
    """The error for arguments `tool` does not take: at most 5 of them, each cut to 60 characters."""
    shown = ", ".join(repr(a if len(a) <= 60 else a[:60] + "…") for a in unknown[:5])
    more = f" and {len(unknown) - 5:,} more" if len(unknown) > 5 else ""
    return (
        f"{tool} takes no argument {shown}{more}; nothing was done. "
        f"Its arguments are: {', '.join(known) or 'none'}"
    )


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("explorer")
    except Exception:  # noqa: BLE001 - not installed as a distribution
        return "0"


def run_mcp(
    vault: Path, settings: Settings, *, allow_write: bool = False, user: str | None = None, watch: bool = True
) -> int:
    """Serve `vault` over stdio until the client closes the connection."""
    import sys

    def say(message: str) -> None:
        print(f"explorer: {message}", file=sys.stderr, flush=True)

    load_sdk()
    service = MemoryService(vault, settings, allow_write=allow_write, user=user, watch=watch, on_message=say)
    try:
        build_server(service).run("stdio")
    finally:
        service.close()
    return 0
