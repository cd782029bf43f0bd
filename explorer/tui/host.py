"""What the screens read from the app they run in, as a type (the app implements it; screens never import the app)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from explorer.config import Settings
from explorer.tui.widgets.status_bar import StatusInfo

if TYPE_CHECKING:
    from explorer.index.backend import IndexBackend
    from explorer.search.core.pipeline import SearchPipeline


class Host(Protocol):
    """The running `explorer.tui.app.ExplorerApp` as its screens see it.

    Screens read these; what they ask of the app goes as messages (`explorer.tui.messages`), and
    what the app tells them comes the same way.
    """

    vault: Path
    """The vault root."""
    settings: Settings
    """The app's settings."""
    index: IndexBackend | None
    """The open index (None until it opened)."""
    pipeline: SearchPipeline | None
    """The search pipeline over it (None until the index opened)."""
    status: StatusInfo
    """What the status bar shows: index, model and watcher states."""

    def refresh_index(self, paths: list[str], wait: bool = False) -> None:
        """Apply changes of `paths` to the index (in the calling worker thread when `wait`)."""
        ...
