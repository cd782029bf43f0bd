"""`explorer mcp ARGS` served in the test process, to the real MCP SDK client over the SDK's in-memory
transport: the command's own parser and settings (`--set`, `--no-embeddings`, `EXPLORER_*`), the
memory service as `explorer mcp` opens it and the server `build_server` offers over stdio and HTTP.

For tests about what the tools answer; a test about the process itself (start, stdio framing, the
client leaving, signals) starts `explorer mcp` as a process (tests/test_mcp.py, test_lifecycle.py).
A process costs ~1.5 s of CPU to import Explorer before its first answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from mcp import Client


@asynccontextmanager
async def mcp_client(vault: Path, *extra: str) -> AsyncIterator[Client]:
    """A connected client of `explorer mcp VAULT EXTRA...` (stdio options only), closed after."""
    from explorer.cli import entry
    from explorer.cli.mcp import build_server
    from explorer.engine.memory import MemoryService

    args = entry.build_parser().parse_args(["mcp", str(vault), *extra])
    assert args.http is None and args.team is None and not args.allow_host, "stdio options only"
    root, settings = entry.command_settings(args)
    # As run_mcp opens it.
    service = MemoryService(
        root, settings, allow_write=args.allow_write, user=args.user, watch=not args.no_watch
    )
    try:
        async with Client(build_server(service)) as client:
            yield client
    finally:
        service.close()
