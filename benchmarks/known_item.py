r"""Known-item search: type a note's name (or an alias), get that note first.

Run with ``python -m benchmarks.known_item``. For every note of the sample vault and of a
generated Obsidian-style vault (benchmarks.obsidian_vault, seeded), the benchmark reads the
note's names itself (file name, frontmatter ``title`` and ``aliases``, with its own YAML read:
nothing from the indexer) and runs through the default pipeline, offline:

- query = each name  -> the note (or any note with that same name) at rank 1;
- query = the file name or title with one typo (one letter inserted, deleted, replaced, or two
  swapped, in one word of 4+ letters, seeded) -> the note within the top 3.

Targets: names at rank 1 for >= 97 % of queries, typos in the top 3 for >= 80 %. Rows can be run
with settings overrides (``--row "no name ranking:experimental.name_weight=0"``) to measure what a part
contributes. Vectors are cached in the work folder, so only the first run embeds.
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import string
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from benchmarks import obsidian_vault
from benchmarks.common import DEFAULT_OUT, log, machine, markdown_table, offline_environment, pct, write_json

ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("default", {}),
    ("no name ranking", {"experimental.name_weight": 0}),
    ("no typo tolerance", {"search.typo_tolerance": False}),
)
_FM = re.compile(r"\A---\r?\n(.*?)\r?\n---\r?\n", re.DOTALL)


def note_names(path: Path, rel: str) -> list[str]:
    """The names a person would type for the note: file name, frontmatter title, aliases."""
    names = [rel.rsplit("/", 1)[-1][:-3]]
    m = _FM.match(path.read_text(encoding="utf-8"))
    if m:
        try:
            fm = yaml.safe_load(m.group(1)) or {}
        except yaml.YAMLError:
            fm = {}
        if isinstance(fm, dict):
            title = fm.get("title")
            if isinstance(title, str) and title.strip():
                names.append(title.strip())
            aliases = fm.get("aliases") or []
            aliases = [aliases] if isinstance(aliases, str) else aliases
            names.extend(
                str(a).strip() for a in aliases if isinstance(a, (str, int, float)) and str(a).strip()
            )
    return list(dict.fromkeys(names))


def one_typo(rng: random.Random, text: str) -> str | None:
    """`text` with one typo in one of its words of 4+ letters (None when it has none)."""
    words = [(m.start(), m.end()) for m in re.finditer(r"[A-Za-z]{4,}", text)]
    if not words:
        return None
    s, e = rng.choice(words)
    w = text[s:e]
    i = rng.randrange(len(w))
    op = rng.choice(("insert", "delete", "replace", "swap"))
    letters = string.ascii_lowercase
    if op == "insert":
        w2 = w[:i] + rng.choice(letters) + w[i:]
    elif op == "delete":
        w2 = w[:i] + w[i + 1 :]
    elif op == "replace":
        w2 = w[:i] + rng.choice([c for c in letters if c != w[i].lower()]) + w[i + 1 :]
    else:
        i = min(i, len(w) - 2)
        w2 = w[:i] + w[i + 1] + w[i] + w[i + 2 :] if w[i] != w[i + 1] else w[:i] + w[i + 2 :] + w[i : i + 2]
    return text[:s] + w2 + text[e:]


def queries_for(vault: Path, seed: int = 11) -> list[dict[str, Any]]:
    """Name, alias and typo queries with the set of notes each should find."""
    rng = random.Random(seed)
    table: dict[str, list[str]] = {}
    by_note: dict[str, list[str]] = {}
    for path in sorted(vault.rglob("*.md")):
        rel = path.relative_to(vault).as_posix()
        if any(part.startswith(".") for part in Path(rel).parts):
            continue
        names = note_names(path, rel)
        by_note[rel] = names
        for name in names:
            table.setdefault(name.casefold(), []).append(rel)
    out = []
    for rel, names in by_note.items():
        for i, name in enumerate(names):
            out.append(
                {
                    "kind": "name" if i == 0 or not _is_alias(vault / rel, name) else "alias",
                    "query": name,
                    "note": rel,
                    "expected": table[name.casefold()],
                }
            )
        typo_of = names[1] if len(names) > 1 and not _is_alias(vault / rel, names[1]) else names[0]
        typo = one_typo(rng, typo_of)
        if typo is not None:
            out.append({"kind": "typo", "query": typo, "note": rel, "expected": [rel], "of": typo_of})
    return out


def _is_alias(path: Path, name: str) -> bool:
    m = _FM.match(path.read_text(encoding="utf-8"))
    fm = yaml.safe_load(m.group(1)) if m else None
    return isinstance(fm, dict) and fm.get("title") != name


def run(vault: Path, queries: list[dict[str, Any]], overrides: dict[str, Any], cache: Path) -> dict[str, Any]:
    """Run every query through the default pipeline; rates and the misses."""
    from benchmarks.quality import open_vault_index
    from explorer.engine import make_pipeline

    index, settings, info = open_vault_index(
        vault, {**overrides, "index.cache_dir": str(cache)}, embeddings=True
    )
    pipeline = make_pipeline(index, settings)
    hits: dict[str, list[int]] = {"name": [], "alias": [], "typo": []}
    misses = []
    for q in queries:
        res = pipeline.search(q["query"], k=10, record=False)
        ranked = [r.document_path for r in res.results if r.source == "search"]
        rank = next((i + 1 for i, p in enumerate(ranked) if p in q["expected"]), None)
        ok = rank is not None and (rank <= 3 if q["kind"] == "typo" else rank == 1)
        hits[q["kind"]].append(int(ok))
        if not ok:
            misses.append({**q, "rank": rank, "top": ranked[:3]})
    index.close()
    rate = {k: (sum(v) / len(v) if v else None) for k, v in hits.items()}
    names = hits["name"] + hits["alias"]
    rate["name_or_alias"] = sum(names) / len(names) if names else None
    return {"rates": rate, "counts": {k: len(v) for k, v in hits.items()}, "misses": misses, "index": info}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.known_item", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default bench-out/)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the generated vault")
    parser.add_argument(
        "--row",
        action="append",
        default=[],
        metavar="LABEL:KEY=V,KEY=V",
        help="extra row with settings overrides (default rows: " + ", ".join(r[0] for r in ROWS) + ")",
    )
    parser.add_argument("--only-default", action="store_true", help="run the default row only")
    parser.add_argument("--tag", default="", help="suffix of the output file name")
    parser.add_argument("--show-misses", type=int, default=15, help="misses printed per vault and row")
    args = parser.parse_args(argv)
    offline_environment()
    rows = [ROWS[0]] if args.only_default else list(ROWS)
    for spec in args.row:
        label, _, sets = spec.partition(":")
        rows.append(
            (label, {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in sets.split(",") if kv)})
        )
    work = args.out / "known-item"
    sample = work / "sample_vault"
    if sample.exists():
        shutil.rmtree(sample)
    shutil.copytree(
        Path(__file__).resolve().parent.parent / "sample_vault",
        sample,
        ignore=shutil.ignore_patterns(".explorer"),
    )
    generated = work / f"obsidian-vault-{args.seed}"
    obsidian_vault.write(generated, args.seed)
    report: dict[str, Any] = {"machine": machine(), "rows": {}}
    table = []
    for vault_name, vault in (("sample_vault", sample), (f"generated (seed {args.seed})", generated)):
        queries = queries_for(vault)
        for label, overrides in rows:
            log(f"{vault_name} / {label}: {len(queries)} queries")
            res = run(vault, queries, overrides, work / f"cache-{vault.name}")
            report["rows"][f"{vault_name} / {label}"] = res
            r, c = res["rates"], res["counts"]
            table.append(
                [
                    vault_name,
                    label,
                    c["name"] + c["alias"],
                    pct(r["name_or_alias"]),
                    pct(r["name"]),
                    pct(r["alias"]),
                    c["typo"],
                    pct(r["typo"]),
                ]
            )
            for miss in res["misses"][: args.show_misses]:
                log(
                    f"  miss {miss['kind']}: {miss['query']!r} -> {miss['note']} (rank {miss['rank']}; top {miss['top']})"
                )
    print(
        markdown_table(
            [
                "vault",
                "row",
                "name queries",
                "name/alias @1",
                "name @1",
                "alias @1",
                "typo queries",
                "typo @3",
            ],
            table,
        )
    )
    path = args.out / ("known_item" + (f"-{args.tag}" if args.tag else "") + ".json")
    write_json(path, report)
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
