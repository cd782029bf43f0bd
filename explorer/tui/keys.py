"""The app's key map: every command key of every screen, in one place, with the rules they follow.

Rules (tests in tests/test_tui_keys.py hold every list here to them):

1. Printable keys are text. Letters, digits, punctuation and space never run a command on any
   screen: they type into the search box (from the results, panes and note view), into the tree's
   filter (from the tree), or into the editor (from the writer's related list). A word typed at
   the wrong moment therefore can only ever change a query, never a file.
2. Command keys are function keys, modified keys (ctrl+..., shift/ctrl+arrows) or Escape/Enter/
   Tab/Backspace, and none of them is also a key of a text widget on the same screen
   (`Input` on the search screen, `TextArea` in the writer), so no command shadows an editing
   key and no editing key swallows a command.
3. Escape always leads back to the search box (from the note view and the writer too; the writer
   asks once when there are unsaved changes).
4. Only the writer writes files, and only on ctrl+s.

5. In a browser tab (`explorer serve`) the browser keeps some keys for itself (ctrl+t, ctrl+n,
   ctrl+w, and on some systems the F-keys or ctrl+l): each command on such a key has an alt+letter
   twin (`_browser`, added after the list's own bindings, same description, so the help shows both
   on one row). They are priority bindings: the text widgets read alt+letter as a typed letter.

To add keys, add `Binding`s to the list of the screen they act on; the help screen, the footer
and the command palette pick them up from here. F8 / F9 mark the selected result relevant / not
relevant for the current query (`.explorer/judgments.jsonl`, replayed by `explorer eval`).
"""

from __future__ import annotations

from textual import events
from textual.binding import Binding, BindingType
from textual.widget import Widget
from textual.widgets import Input, TextArea


def _browser(key: str, action: str, description: str, tooltip: str) -> Binding:
    """The in-page twin of a key a browser may keep (rule 5): not in the footer, before any text widget."""
    return Binding(key, action, description, show=False, priority=True, tooltip=tooltip)


#: Keys that work everywhere.
APP: list[BindingType] = [
    Binding("ctrl+q", "quit", "Quit", priority=True, tooltip="Leave the app"),
    Binding("f1", "help", "Keys", tooltip="List the keys of this screen"),
    _browser("alt+k", "help", "Keys", "List the keys of this screen"),
    _browser("alt+q", "quit", "Quit", "Leave the app"),
]

