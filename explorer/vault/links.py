"""Resolve wikilinks Obsidian-style and keep the backlink graph."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass

from explorer.vault.model import Link, Note


@dataclass(frozen=True, slots=True)
class Backlink:
    """A link into a note from another one."""

    source: str
    """Path of the linking note."""
    link: Link
    """The link as written in the source."""


class LinkGraph:
    """Link resolution over a set of notes.

    A target resolves like Obsidian does: an exact vault path (with or without `.md`), else a
    path suffix, else a file stem, case-insensitively; among several, the shortest path wins.
    """

    def __init__(self, notes: Mapping[str, Note]) -> None:
        self._notes = notes
        self._by_path: dict[str, str] = {}
        self._by_stem: dict[str, list[str]] = {}
        for path in sorted(notes, key=lambda p: (len(p), p)):
            lower = path.lower()
            self._by_path[lower] = path
            self._by_path.setdefault(lower[:-3] if lower.endswith(".md") else lower, path)
            stem = lower.rsplit("/", 1)[-1]
            stem = stem[:-3] if stem.endswith(".md") else stem
            self._by_stem.setdefault(stem, []).append(path)
            alias_list = notes[path].frontmatter.get("aliases") or []
            if isinstance(alias_list, str):
                alias_list = [alias_list]
            if isinstance(alias_list, list):
                for alias in alias_list:
                    self._by_stem.setdefault(str(alias).lower(), []).append(path)
        self._backlinks: dict[str, list[Backlink]] | None = None

    def resolve(self, target: str, source: str | None = None, markdown: bool = False) -> str | None:
        """The path a link target names, or None when it dangles (or names a non-note file).

        A Markdown link's target is first read as a path relative to the linking note
        (`../Other.md`), then from the vault root, then like a wikilink.
        """
        if markdown and target.strip():
            found = self._resolve_path(target, source)
            if found is not None:
                return found
        t = target.strip().replace("\\", "/").lstrip("/")
        if not t:
            return source
        lower = t.lower()
        if lower in self._by_path:
            return self._by_path[lower]
        candidates = self._by_stem.get(lower.rsplit("/", 1)[-1].removesuffix(".md"), [])
        if "/" in lower:
            suffix = lower.removesuffix(".md")
            candidates = [p for p in candidates if p.lower().removesuffix(".md").endswith(suffix)]
        return candidates[0] if candidates else None

    def _resolve_path(self, target: str, source: str | None) -> str | None:
        t = target.strip().replace("\\", "/")
        tries = []
        if source and not t.startswith("/"):
            tries.append(posixpath.normpath(posixpath.join(posixpath.dirname(source), t)))
        tries.append(posixpath.normpath(t.lstrip("/")))
        for cand in tries:
            if cand.startswith("../") or cand == "..":
                continue
            lower = cand.lower()
            for key in (lower, lower + ".md"):
                if key in self._by_path:
                    return self._by_path[key]
        return None

    def outgoing(self, path: str) -> list[tuple[Link, str | None]]:
        """Links of a note with their resolved targets (None for dangling)."""
        note = self._notes.get(path)
        if note is None:
            return []
        return [
            (link, self.resolve(link.target, path, getattr(link, "markdown", False))) for link in note.links
        ]

    def backlinks(self, path: str) -> list[Backlink]:
        """Links from other notes into `path`, by source path."""
        if self._backlinks is None:
            index: dict[str, list[Backlink]] = {}
            for source in sorted(self._notes):
                for link, target in self.outgoing(source):
                    if target is not None and target != source:
                        index.setdefault(target, []).append(Backlink(source, link))
            self._backlinks = index
        return list(self._backlinks.get(path, ()))

    def dangling(self) -> list[tuple[str, Link]]:
        """(source, link) of every link that resolves to no note (embeds of non-note files excluded)."""
        out = []
        for source in sorted(self._notes):
            for link, target in self.outgoing(source):
                if target is None and not (
                    link.embed
                    and "." in link.target.rsplit("/", 1)[-1]
                    and not link.target.lower().endswith(".md")
                ):
                    out.append((source, link))
        return out


def resolve_note_name(name: str, notes: Container[str], links: Callable[[], LinkGraph]) -> str | None:
    """The note of `notes` that `name` names, or None.

    A vault path (with or without `.md`, slashes either way) wins; else `name` resolves as an
    Obsidian link target does in the graph `links()` gives (asked for only then).
    """
    name = name.strip().replace("\\", "/").lstrip("/")
    if not name:
        return None
    if name in notes:
        return name
    if f"{name}.md" in notes:
        return f"{name}.md"
    resolved = links().resolve(name)
    return resolved if resolved is not None and resolved in notes else None
