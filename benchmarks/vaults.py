r"""Lay out the development collection of real vaults (benchmarks/vaults.toml) from fetched snapshots.

Run with ``python -m benchmarks.vaults --vaults DIR [--mirrors /work/.mirror] [--max-notes 300]``.
Each vault of the manifest is read from a bare git snapshot of its public repository
(``MIRRORS/<owner>+<name>/repo``, as a mirror or ``git clone --bare`` leaves it) at the manifest's
commit: its Markdown files under the manifest's folders, hidden folders, ``.trash`` and templates
left out, are written to ``DIR/<name>/`` with their paths kept. When a vault has more notes than
``--max-notes``, a seeded sample of that many is kept (the same sample on every run). Nothing is
fetched here, and nothing of the vaults is committed: ``DIR`` lives outside the repository.

``python -m benchmarks.vaults --vaults DIR --slice OUT --max-bytes 280000`` copies a smaller slice
of each laid-out vault to ``OUT/<name>/`` for runs with vectors (embedding is the slow part on a
small machine): the notes the hand-written queries answer (benchmarks/vault_written.toml), then
notes in a seeded order while their text stays under the byte budget (``--budget NAME=BYTES``
for one vault; a vault already under the budget is copied whole).
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MANIFEST = Path(__file__).resolve().parent / "vaults.toml"
DEFAULT_MIRRORS = Path("/work/.mirror")
#: Notes kept per vault at most (embedding many vaults on a small machine is slow).
MAX_NOTES = 300
_SKIP = frozenset({".trash", "templates", "template", "_templates", "node_modules"})


def manifest(path: Path = MANIFEST) -> list[dict[str, Any]]:
    with path.open("rb") as fh:
        return list(tomllib.load(fh)["vault"])


def _kept(rel: str, folders: Sequence[str]) -> bool:
    parts = rel.split("/")
    if not rel.endswith(".md") or any(p.startswith(".") or p.casefold() in _SKIP for p in parts):
        return False
    return any(f == "" or rel == f or rel.startswith(f.rstrip("/") + "/") for f in folders)


def lay_out(entry: dict[str, Any], mirrors: Path, out: Path, max_notes: int = MAX_NOTES) -> int:
    """Write one vault of the manifest to `out` from its snapshot; the number of notes written."""
    git_dir = mirrors / entry["repo"].replace("/", "+") / "repo"
    folders = list(entry.get("folders") or [""])
    git = ["git", f"--git-dir={git_dir}"]
    listing = subprocess.run(
        [*git, "ls-tree", "-r", "-z", entry["commit"]], check=True, capture_output=True
    ).stdout.decode("utf-8", "replace")
    blobs: dict[str, str] = {}
    for row in listing.split("\0"):
        meta, _, rel = row.partition("\t")
        if rel and meta.split(" ")[1:2] == ["blob"] and _kept(rel, folders):
            blobs[rel] = meta.split(" ")[2]
    names = sorted(blobs)
    if len(names) > max_notes:
        names = sorted(random.Random(entry["name"]).sample(names, max_notes))
    if out.exists():
        shutil.rmtree(out)
    written = 0
    for rel in names:
        # A snapshot may lack its largest files: such a note is left out.
        got = subprocess.run([*git, "cat-file", "blob", blobs[rel]], capture_output=True)
        if got.returncode != 0:
            continue
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(got.stdout)
        written += 1
    return written


def slice_vault(src: Path, out: Path, max_bytes: int, keep: Sequence[str] = ()) -> int:
    """Copy the notes `keep` and then seeded-random others of `src` to `out` within `max_bytes`."""
    rels = sorted(
        p.relative_to(src).as_posix()
        for p in src.rglob("*.md")
        if not any(x.startswith(".") for x in p.relative_to(src).parts)
    )
    order = [r for r in keep if r in rels]
    rest = [r for r in rels if r not in order]
    random.Random(f"slice-{src.name}").shuffle(rest)
    if out.exists():
        shutil.rmtree(out)
    used = written = 0
    for rel in order + rest:
        size = (src / rel).stat().st_size
        if rel not in keep and used + size > max_bytes:
            continue
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, target)
        used += size
        written += 1
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.vaults", description=__doc__.splitlines()[0])
    parser.add_argument("--vaults", type=Path, required=True, help="folder to write the vaults into")
    parser.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS, help="folder of bare snapshots")
    parser.add_argument("--max-notes", type=int, default=MAX_NOTES)
    parser.add_argument("--slice", type=Path, default=None, help="copy a slice of each laid-out vault here")
    parser.add_argument("--max-bytes", type=int, default=280_000, help="a slice's text budget")
    parser.add_argument("--budget", action="append", default=[], help="NAME=BYTES: one vault's budget")
    args = parser.parse_args(argv)
    if args.slice is not None:
        from benchmarks.vault_queries import written_for

        budgets = {k: int(v) for k, _, v in (b.partition("=") for b in args.budget)}
        for entry in manifest():
            name = entry["name"]
            keep = [n for q in written_for(name) for n in q["expected"]]
            n = slice_vault(args.vaults / name, args.slice / name, budgets.get(name, args.max_bytes), keep)
            print(f"{name}: {n} notes in the slice")
        return 0
    for entry in manifest():
        n = lay_out(entry, args.mirrors, args.vaults / entry["name"], args.max_notes)
        print(f"{entry['name']}: {n} notes ({entry['repo']} @ {entry['commit'][:10]}, {entry['licence']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
