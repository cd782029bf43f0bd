"""Open a vault file where the person works: Obsidian's `obsidian://open` URI, or $EDITOR at a line.

Everything here builds argument lists (never a shell command line), so a file named `-rf; x.md`,
`a #b.md` or `日記.md` reaches the program as one argument, never as options or shell words.
Files are passed by absolute path, which cannot start with `-`.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from explorer.vault.shard import link_heading

#: Editors that take `+LINE FILE`.
PLUS_LINE = frozenset(
    {
        "vi",
        "vim",
        "nvim",
        "gvim",
        "mvim",
        "view",
        "nano",
        "pico",
        "emacs",
        "emacsclient",
        "micro",
        "kak",
        "joe",
        "jed",
        "ne",
        "mg",
        "ed",
    }
)
#: Editors that take `-g FILE:LINE` (VS Code and its builds).
GOTO_FLAG = frozenset({"code", "code-insiders", "codium", "vscodium", "cursor", "windsurf"})
#: Editors that take `FILE:LINE`.
COLON_LINE = frozenset({"hx", "helix", "subl", "zed"})
#: Programs that hand a URI to the desktop, in the order tried.
OPENERS = ("xdg-open", "open", "wslview")


class OpenError(ValueError):
    """A file that cannot be opened as asked; the message says why."""


@dataclass(frozen=True, slots=True)
class Launch:
    """A program to run: its argument list, and whether it takes over the terminal."""

    argv: tuple[str, ...]
    """Program and arguments, passed to the OS as they are (no shell)."""
    terminal: bool
    """True for an editor that runs in the terminal (the app steps aside while it runs)."""


def obsidian_url(vault: Path, rel_path: str) -> str:
    """`obsidian://open?vault=<vault folder name>&file=<vault-relative path>`, both URL-encoded.

    Every character but letters, digits and `-._~` is percent-encoded (UTF-8), `/` too, as
    Obsidian writes its own URIs: a `#`, `&`, `?`, `+` or space in a name stays part of the name.
    """
    name = Path(vault).resolve().name
    return f"obsidian://open?vault={quote(name, safe='')}&file={quote(rel_path, safe='')}"


def line_at(text: str, cursor: int) -> int:
    """The 1-based line of character offset `cursor` in `text` (clamped to the text)."""
    cursor = max(0, min(cursor, len(text)))
    return text.count("\n", 0, cursor) + 1


def editor_command(environ: Mapping[str, str] | None = None) -> list[str]:
    """$VISUAL, else $EDITOR, split as a shell would split words (no expansion, nothing run); [] when unset."""
    env = os.environ if environ is None else environ
    for name in ("VISUAL", "EDITOR"):
        value = (env.get(name) or "").strip()
        if value:
            try:
                words = shlex.split(value)
            except ValueError as exc:
                raise OpenError(f"${name} cannot be read as a command ({exc}): {value!r}") from None
            if words:
                return words
    return []


def editor_argv(editor: Sequence[str], file: Path, line: int | None = None) -> list[str]:
    """The argument list that opens `file` (made absolute) in `editor` at `line`.

    `+LINE FILE` for vi, vim, nvim, nano, emacs, micro, kak and their kin; `-g FILE:LINE` for VS
    Code; `FILE:LINE` for helix, Sublime Text and Zed; the file alone for any other editor.
    """
    if not editor:
        raise OpenError("no editor: set $EDITOR (or $VISUAL), e.g. export EDITOR=vim")
    path = str(Path(os.path.abspath(file)))
    prog = Path(editor[0]).name.lower()
    if prog.endswith(".exe"):
        prog = prog[:-4]
    argv = list(editor)
    if line is None or line < 1:
        return [*argv, path]
    if prog in PLUS_LINE:
        return [*argv, f"+{line}", path]
    if prog in GOTO_FLAG:
        return [*argv, "-g", f"{path}:{line}"]
    if prog in COLON_LINE:
        return [*argv, f"{path}:{line}"]
    return [*argv, path]


def opener_argv(url: str, which=shutil.which) -> list[str] | None:
    """`[xdg-open|open|wslview, url]` with the first opener found on PATH; None when there is none."""
    for name in OPENERS:
        if name == "open" and sys.platform != "darwin":
            continue
        found = which(name)
        if found:
            return [found, url]
    return None


def vault_file(vault: Path, rel_path: str) -> Path:
    """The file of a vault-relative path; OpenError for a path that is absolute, climbs out with
    `..`, or names no file (deleted or renamed since it was indexed)."""
    parts = rel_path.replace("\\", "/").split("/")
    if not rel_path or rel_path.startswith("/") or ".." in parts or Path(rel_path).is_absolute():
        raise OpenError(f"{rel_path!r} is not a path inside the vault")
    path = Path(os.path.abspath(vault)) / rel_path
    if not path.is_file():
        raise OpenError(f"{rel_path!r} is not a file of the vault (deleted or renamed?)")
    return path


def obsidian_launch(vault: Path, rel_path: str, which=shutil.which) -> tuple[str, Launch | None]:
    """The URI of the note and the opener that hands it to Obsidian (None: no opener on this machine)."""
    url = obsidian_url(vault, rel_path)
    argv = opener_argv(url, which)
    return url, (Launch(tuple(argv), terminal=False) if argv else None)


def editor_launch(
    vault: Path, rel_path: str, line: int | None, environ: Mapping[str, str] | None = None
) -> Launch:
    """The editor command that opens the note at `line` (OpenError: no $EDITOR, or the file is gone).

    Only a Markdown note has lines that match the index's text: a PDF's or a canvas's text is
    read out of the file, so those open at their start.
    """
    if not rel_path.lower().endswith(".md"):
        line = None
    return Launch(
        tuple(editor_argv(editor_command(environ), vault_file(vault, rel_path), line)), terminal=True
    )


def run_detached(launch: Launch) -> None:
    """Start a desktop opener and let it go: no terminal, no output, its own session (OSError when it cannot start)."""
    subprocess.Popen(
        list(launch.argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def run_in_terminal(launch: Launch) -> int:
    """Run an editor in this terminal until it exits; its exit code (OSError when it cannot start)."""
    return subprocess.run(list(launch.argv), check=False).returncode


_SUFFIX = re.compile(r"( \(\d+\))?(@\d+)?$")
_MD_TOP = re.compile(r"\.md( \(\d+\))?(@\d+)?$")


def wikilink(node_id: str, heading: str | None = None) -> str:
    """The node_id as an Obsidian link: `[[Folder/note#Heading#Sub]]`, `[[note#^block]]`, `[[file.pdf#page=2]]`.

    A Markdown note's `.md` is left out as Obsidian writes links; the ` (n)` (n-th section with
    that heading) and `@k` (k-th piece of a long section) suffixes are dropped, as a link names a
    heading, unless `heading` (the shard's own last heading) itself ends that way. Control
    characters are dropped: the link goes to a clipboard that may be pasted into a terminal.
    """
    node_id = "".join(ch for ch in node_id if ch.isprintable())
    path, sep, frag = node_id.partition(".md#")
    if sep:
        m = _SUFFIX.search(frag)
        if m and m.group(0) and not (heading and link_heading(heading).endswith(m.group(0))):
            frag = frag[: m.start()]
        return f"[[{path}#{frag}]]" if frag else f"[[{path}]]"
    return f"[[{_MD_TOP.sub('', node_id)}]]"
