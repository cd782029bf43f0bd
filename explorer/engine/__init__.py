"""The one place the system is assembled: settings + index + pipeline, and the session that runs them.

`build` makes the parts (`new_index`, `open_index`, `make_pipeline`), `session` runs them as one
(`Session`: index, pipeline, watcher, the embedding loop, the optional server) for the app,
`explorer watch` and `explorer mcp`, and `server` answers one-shot searches from other processes.
"""

from __future__ import annotations

from explorer.engine.build import Progress, build_components, make_pipeline, new_index, open_index
from explorer.engine.session import EmbeddingLoop, Session, SessionHooks

__all__ = [
    "EmbeddingLoop",
    "Progress",
    "Session",
    "SessionHooks",
    "build_components",
    "make_pipeline",
    "new_index",
    "open_index",
]
