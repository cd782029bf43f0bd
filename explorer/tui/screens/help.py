"""Key help: every binding of the current screen, its widgets and the app, grouped, in a modal."""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from explorer.text.cells import cell_len
from explorer.tui import keys

#: Section titles of the classes whose keys are listed.
TITLES = {
    "MainScreen": "Search screen",
    "NoteScreen": "Note view",
    "WriterScreen": "Writing mode",
    "SearchBox": "Search box",
    "VaultTree": "Vault tree",
}


def binding_rows(bindings: Iterable[Binding | tuple]) -> list[tuple[str, str]]:
    """(keys, description) of bindings that have a description, keys merged per description."""
    rows: dict[str, list[str]] = {}
    for b in bindings:
        if not isinstance(b, Binding):
            b = Binding(*b)
        if not b.description:
            continue
        keys = b.key_display or ", ".join(_pretty(k) for k in b.key.split(","))
        rows.setdefault(b.description, [])
        if keys not in rows[b.description]:
            rows[b.description].append(keys)
    return [(", ".join(keys), desc) for desc, keys in rows.items()]


def _pretty(key: str) -> str:
    names = {
        "question_mark": "?",
        "slash": "/",
        "plus": "+",
        "minus": "-",
        "equals_sign": "=",
        "left_square_bracket": "[",
        "right_square_bracket": "]",
        "escape": "Esc",
        "enter": "Enter",
    }
    return names.get(key.strip(), key.strip())


class HelpScreen(ModalScreen[None]):
    """Lists the keys of the screen it was opened over."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 76; max-width: 95%; height: auto; max-height: 90%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    HelpScreen Static { height: auto; }
    """

    BINDINGS = keys.HELP

    def __init__(self, sections: list[tuple[str, list[tuple[str, str]]]]) -> None:
        super().__init__()
        self.sections = sections

    @classmethod
    def for_screen(cls, screen: Screen, app_bindings: Iterable[Binding | tuple]) -> HelpScreen:
        """Collect the bindings of `screen`, its widgets with BINDINGS, and the app."""
        sections: list[tuple[str, list[tuple[str, str]]]] = []
        rows = binding_rows(getattr(screen, "BINDINGS", []))
        if rows:
            sections.append((TITLES.get(type(screen).__name__, type(screen).__name__), rows))
        seen: set[type] = {type(screen)}
        for widget in screen.walk_children():
            kind = type(widget)
            if kind in seen or not kind.__module__.startswith("explorer."):
                continue
            seen.add(kind)
            rows = binding_rows(kind.__dict__.get("BINDINGS", []))
            if rows:
                sections.append((TITLES.get(kind.__name__, kind.__name__), rows))
        sections.append(
            ("Everywhere", [*binding_rows(app_bindings), ("ctrl+p", "Command palette (every action)")])
        )
        return cls(sections)

    def compose(self) -> ComposeResult:
        """One block per section."""
        with VerticalScroll():
            yield Static(Content.styled("Keys  (Esc closes)", "bold $text-accent"))
            yield Static(Content.styled(keys.TYPING_NOTE, "$text-muted"))
            if self.app.is_web:
                yield Static(Content.styled(keys.BROWSER_NOTE, "$text-muted"))
            for title, rows in self.sections:
                parts: list[str | tuple[str, str]] = [(f"\n{title}\n", "bold $text-primary")]
                for key_names, desc in rows:
                    parts.append((f"  {key_names}" + " " * max(1, 18 - cell_len(key_names)), "bold"))
                    parts.append(f"{desc}\n")
                yield Static(Content.assemble(*parts))
