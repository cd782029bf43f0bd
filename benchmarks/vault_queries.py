r"""Queries no one here wrote: derived from a vault's own structure, each with the notes that answer it.

Kinds (each from what the vault's authors wrote, none picked by how it ranks):

    anchor   a link's anchor text (``[[Target|anchor]]``, ``[anchor](Target.md)``) as a query for
             its target, when the anchor is not just the target's name
    section  ``<note name> <heading>`` for a heading of the note (not a lone H1, not the note's
             name, not repeated in the note): the note should come first
    typo     the note's file name with one typo in a word of 4+ letters (benchmarks.known_item.one_typo)
    alias    an alias from the note's frontmatter (``aliases:``) that is not its file name

And the kinds people type, written by hand per vault (benchmarks/vault_written.toml, read by
`written_for`): ``question`` (a question or request in the asker's words) and ``concept`` (a
paraphrase with as few of the note's words as possible), each with the note that answers it.

The expected notes: the link's target; the heading's note; every note of that name; the alias's
note. At most ``cap`` queries per kind and vault are kept (a seeded sample). Run
``python -m benchmarks.vault_queries VAULT...`` to count them.
"""

from __future__ import annotations

import random
import re
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import yaml

from benchmarks.known_item import one_typo
from benchmarks.section_query import headings_of

KINDS = ("anchor", "section", "typo", "alias")
#: The kinds written by hand (benchmarks/vault_written.toml).
WRITTEN_KINDS = ("question", "concept")
WRITTEN = Path(__file__).resolve().parent / "vault_written.toml"
#: Queries kept per kind and vault at most.
CAP = 60
_FM = re.compile(r"\A---\r?\n(.*?)\r?\n---\r?\n", re.DOTALL)
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)
_WIKI = re.compile(r"(?<!!)\[\[([^\]|#^]+)(?:[#^][^\]|]*)?\|([^\]]+)\]\]")
_MD = re.compile(r"(?<!!)\[([^\]\n]+)\]\(\s*<?([^)\s>]+?)>?(?:\s+\"[^\"]*\")?\s*\)")
_WORD = re.compile(r"\w{3,}")


def _spelling(text: str) -> str:
    return " ".join(re.sub(r"[-_]+", " ", text.casefold()).split())


def notes_of(vault: Path) -> dict[str, str]:
    """Path relative to the vault -> text, for every Markdown note outside hidden folders."""
    out = {}
    for path in sorted(vault.rglob("*.md")):
        rel = path.relative_to(vault).as_posix()
        if not any(p.startswith(".") for p in rel.split("/")):
            out[rel] = path.read_text(encoding="utf-8", errors="replace")
    return out


def _stem(rel: str) -> str:
    return rel.rsplit("/", 1)[-1][:-3]


def _aliases(text: str) -> list[str]:
    m = _FM.match(text)
    if not m:
        return []
    try:
        fm = yaml.safe_load(m.group(1)) or {}
    except yaml.YAMLError:
        return []
    raw = fm.get("aliases") if isinstance(fm, dict) else None
    raw = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    return [str(a).strip() for a in raw if isinstance(a, (str, int, float)) and str(a).strip()]


def _target(src: str, href: str, notes: dict[str, str], by_stem: dict[str, list[str]]) -> str | None:
    """The note a Markdown link's href points to (relative to its note, then from the vault's root)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", href, re.I):
        return None
    path = unquote(href.split("#", 1)[0]).strip()
    if not path:
        return None
    if not path.endswith(".md"):
        path += ".md"
    base = src.rsplit("/", 1)[0].split("/") if "/" in src else []
    parts = [] if path.startswith("/") else list(base)
    for p in path.lstrip("/").split("/"):
        if p == "..":
            if parts:
                parts.pop()
        elif p not in ("", "."):
            parts.append(p)
    rel = "/".join(parts)
    if rel in notes:
        return rel
    same = by_stem.get(_stem(rel).casefold(), [])
    return same[0] if len(same) == 1 else None


def queries_for(vault: Path, cap: int = CAP, seed: int = 42) -> list[dict[str, Any]]:
    """Every kind's queries for `vault` (at most `cap` per kind, a seeded sample)."""
    notes = notes_of(vault)
    by_stem: dict[str, list[str]] = {}
    for rel in notes:
        by_stem.setdefault(_stem(rel).casefold(), []).append(rel)
    found: dict[str, dict[tuple[str, str], dict[str, Any]]] = {k: {} for k in KINDS}

    def add(kind: str, query: str, expected: list[str], note: str, **extra: Any) -> None:
        query = " ".join(query.split())
        if query and _WORD.search(query) and (query.casefold(), note) not in found[kind]:
            found[kind][(query.casefold(), note)] = {
                "kind": kind,
                "query": query,
                "note": note,
                "expected": expected,
                **extra,
            }

    rng = random.Random(seed)
    for rel, text in notes.items():
        name = _stem(rel)
        body = _CODE.sub(" ", _FM.sub("", text, count=1))
        for target, anchor in _WIKI.findall(body):
            same = by_stem.get(target.strip().rsplit("/", 1)[-1].casefold(), [])
            if len(same) == 1 and _spelling(anchor) != _spelling(_stem(same[0])):
                add("anchor", anchor, same, same[0])
        for anchor, href in _MD.findall(body):
            hit = _target(rel, href, notes, by_stem)
            if hit and hit != rel and _spelling(anchor) != _spelling(_stem(hit)) and "](" not in anchor:
                add("anchor", anchor, [hit], hit)
        heads = headings_of(text)
        h1 = [h for h in heads if h[0] == 1]
        counts: dict[str, int] = {}
        for _, _, h in heads:
            counts[h.casefold()] = counts.get(h.casefold(), 0) + 1
        for level, offset, heading in heads:
            if (level == 1 and len(h1) == 1) or counts[heading.casefold()] > 1:
                continue
            if _spelling(heading) == _spelling(name):
                continue
            add("section", f"{name} {heading}", [rel], rel, offset=offset, heading=heading)
        typo = one_typo(rng, name)
        if typo is not None:
            add("typo", typo, by_stem[name.casefold()], rel)
        for alias in _aliases(text):
            if _spelling(alias) != _spelling(name):
                add("alias", alias, [rel], rel)
    out: list[dict[str, Any]] = []
    for kind in KINDS:
        rows = list(found[kind].values())
        if len(rows) > cap:
            rows = random.Random(f"{seed}-{kind}").sample(rows, cap)
        out.extend(rows)
    return out


def written_for(vault: str, path: Path = WRITTEN) -> list[dict[str, Any]]:
    """The hand-written queries of the vault named `vault` (its name in benchmarks/vaults.toml)."""
    with path.open("rb") as fh:
        rows = tomllib.load(fh)["query"]
    return [
        {
            "kind": r["kind"],
            "query": r["query"],
            "note": r["note"],
            "expected": [r["note"], *r.get("also", [])],
        }
        for r in rows
        if r["vault"] == vault
    ]


def counts(queries: Sequence[dict[str, Any]]) -> dict[str, int]:
    return {k: sum(q["kind"] == k for q in queries) for k in (*KINDS, *WRITTEN_KINDS)}


def main(argv: Sequence[str] | None = None) -> int:
    for folder in argv if argv is not None else sys.argv[1:]:
        vault = Path(folder)
        print(vault.name, len(notes_of(vault)), "notes", counts(queries_for(vault) + written_for(vault.name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
