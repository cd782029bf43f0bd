"""Explorer: a terminal memory explorer for Obsidian-style Markdown vaults."""

from __future__ import annotations

__version__ = "0.1.0"
