"""Commands run in the test process, for tests about what they answer.

- `mcp_client`: `explorer mcp ARGS` served to the real MCP SDK client over the SDK's in-memory
  transport: the command's own parser and settings (`--set`, `--no-embeddings`, `EXPLORER_*`), the
  memory service as `explorer mcp` opens it and the server `build_server` offers over stdio and HTTP.
- `run_cli`: `explorer ARGS` through its main(), its output taken by capsys.
- `bounded`: a bound on a block that could wait forever in process (a read of a named pipe).

A test about the process itself (start, stdio framing, the client leaving, signals, exit codes of
the real binary, a memory limit) starts it as a process (tests/test_mcp.py, test_lifecycle.py):
each costs ~1.5 s of CPU to import Explorer, ~2 s more for the MCP SDK, before its first answer.
"""

from __future__ import annotations

import faulthandler
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import pytest
from mcp import Client


@asynccontextmanager
async def mcp_client(
    vault: Path, *extra: str, on_message: Callable[[str], None] | None = None
) -> AsyncIterator[Client]:
    """A connected client of `explorer mcp VAULT EXTRA...` (stdio options only), closed after;
    `on_message` hears what the command prints on stderr (without its `explorer: ` prefix)."""
    from explorer.cli import entry
    from explorer.cli.mcp import build_server
    from explorer.engine.memory import MemoryService

    args = entry.build_parser().parse_args(["mcp", str(vault), *extra])
    assert args.http is None and args.team is None and not args.allow_host, "stdio options only"
    root, settings = entry.command_settings(args)
    # As run_mcp opens it.
    service = MemoryService(
        root,
        settings,
        allow_write=args.allow_write,
        user=args.user,
        watch=not args.no_watch,
        on_message=on_message,
    )
    try:
        async with Client(build_server(service)) as client:
            yield client
    finally:
        service.close()


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`explorer ARGS` through its main() in this process: (exit code, stdout, stderr)."""
    from explorer.cli.entry import main

    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@contextmanager
def bounded(seconds: float) -> Iterator[None]:
    """Ends the test process (printing where each thread was) if the block has not ended in `seconds`:
    a process started with a timeout would be killed instead, but this one is the test run."""
    faulthandler.dump_traceback_later(seconds, exit=True, file=sys.__stderr__)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
