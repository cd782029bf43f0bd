"""Command line entry points, one module per command group; `main` is the `explorer` console script."""

from __future__ import annotations

from explorer.cli.entry import main

__all__ = ["main"]
