"""The app's remembered choices (theme, query history), kept in one small JSON file written atomically."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from explorer.text.files import write_atomic

#: Queries kept per vault.
HISTORY_SIZE = 100


def default_state_path() -> Path:
    """`$XDG_STATE_HOME/explorer/state.json` (default `~/.local/state/explorer/state.json`)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "explorer" / "state.json"


@dataclass
class UIState:
    """What the app remembers between runs."""

    theme: str | None = None
    """The last theme the user chose (None: use the configured one)."""
    history: dict[str, list[str]] = field(default_factory=dict)
    """Submitted queries per vault (absolute vault path), oldest first."""

    def queries(self, vault: Path) -> list[str]:
        """The query history of a vault."""
        return list(self.history.get(str(vault), []))

    def add_query(self, vault: Path, query: str) -> None:
        """Append a query (moving an earlier copy to the end), keeping the last HISTORY_SIZE."""
        items = [q for q in self.history.get(str(vault), []) if q != query]
        items.append(query)
        self.history[str(vault)] = items[-HISTORY_SIZE:]


def load_state(path: Path | None) -> UIState:
    """Read the state file; a missing or damaged file yields an empty state."""
    if path is None:
        return UIState()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return UIState()
    if not isinstance(data, dict):
        return UIState()
    theme = data.get("theme")
    history = data.get("history")
    clean: dict[str, list[str]] = {}
    if isinstance(history, dict):
        for vault, items in history.items():
            if isinstance(items, list):
                clean[str(vault)] = [str(q) for q in items if isinstance(q, str)][-HISTORY_SIZE:]
    return UIState(theme=theme if isinstance(theme, str) else None, history=clean)


def save_state(path: Path | None, state: UIState) -> str | None:
    """Write the state file atomically (temp file + rename); returns an error message or None."""
    if path is None:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Private by default: the search history is the user's own business.
        write_atomic(
            path,
            json.dumps({"theme": state.theme, "history": state.history}, ensure_ascii=False, indent=1),
            0o600,
        )
    except OSError as exc:
        return f"cannot save UI state to {path}: {exc}"
    return None