#: The search screen (search box, results, context and why-ranked panes, vault tree).
MAIN: list[BindingType] = [
    Binding(
        "escape", "focus_search", "Search", show=False, tooltip="Back to the search box, the query selected"
    ),
    Binding("f2", "toggle_tree", "Tree", tooltip="Show or hide the vault tree"),
    Binding("f3", "open_at_cursor", "Open", tooltip="Open the whole note at the context cursor"),
    Binding("f4", "edit", "Write", tooltip="Open the note in writing mode"),
    Binding("f5", "show_tab('tab-context')", "Context", tooltip="Show the context pane"),
    Binding("f6", "show_tab('tab-why')", "Why", tooltip="Show why the selected result ranked"),
    Binding("f7", "why_not", "Why not?", show=False, tooltip="Ask why a note you expected is missing"),
    Binding(
        "ctrl+up",
        "widen(1)",
        "Widen context",
        show=False,
        key_display="ctrl+↑",
        tooltip="Show more text around the cursor",
    ),
    Binding(
        "ctrl+down",
        "widen(-1)",
        "Narrow context",
        show=False,
        key_display="ctrl+↓",
        tooltip="Show less text around the cursor",
    ),
    Binding(
        "ctrl+n",
        "match(1)",
        "Next match",
        show=False,
        tooltip="Move the context to the next match in the note",
    ),
    Binding(
        "ctrl+b",
        "match(-1)",
        "Previous match",
        show=False,
        tooltip="Move the context to the previous match in the note",
    ),
    Binding(
        "shift+down",
        "shard(1)",
        "Next shard",
        show=False,
        key_display="shift+↓",
        tooltip="Move the context to the result's next section",
    ),
    Binding(
        "shift+up",
        "shard(-1)",
        "Previous shard",
        show=False,
        key_display="shift+↑",
        tooltip="Move the context to the result's previous section",
    ),
    Binding(
        "ctrl+y",
        "copy_node_id",
        "Copy node id",
        show=False,
        tooltip="Copy the node_id under the context cursor",
    ),
    Binding(
        "ctrl+l",
        "copy_link",
        "Copy [[link]]",
        show=False,
        tooltip="Copy the node_id under the context cursor as a [[link]]",
    ),
    Binding(
        "ctrl+o",
        "open_obsidian",
        "Open in Obsidian",
        show=False,
        tooltip="Open the selected note in Obsidian",
    ),
    Binding(
        "ctrl+g",
        "open_editor",
        "Open in $EDITOR",
        show=False,
        tooltip="Open the selected note in $EDITOR at the context cursor's line",
    ),
    Binding(
        "ctrl+r",
        "as_typed",
        "Search as typed",
        show=False,
        tooltip="Search the query's words as typed, without typo correction (again: correct them)",
    ),
    Binding(
        "f8",
        "mark('relevant')",
        "Mark relevant",
        show=False,
        tooltip="Mark the selected result relevant for this query",
    ),
    Binding(
        "f9",
        "mark('not_relevant')",
        "Mark not relevant",
        show=False,
        tooltip="Mark the selected result not relevant for this query",
    ),
    _browser("alt+v", "toggle_tree", "Tree", "Show or hide the vault tree"),
    _browser("alt+o", "open_at_cursor", "Open", "Open the whole note at the context cursor"),
    _browser("alt+w", "edit", "Write", "Open the note in writing mode"),
    _browser("alt+c", "show_tab('tab-context')", "Context", "Show the context pane"),
    _browser("alt+y", "show_tab('tab-why')", "Why", "Show why the selected result ranked"),
    _browser("alt+n", "why_not", "Why not?", "Ask why a note you expected is missing"),
    _browser("alt+down", "match(1)", "Next match", "Move the context to the next match in the note"),
    _browser("alt+up", "match(-1)", "Previous match", "Move the context to the previous match in the note"),
    _browser(
        "alt+l", "copy_link", "Copy [[link]]", "Copy the node_id under the context cursor as a [[link]]"
    ),
    _browser(
        "alt+r", "mark('relevant')", "Mark relevant", "Mark the selected result relevant for this query"
    ),
    _browser(
        "alt+i",
        "mark('not_relevant')",
        "Mark not relevant",
        "Mark the selected result not relevant for this query",
    ),
]

#: The search box (on top of MAIN while it has focus).
SEARCH_BOX: list[BindingType] = [
    Binding("up", "history(-1)", "Previous query", show=False, tooltip="Bring back the previous query"),
    Binding(
        "down",
        "history(1)",
        "Next query / results",
        show=False,
        tooltip="Next query in the history, then the results",
    ),
    Binding(
        "ctrl+t", "cycle_mode", "Mode", tooltip="Cycle the search mode: hybrid, phrase, AND, fuzzy, TF-IDF"
    ),
    _browser("alt+t", "cycle_mode", "Mode", "Cycle the search mode: hybrid, phrase, AND, fuzzy, TF-IDF"),
]

#: The vault tree (on top of MAIN while it has focus).
VAULT_TREE: list[BindingType] = [
    Binding(
        "ctrl+f", "focus_filter", "Filter notes", show=False, tooltip="Type to filter the notes of the tree"
    )
]

