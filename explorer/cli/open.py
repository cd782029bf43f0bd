"""`explorer open`: open a note (by node_id or path) in Obsidian or in $EDITOR at the passage's line."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from explorer.config import Settings
from explorer.text.safe import safe_text
from explorer.vault.external import (
    OpenError,
    editor_launch,
    line_at,
    obsidian_launch,
    run_detached,
    run_in_terminal,
)


def cmd_open(args: argparse.Namespace, vault: Path, settings: Settings) -> int:
    """Resolve the target in the index, then open it (or print what would open it with --print).

    Exit codes: 0 opened (or printed), 1 the program could not start or the editor failed,
    2 the target names nothing in the vault or no editor is set.
    """
    from explorer.engine import open_index
    from explorer.index.targets import ContextError, resolve_target

    index, _ = open_index(vault, settings, one_shot=True)
    try:
        target = resolve_target(index, args.target)
        note = index.note(target.path)
        line = line_at(note.text, target.cursor) if note is not None and target.cursor > 0 else None
    except ContextError as exc:
        return _fail(str(exc), 2)
    finally:
        index.close()
    if args.editor:
        try:
            launch = editor_launch(vault, target.path, line)
        except OpenError as exc:
            return _fail(str(exc), 2)
        if args.print:
            print(shlex.join(launch.argv))
            return 0
        try:
            code = run_in_terminal(launch)
        except OSError as exc:
            return _fail(f"cannot start the editor {launch.argv[0]!r}: {exc}", 1)
        return 0 if code == 0 else _fail(f"the editor exited with code {code}", 1)
    url, opener = obsidian_launch(vault, target.path)
    if args.print or opener is None:
        # No desktop opener (a server, a container): the URI is the answer, to paste or click.
        print(url)
        return 0
    try:
        run_detached(opener)
    except OSError as exc:
        print(url)
        return _fail(f"cannot start {opener.argv[0]!r}: {exc}", 1)
    print(url)
    return 0


def _fail(message: str, code: int) -> int:
    print(f"explorer: {safe_text(message)}", file=sys.stderr)
    return code
