"""Open the selected note where the person works (Obsidian, $EDITOR) and copy its node_id as a `[[link]]`.

The main screen and the note view share these; the argument lists come from
`explorer.vault.external` (no shell), and every message shown passes the app's plain-text notify.
"""

from __future__ import annotations

import os
from typing import Any

from textual.app import SuspendNotSupported

from explorer.vault.external import (
    OpenError,
    editor_launch,
    line_at,
    obsidian_launch,
    run_detached,
    run_in_terminal,
    wikilink,
)

ExplorerApp = Any
"""The running app (explorer.tui.app.ExplorerApp: `vault`, `index`, `refresh_index`, notify and clipboard)."""


def open_in_obsidian(app: ExplorerApp, path: str) -> None:
    """Hand `obsidian://open?vault=…&file=…` to the desktop opener; without one, copy the URI and say so."""
    url, launch = obsidian_launch(app.vault, path)
    if launch is None:
        app.copy_to_clipboard(url)
        app.notify(f"No xdg-open or open on this machine: the Obsidian URI was copied.\n{url}", timeout=8)
        return
    try:
        run_detached(launch)
    except OSError as exc:
        app.copy_to_clipboard(url)
        app.notify(
            f"Cannot start {launch.argv[0]}: {exc}. The Obsidian URI was copied.", severity="error", timeout=8
        )
        return
    app.notify(path, title="Opening in Obsidian", timeout=3)


def open_in_editor(app: ExplorerApp, path: str, cursor: int | None) -> None:
    """Run $VISUAL / $EDITOR on the note at the cursor's line, the app suspended meanwhile; re-index the note after."""
    if app.is_web:
        # A browser tab has no terminal to hand over: the editor would start in the server's.
        app.notify(
            "An editor runs in a terminal: in a browser tab, write in writing mode (F4 / alt+w) "
            "or open the note in Obsidian (ctrl+o).",
            severity="warning",
            timeout=6,
        )
        return
    index = app.index
    note = index.note(path) if index is not None else None
    line = line_at(note.text, cursor) if note is not None and cursor else None
    try:
        launch = editor_launch(app.vault, path, line)
    except OpenError as exc:
        app.notify(str(exc), severity="warning", timeout=6)
        return
    before = _stamp(str(app.vault / path))
    try:
        try:
            with app.suspend():
                code = run_in_terminal(launch)
        except SuspendNotSupported:
            # No terminal to hand over (a headless run): the editor runs beside the app.
            code = run_in_terminal(launch)
    except OSError as exc:
        app.notify(f"Cannot start the editor {launch.argv[0]}: {exc}", severity="error", timeout=8)
        return
    if code != 0:
        app.notify(f"The editor exited with code {code}.", severity="warning", timeout=6)
    if _stamp(str(app.vault / path)) != before:
        # The watcher sees the save too; this covers a vault opened without one.
        app.refresh_index([path])


def _stamp(file: str) -> tuple[int, int] | None:
    """(mtime, size) of a file, None when it cannot be read: whether the editor saved it."""
    try:
        st = os.stat(file)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def copy_link(app: ExplorerApp, node_id: str, heading: str | None = None) -> None:
    """Copy `node_id` as an Obsidian `[[link]]` (OSC 52: the terminal's clipboard)."""
    link = wikilink(node_id, heading)
    app.copy_to_clipboard(link)
    app.notify(link, title="Copied link", timeout=3)