#: The note view.
NOTE: list[BindingType] = [
    Binding("escape", "close", "Search", tooltip="Close the note, back to the search box"),
    Binding(
        "alt+left,backspace", "back", "Back", key_display="alt+←", tooltip="The previous note of this view"
    ),
    Binding("alt+right", "forward", "Forward", key_display="alt+→", tooltip="The next note of this view"),
    Binding("f4", "edit", "Write"),
    Binding("ctrl+y", "copy_path", "Copy path", show=False, tooltip="Copy the note's path"),
    Binding(
        "ctrl+l",
        "copy_link",
        "Copy [[link]]",
        show=False,
        tooltip="Copy the shown passage's node_id as a [[link]]",
    ),
    Binding("ctrl+o", "open_obsidian", "Open in Obsidian", show=False, tooltip="Open this note in Obsidian"),
    Binding(
        "ctrl+g",
        "open_editor",
        "Open in $EDITOR",
        show=False,
        tooltip="Open this note in $EDITOR at the shown passage's line",
    ),
    Binding("tab", "app.focus_next", "Next pane", show=False, tooltip="Move to the next pane"),
    _browser("alt+w", "edit", "Write", "Open the note in writing mode"),
    _browser("alt+l", "copy_link", "Copy [[link]]", "Copy the shown passage's node_id as a [[link]]"),
]

#: Writing mode (TextArea keys stay the editor's: none of these is one of them).
WRITER: list[BindingType] = [
    Binding("ctrl+s", "save", "Save", priority=True, tooltip="Save the note"),
    Binding("escape", "close", "Close", priority=True, tooltip="Close writing mode (asks when unsaved)"),
    Binding("ctrl+r", "related", "Related now", tooltip="Find notes related to this paragraph now"),
    Binding("ctrl+l", "focus_related", "Related list", tooltip="Move to the related-notes list"),
    Binding(
        "ctrl+g",
        "insert_link",
        "Insert link",
        priority=True,
        tooltip="Link the highlighted suggestion: over the words that name it, or at the cursor (ctrl+z undoes)",
    ),
    Binding(
        "ctrl+home", "document(-1)", "Start of note", show=False, tooltip="Cursor to the start of the note"
    ),
    Binding("ctrl+end", "document(1)", "End of note", show=False, tooltip="Cursor to the end of the note"),
    Binding(
        "ctrl+shift+home",
        "document(-1, True)",
        "Select to start",
        show=False,
        tooltip="Select to the start of the note",
    ),
    Binding(
        "ctrl+shift+end",
        "document(1, True)",
        "Select to end",
        show=False,
        tooltip="Select to the end of the note",
    ),
    _browser("alt+l", "focus_related", "Related list", "Move to the related-notes list"),
]

#: The key help.
HELP: list[BindingType] = [Binding("escape,f1", "dismiss", "Close", tooltip="Close the key help")]

#: What the help screen adds in a browser tab (rule 5).
BROWSER_NOTE = (
    "In a browser tab: the alt keys stand in for the keys a browser keeps (F-keys, ctrl+t, ctrl+n, "
    "ctrl+l); in the editor ctrl+backspace deletes a word (ctrl+w closes the tab). Click a result to "
    "show it, double-click to open it; links in a note open with a click."
)

#: What the help screen says about keys that are not commands.
TYPING_NOTE = (
    "Letters, digits and symbols always type: into the search box (from the results, panes and "
    "note view), the tree filter (from the tree) or the editor. Commands use F-keys and ctrl."
)


def is_text_key(event: events.Key, focused: Widget | None) -> bool:
    """True when `event` is a printable key that the focused widget does not use itself.

    Such a key is text the person meant to type somewhere: screens send it to their text input
    instead of letting it fall through to a command. Text widgets (Input, TextArea) take their own
    keys, and a widget's own printable bindings (space in a tree) stay its own.
    """
    if not event.is_printable or not event.character:
        return False
    if focused is None:
        return True
    if isinstance(focused, Input) or (isinstance(focused, TextArea) and not focused.read_only):
        return False
    return event.key not in focused._bindings.key_to_bindings
