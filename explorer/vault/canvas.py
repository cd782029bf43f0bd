"""Read a JSON Canvas (`.canvas`, JSON Canvas 1.0) as a note: its cards as Markdown, its edges as links.

The note's text is Markdown written from the canvas: first the cards in no (named) group, then
each group with a label as a heading followed by the cards inside it, each part in reading order
(top to bottom, left to right); a card inside nested groups belongs to the smallest. A text card is its own text; a file card is an embed `![[file#subpath]]`
of the note it points to; a link card is a Markdown link. After a card come its outgoing edges as
a list, one item each: `- → label: [[target]]`, the target being the file of a file card, or another card
as `[[board.canvas#^card-id|its first words]]`. The text is then parsed like any note, so the
links of file cards, of edges and inside text cards are links of the canvas (backlinks, the link
graph) and the tags inside text cards are its tags.

Each text and link card is a `Block` with the card's id (its text and its edge lines), and the
sharder makes its node_id `board.canvas#<card id>` from it, with the group's label (the heading
above it that lies in no card) as its heading path.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from explorer.vault.model import Block, Note

#: Cards read from one canvas; more are left out with a recorded reason.
MAX_CARDS = 20_000
#: Edges read from one canvas.
MAX_EDGES = 50_000
#: Characters of one card's text (or a label, a file path, a URL) kept.
MAX_CARD_CHARS = 200_000
#: Characters of a card id kept (Obsidian writes 16 hex digits).
MAX_ID_CHARS = 64

_BLOCK_ID = re.compile(r"^[A-Za-z0-9-]+$")
_LINK_UNSAFE = re.compile(r"[\[\]|\r\n#^]")


def is_canvas(path: str) -> bool:
    """True for a vault path that names a JSON Canvas."""
    return path.lower().endswith(".canvas")


def canvas_title(path: str) -> str:
    """A canvas's title: its file name without `.canvas`."""
    name = path.rsplit("/", 1)[-1]
    return name[: -len(".canvas")] if is_canvas(name) else name


def load_canvas(path: str, text: str, source_type: str = "note") -> tuple[Note | None, str]:
    """Parse a canvas file's text: (note, '') or (None, the reason it is skipped)."""
    try:
        data = json.loads(text) if text.strip() else {}
    except RecursionError:
        return None, "broken canvas: JSON nested too deeply"
    except ValueError as exc:
        return None, f"broken canvas: not JSON ({str(exc).splitlines()[0][:120]})"
    if not isinstance(data, dict):
        return None, f"broken canvas: the JSON is a {type(data).__name__}, not an object"
    return canvas_note(path, data, source_type), ""


