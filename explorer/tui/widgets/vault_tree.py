"""The vault tree: the indexed notes by folder, with a filter box; selecting a note opens it."""

from __future__ import annotations

from collections.abc import Mapping

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.timer import Timer
from textual.widgets import Input, Tree
from textual.widgets.tree import TreeNode

from explorer.tui import keys
from explorer.tui.messages import OpenNote
from explorer.tui.safe import SafeInput, plain_rich

#: A filter matching at most this many notes shows them with every folder open.
EXPAND_FILTERED = 300


class VaultTree(Vertical):
    """A filter Input over a Tree of note paths (leaves carry the path as data)."""

    DEFAULT_CSS = """
    VaultTree { width: 32; height: 1fr; border: round $border-blurred; border-title-color: $text-muted; }
    VaultTree:focus-within { border: round $border; }
    VaultTree #tree-filter { border: none; height: 1; padding: 0 1; background: $boost; }
    VaultTree Tree { height: 1fr; padding: 0; }
    """

    BINDINGS = keys.VAULT_TREE

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.titles: dict[str, str] = {}
        self.filter_text = ""
        self._timer: Timer | None = None
        self._stale = False
        self._folders: dict[str, tuple[list[str], list[str]]] = {}
        self._unfilled: dict[int, str] = {}

    def compose(self) -> ComposeResult:
        """Filter box and tree."""
        yield SafeInput(placeholder="filter notes…", id="tree-filter", select_on_focus=False)
        tree: Tree[str] = Tree("vault", id="vault-tree")
        tree.show_root = False
        tree.guide_depth = 2
        yield tree

    def on_mount(self) -> None:
        """Title the border."""
        self.border_title = "Vault"

    @property
    def filter_box(self) -> Input:
        """The filter box (typing in the tree goes there)."""
        return self.query_one("#tree-filter", Input)

    def set_notes(self, titles: Mapping[str, str]) -> None:
        """Show these notes (path -> title); built when the tree is on screen."""
        self.titles = dict(titles)
        self._stale = True
        if self.display:
            self._rebuild()

    def fill(self) -> None:
        """Build the tree now if notes changed while it was hidden."""
        if self._stale:
            self._rebuild()

    def action_focus_filter(self) -> None:
        """Focus the filter box."""
        self.query_one("#tree-filter", Input).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        """Refilter shortly after typing stops."""
        if event.input.id != "tree-filter":
            return
        event.stop()
        self.filter_text = event.value
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(0.12, self._rebuild)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in the filter: move to the tree."""
        if event.input.id == "tree-filter":
            event.stop()
            self.query_one(Tree).focus()

    def visible_paths(self) -> list[str]:
        """Paths that pass the filter, sorted."""
        words = self.filter_text.lower().split()
        out = []
        for path in sorted(self.titles, key=str.lower):
            hay = f"{path} {self.titles[path]}".lower()
            if all(w in hay for w in words):
                out.append(path)
        return out

    def _rebuild(self) -> None:
        """Index the notes by folder and add the top level; deeper folders fill when expanded."""
        self._stale = False
        tree: Tree[str] = self.query_one(Tree)
        tree.clear()
        paths = self.visible_paths()
        folders: dict[str, tuple[list[str], list[str]]] = {"": ([], [])}
        for path in paths:
            parts = path.split("/")
            parent = ""
            for depth in range(len(parts) - 1):
                key = "/".join(parts[: depth + 1])
                if key not in folders:
                    folders[key] = ([], [])
                    folders[parent][0].append(key)
                parent = key
            folders[parent][1].append(path)
        self._folders = folders
        self._unfilled = {}
        filtering = bool(self.filter_text.strip())
        self._fill(tree.root, "", expand=filtering and len(paths) <= EXPAND_FILTERED)
        self.border_title = f"Vault ({len(paths)})" if filtering else "Vault"

    def _fill(self, node: TreeNode[str], key: str, expand: bool) -> None:
        subfolders, notes = self._folders.get(key, ([], []))
        for sub in subfolders:
            child = node.add(plain_rich(f"{sub.rsplit('/', 1)[-1]}/"), expand=expand)
            if expand:
                self._fill(child, sub, expand)
            else:
                self._unfilled[child.id] = sub
        for path in notes:
            node.add_leaf(plain_rich(path.rsplit("/", 1)[-1].removesuffix(".md")), data=path)

    def on_tree_node_expanded(self, event: Tree.NodeExpanded) -> None:
        """Add a folder's children the first time it opens."""
        key = self._unfilled.pop(event.node.id, None)
        if key is not None:
            self._fill(event.node, key, expand=False)

    def on_tree_node_selected(self, event: Tree.NodeSelected) -> None:
        """A note was chosen: open it."""
        event.stop()
        if event.node.data:
            self.post_message(OpenNote(event.node.data))
