"""Conversation turns as a dialog: which turn notes are adjacent, and a turn's text in its context.

An agent-memory vault records a conversation as one note per turn (`turn_NNNNNN` folders or
files, or notes of source type `turn_summary`), each with its number and, when recorded, its
session. Turn n and turn n + 1 of the same session are adjacent. A turn is often only
understood with its neighbours ("Went to the support group" answers "What did you do
yesterday?"), so the index keeps, for each such turn, a second vector of the turn read with the
turns before and after it (`context_text`), and the search can score a turn's words together
with its neighbours' (see explorer.search.memory.signals).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

_TURN_DIR = re.compile(r"(?:^|/)turn_(\d+)(?:/|\.md$)")
#: Salt of the embedding-cache key of a context text (keeps it apart from any shard's own hash).
CONTEXT_KEY = "dialog-context\n"


def turn_position(note: Any) -> tuple[int, Any] | None:
    """(turn number, session) of a conversation-turn note, None for other notes.

    The number is the frontmatter `turn_id` (or metadata's), else the `turn_NNNNNN` folder or file
    name; the session is the frontmatter or metadata `session`, None when not recorded.
    """
    if note.source_type != "turn_summary" and ("turn_" not in note.path or not _TURN_DIR.search(note.path)):
        return None
    number: Any = None
    session: Any = None
    for source in (note.frontmatter, note.metadata):
        if not isinstance(source, dict):
            continue
        if (
            number is None
            and isinstance(source.get("turn_id"), int)
            and not isinstance(source.get("turn_id"), bool)
        ):
            number = source["turn_id"]
        if session is None and isinstance(source.get("session"), (int, str)):
            session = source["session"]
    if number is None:
        m = _TURN_DIR.search(note.path)
        if m is None:
            return None
        number = int(m.group(1))
    return number, session


def dialog_neighbours(notes: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Turn note path -> the paths of its adjacent turns (n - 1 and n + 1 of the same recorded session), in order.

    Turns without a recorded session have none: adjacent numbers may belong to separate conversations.
    """
    by_number: dict[int, list[tuple[str, Any]]] = {}
    positions: dict[str, tuple[int, Any]] = {}
    for path, note in notes.items():
        pos = turn_position(note)
        if pos is not None:
            positions[path] = pos
            by_number.setdefault(pos[0], []).append((path, pos[1]))
    out: dict[str, tuple[str, ...]] = {}
    for path, (number, session) in positions.items():
        if session is None:
            continue
        near = [p for n in (number - 1, number + 1) for p, s in sorted(by_number.get(n, ())) if s == session]
        if near:
            out[path] = tuple(near)
    return out


def context_text(own: str, before: list[str], after: list[str]) -> str:
    """A turn's text read in its dialog: the turns before it, its own text, the turns after it."""
    return "\n".join([*before, own, *after])


def context_key(hashes: list[str]) -> str:
    """The embedding-cache key of a context text, from the content hashes of the shards it joins, in order."""
    return (
        "ctx-" + hashlib.blake2b((CONTEXT_KEY + " ".join(hashes)).encode("utf-8"), digest_size=16).hexdigest()
    )