def _str(value: Any, limit: int = MAX_CARD_CHARS) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _num(value: Any) -> float:
    return (
        float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
        else 0.0
    )


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def canvas_note(path: str, data: dict[str, Any], source_type: str = "note") -> Note:
    """The note of a parsed canvas document (see the module docstring for its text)."""
    from explorer.vault.parse import parse_note

    warnings: list[str] = []
    nodes_in, edges_in = data.get("nodes"), data.get("edges")
    raw_nodes: list[Any] = nodes_in if isinstance(nodes_in, list) else []
    raw_edges: list[Any] = edges_in if isinstance(edges_in, list) else []
    if len(raw_nodes) > MAX_CARDS:
        warnings.append(f"truncated: only the first {MAX_CARDS:,} of {len(raw_nodes):,} cards are read")
    if len(raw_edges) > MAX_EDGES:
        warnings.append(f"truncated: only the first {MAX_EDGES:,} of {len(raw_edges):,} edges are read")
    nodes: dict[str, dict[str, Any]] = {}
    for raw in raw_nodes[:MAX_CARDS]:
        if not isinstance(raw, dict):
            continue
        card_id = _one_line(_str(raw.get("id"), MAX_ID_CHARS * 4), MAX_ID_CHARS)
        kind = _str(raw.get("type"), 16)
        if not card_id or card_id in nodes or kind not in ("text", "file", "link", "group"):
            continue
        nodes[card_id] = {
            "id": card_id,
            "type": kind,
            "x": _num(raw.get("x")),
            "y": _num(raw.get("y")),
            "w": max(_num(raw.get("width")), 0.0),
            "h": max(_num(raw.get("height")), 0.0),
            "text": _str(raw.get("text")),
            "file": _str(raw.get("file"), 4096),
            "subpath": _str(raw.get("subpath"), 4096),
            "url": _str(raw.get("url"), 4096),
            "label": _str(raw.get("label"), 4096),
        }
    edges: dict[str, list[tuple[str, str]]] = {}
    for raw in raw_edges[:MAX_EDGES]:
        if not isinstance(raw, dict):
            continue
        src, dst = _str(raw.get("fromNode"), MAX_ID_CHARS * 4), _str(raw.get("toNode"), MAX_ID_CHARS * 4)
        src, dst = _one_line(src, MAX_ID_CHARS), _one_line(dst, MAX_ID_CHARS)
        if src in nodes and dst in nodes and src != dst:
            edges.setdefault(src, []).append((_one_line(_str(raw.get("label"), 4096), 200), dst))

    groups = sorted((n for n in nodes.values() if n["type"] == "group"), key=lambda n: n["w"] * n["h"])
    members: dict[str, list[dict[str, Any]]] = {g["id"]: [] for g in groups}
    loose: list[dict[str, Any]] = []
    for node in nodes.values():
        if node["type"] == "group":
            continue
        cx, cy = node["x"] + node["w"] / 2, node["y"] + node["h"] / 2
        home = next(
            (g for g in groups if g["x"] <= cx <= g["x"] + g["w"] and g["y"] <= cy <= g["y"] + g["h"]), None
        )
        (members[home["id"]] if home is not None else loose).append(node)

    def reading(n: dict[str, Any]) -> tuple[float, float, str]:
        return (n["y"], n["x"], n["id"])

    parts: list[str] = []
    spans: list[tuple[str, int, int]] = []
    pos = 0

    def emit(segment: str) -> int:
        nonlocal pos
        if parts:
            parts.append("\n\n")
            pos += 2
        start = pos
        parts.append(segment)
        pos += len(segment)
        return start

    # First the cards in no named group, then each named group's label and its own cards, each in
    # reading order: a card's group is then the group heading above it (the sharder's heading path).
    named = [g for g in groups if g["label"].strip()]
    for g in groups:
        if not g["label"].strip():
            loose.extend(members[g["id"]])
    sections: list[tuple[dict[str, Any] | None, list[dict[str, Any]]]] = [(None, sorted(loose, key=reading))]
    sections += [(g, sorted(members[g["id"]], key=reading)) for g in sorted(named, key=reading)]
    for group, cards in sections:
        if group is not None:
            emit("## " + _one_line(group["label"], 200))
        for node in cards:
            segment = _card_text(path, node)
            lines = [_edge_line(path, label, nodes[dst]) for label, dst in edges.get(node["id"], ())]
            if lines:  # a list of their own, so that the note view shows one edge a line
                segment = (segment + "\n\n" if segment else "") + "\n".join(lines)
            if not segment.strip():
                continue
            start = emit(segment)
            if node["type"] in ("text", "link"):
                spans.append((node["id"], start, start + len(segment)))
    for (
        group
    ) in groups:  # edges that leave a group are written under its heading's label, as a line of their own
        lines = [_edge_line(path, label, nodes[dst]) for label, dst in edges.get(group["id"], ())]
        if lines:
            emit("\n".join(lines))
    text = "".join(parts)
    if text.startswith("---"):
        text = "\n" + text  # never read as frontmatter
        spans = [(i, s + 1, e + 1) for i, s, e in spans]
    note = parse_note(path, text, source_type)
    blocks = tuple(Block(card_id, start, end) for card_id, start, end in spans)
    return replace(
        note,
        title=canvas_title(path),
        frontmatter={},
        blocks=blocks,
        warnings=note.warnings + tuple(warnings),
    )


def _card_text(path: str, node: dict[str, Any]) -> str:
    kind = node["type"]
    if kind == "text":
        return node["text"].replace("\r\n", "\n").replace("\r", "\n").strip()
    if kind == "file":
        target = _LINK_UNSAFE.sub(" ", node["file"]).strip()
        sub = node["subpath"].strip().lstrip("#")  # `#Heading` or `#^block`
        block = sub.startswith("^")
        sub = " ".join(_LINK_UNSAFE.sub(" ", sub.lstrip("^")).split())
        frag = ("#^" if block else "#") + sub if sub else ""
        return f"![[{target}{frag}]]" if target else ""
    if kind == "link":
        url = re.sub(r"[\s<>]", "", node["url"])
        return f"[{_one_line(_LINK_UNSAFE.sub(' ', url), 200)}](<{url}>)" if url else ""
    return ""


def _edge_line(path: str, label: str, target: dict[str, Any]) -> str:
    """One edge as a list item under its source card: `- → label: [[target]]`."""
    head = f"- → {_LINK_UNSAFE.sub(' ', label).strip()}: " if label.strip() else "- → "
    kind = target["type"]
    if kind == "file" and target["file"].strip():
        return head + f"[[{_LINK_UNSAFE.sub(' ', target['file']).strip()}]]"
    words = target["label"] if kind == "group" else target["url"] if kind == "link" else target["text"]
    words = _one_line(_LINK_UNSAFE.sub(" ", words), 60) or target["id"]
    if _BLOCK_ID.match(target["id"]):
        return head + f"[[{_LINK_UNSAFE.sub(' ', path)}#^{target['id']}|{words}]]"
    return head + words
