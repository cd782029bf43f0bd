"""The notes `remember` writes, in the agent-memory layout: a turn (Users/<user>/turns/turn_NNNNNN/)
or a knowledge note (Users/<user>/Knowledge/<title>.md, appended to as dated sections).

Every folder is reached from the vault root with no symbolic link on the way and every file is
written atomically inside that open folder (explorer.text.files.real_folder / RealFolder.write, the
one atomic writer with write_atomic): a link on the way, inside the vault or out of it, raises
UnsafePathError and nothing is written.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

from explorer.engine.tools import ToolInputError
from explorer.text.files import RealFolder, real_folder


def user_folder(vault: Path, who: str, name: str) -> RealFolder:
    """Users/<who>/<name>, made as needed, reached from the vault with no symbolic link on the way."""
    return real_folder(vault, f"Users/{who}/{name}", create=True)


def write_turn(vault: Path, who: str, text: str, title: str, keywords: list[str], now: datetime) -> str:
    """A new turn folder numbered after the highest one, with its context.md and metadata.json; its path."""
    with user_folder(vault, who, "turns") as turns:
        numbers = [int(m.group(1)) for n in turns.names() if (m := re.fullmatch(r"turn_(\d+)", n))]
        number = max(numbers, default=0) + 1
        while not turns.make(f"turn_{number:06d}"):
            number += 1
        with turns.folder(f"turn_{number:06d}") as folder:
            _write_turn_files(folder, number, text, title, keywords, now)
    return f"Users/{who}/turns/turn_{number:06d}/context.md"


def _write_turn_files(
    folder: RealFolder, number: int, text: str, title: str, keywords: list[str], now: datetime
) -> None:
    front = [
        "---",
        f"turn_id: {number}",
        f"date: {now.date().isoformat()}",
        f"time: {json.dumps(now.strftime('%H:%M'))}",
    ]
    if title:
        front.append(f"topic: {json.dumps(title)}")
    front += ["tags: [agent/turn]", "---", ""]
    body = (f"# {title}\n\n" if title else "") + text.strip() + "\n"
    meta = {"turn_id": number, "topic": title, "keywords": keywords, "timestamp": now.isoformat()}
    folder.write("metadata.json", json.dumps(meta, indent=2) + "\n")
    folder.write("context.md", "\n".join(front) + body)


def write_knowledge(vault: Path, who: str, text: str, title: str, now: datetime, limit: int) -> str:
    """The knowledge note `title`, new or with `text` appended as a dated section; its path.

    ToolInputError, with nothing written, for a note the index would not read (before or after the
    append: not UTF-8, binary, over `limit` bytes).
    """
    from explorer.vault.scan import readable_text

    if not title:
        raise ToolInputError("a knowledge note needs a title (its file name)")
    name = f"{safe_name(title, 'note')}.md"
    rel = f"Users/{who}/Knowledge/{name}"
    section = f"\n## {now.date().isoformat()}\n\n{text.strip()}\n"
    with user_folder(vault, who, "Knowledge") as folder:
        old = folder.read_bytes(name, limit)
        if old is None:
            content = f"---\ndate: {now.date().isoformat()}\n---\n\n# {title}\n{section}"
        else:
            # Appending to a note the index skips would answer success for a memory no search finds.
            current, why = readable_text(old, limit)
            if current is None:
                raise ToolInputError(f"{rel} is not indexed ({why}): nothing appended; give another title")
            content = current + ("" if current.endswith("\n") else "\n") + section
        if len(content.encode("utf-8")) > limit:
            raise ToolInputError(
                f"{rel} would pass {limit:,} bytes (setting vault.max_note_bytes) and no longer be "
                "indexed: nothing appended; give another title"
            )
        folder.write(name, content)
    return rel


def only_user(vault: Path) -> str | None:
    """The one folder under Users/ (None when there are none or several, or Users/ is a link)."""
    users = vault / "Users"
    names = (
        [p.name for p in users.iterdir() if p.is_dir() and not p.name.startswith(".")]
        if users.is_dir() and not users.is_symlink()
        else []
    )
    return names[0] if len(names) == 1 else None


def safe_name(name: str, what: str) -> str:
    """`name` as one file or folder name: word characters, spaces, dots and dashes, at most 80."""
    cleaned = re.sub(r"[^\w .-]+", "", str(name), flags=re.UNICODE).strip(" .")
    cleaned = re.sub(r"\s+", " ", cleaned)[:80]
    if not cleaned:
        raise ToolInputError(f"{what} {name!r} has no usable characters")
    return cleaned
