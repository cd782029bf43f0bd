r"""Section queries: name a part of a note ("the section on Diet in Hamsters"), get that part first.

Run with ``python -m benchmarks.section_query``. For every heading of the sample vault and of a
generated Obsidian-style vault (benchmarks.obsidian_vault, seeded), and of any vault given with
``--vault``, the benchmark reads the headings itself (a line scan of each file: ATX headings
outside code fences and frontmatter; nothing from the indexer) and writes one query per phrasing
template below, with the note's name (its file name) as Y and the heading's text as X:

    name heading   ``Y X``
    section on     ``the section on X in Y``
    question       ``what does Y say about X``
    heading alone  ``X``   (only when no other heading of the vault has that text)

A note's only H1 stands for the note and is left out, and so is a heading whose text repeats in
its own note (the query could not tell the two apart). The target is the shard that holds the
heading line (its node_id). Each query runs through the default pipeline (offline: keyword terms,
two-pass, rerank as configured) and through plain BM25 (rank_bm25.BM25Okapi over each shard's
indexed text, tokenized by explorer.text.tokenize); both lists are read as the app shows them,
one row per note with its best passage:

    section@1   the first note's best passage is the target (any piece of it, for a long section)
    section@5   the target is the best passage of one of the first five notes
    note@1      the first note is the target's note

Rows can be run with settings overrides (``--row "label:search.x=1"``). Vectors are cached in the
work folder, so only the first run embeds.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from benchmarks import obsidian_vault
from benchmarks.common import (
    DEFAULT_OUT,
    log,
    machine,
    markdown_table,
    offline_environment,
    pct,
    summary,
    write_json,
)

TEMPLATES: tuple[tuple[str, str], ...] = (
    ("name heading", "{name} {heading}"),
    ("section on", "the section on {heading} in {name}"),
    ("question", "what does {name} say about {heading}"),
    ("heading alone", "{heading}"),
)
_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_FM = re.compile(r"\A---\r?\n.*?\r?\n---\r?\n", re.DOTALL)


def headings_of(text: str) -> list[tuple[int, int, str]]:
    """(level, offset of the line, text) of each ATX heading outside frontmatter and code fences."""
    out = []
    m = _FM.match(text)
    pos = m.end() if m else 0
    fence: str | None = None
    for line in text[pos:].splitlines(keepends=True):
        f = _FENCE.match(line)
        if f:
            fence = None if fence == f.group(1) else (fence or f.group(1))
        elif fence is None:
            h = _ATX.match(line.rstrip("\r\n"))
            if h and h.group(2).strip():
                out.append((len(h.group(1)), pos, h.group(2).strip()))
        pos += len(line)
    return out


def queries_for(vault: Path) -> list[dict[str, Any]]:
    """Every template for every heading that names one part of one note."""
    found: list[tuple[str, str, int, str]] = []  # path, name, offset, heading
    for path in sorted(vault.rglob("*.md")):
        rel = path.relative_to(vault).as_posix()
        if any(part.startswith(".") for part in Path(rel).parts):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        heads = headings_of(text)
        h1 = [h for h in heads if h[0] == 1]
        counts: dict[str, int] = {}
        for _, _, h in heads:
            counts[h.casefold()] = counts.get(h.casefold(), 0) + 1
        name = rel.rsplit("/", 1)[-1][:-3]
        for level, offset, heading in heads:
            if (level == 1 and len(h1) == 1) or counts[heading.casefold()] > 1:
                continue
            if heading.casefold() == name.casefold():
                continue
            found.append((rel, name, offset, heading))
    vault_wide: dict[str, int] = {}
    for _, _, _, heading in found:
        vault_wide[heading.casefold()] = vault_wide.get(heading.casefold(), 0) + 1
    out = []
    for rel, name, offset, heading in found:
        for kind, template in TEMPLATES:
            if kind == "heading alone" and vault_wide[heading.casefold()] > 1:
                continue
            out.append(
                {
                    "kind": kind,
                    "query": template.format(name=name, heading=heading),
                    "note": rel,
                    "offset": offset,
                    "heading": heading,
                }
            )
    return out


_PIECE = re.compile(r"@\d+$")


def _rank(ranked: list[tuple[str, str]], note: str, target: str) -> tuple[int | None, int | None]:
    """(rank of the note whose best passage is the target, rank of the target's note) in a note list.

    A long section is cut into pieces (`node_id@2`, ...): any piece of the target section counts.
    """
    section = next(
        (i + 1 for i, (_, n) in enumerate(ranked) if _PIECE.sub("", n) == _PIECE.sub("", target)), None
    )
    note_rank = next((i + 1 for i, (p, _) in enumerate(ranked) if p == note), None)
    return section, note_rank


def run(
    vault: Path,
    queries: list[dict[str, Any]],
    rows: list[tuple[str, dict[str, Any]]],
    cache: Path,
    bm25: bool = True,
) -> dict[str, Any]:
    """Every query through each row (pipeline with overrides) and plain BM25; rates per kind and the misses."""
    from benchmarks.quality import open_vault_index
    from explorer.engine import make_pipeline
    from explorer.text.tokenize import tokenize

    out: dict[str, Any] = {}
    targets: dict[int, str] = {}
    for label, overrides in rows:
        index, settings, info = open_vault_index(
            vault, {**overrides, "index.cache_dir": str(cache)}, embeddings=True
        )
        index.load_all_notes()
        for i, q in enumerate(queries):
            shard = index.shard_at(q["note"], q["offset"])
            targets[i] = shard.node_id if shard is not None else ""
        pipeline = make_pipeline(index, settings)
        per: list[dict[str, Any]] = []
        latency: list[float] = []
        for i, q in enumerate(queries):
            t0 = time.perf_counter()
            res = pipeline.search(q["query"], k=10, record=False)
            latency.append((time.perf_counter() - t0) * 1000)
            ranked = [(r.document_path, r.node_id) for r in res.results if r.source == "search"]
            per.append(_score(q, targets[i], ranked))
        if bm25 and "rank_bm25" not in out:
            from rank_bm25 import BM25Okapi

            ids = [n for p in sorted(index.notes) for n in index.shard_ids(p)]
            docs = [index.shards[n] for n in ids]
            engine = BM25Okapi([tokenize(d.search_text) or [""] for d in docs])
            base = []
            for i, q in enumerate(queries):
                scores = engine.get_scores(tokenize(q["query"]))
                order = sorted(range(len(ids)), key=lambda j: (-scores[j], ids[j]))
                ranked, seen = [], set()
                for j in order:
                    if docs[j].path not in seen and scores[j] > 0:
                        seen.add(docs[j].path)
                        ranked.append((docs[j].path, ids[j]))
                    if len(ranked) >= 10:
                        break
                base.append(_score(q, targets[i], ranked))
            out["rank_bm25"] = {"rates": _rates(base), "per_query": base}
        index.close()
        out[label] = {"rates": _rates(per), "per_query": per, "index": info, "latency_ms": summary(latency)}
    return out


def _score(q: dict[str, Any], target: str, ranked: list[tuple[str, str]]) -> dict[str, Any]:
    section, note = _rank(ranked, q["note"], target)
    return {
        "kind": q["kind"],
        "query": q["query"],
        "target": target,
        "section": section,
        "note_rank": note,
        "top": ranked[0][1] if ranked else None,
    }


def _rates(per: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    kinds = ["all"] + [k for k, _ in TEMPLATES]
    out: dict[str, dict[str, float]] = {}
    for kind in kinds:
        rows = [p for p in per if kind == "all" or p["kind"] == kind]
        if not rows:
            continue
        n = len(rows)
        out[kind] = {
            "n": n,
            "section@1": sum(p["section"] == 1 for p in rows) / n,
            "section@5": sum(p["section"] is not None and p["section"] <= 5 for p in rows) / n,
            "note@1": sum(p["note_rank"] == 1 for p in rows) / n,
        }
    return out


def prepare(work: Path, seed: int) -> list[tuple[str, Path]]:
    """The sample vault (copied) and the generated vault, written under `work`."""
    sample = work / "sample_vault"
    if sample.exists():
        shutil.rmtree(sample)
    shutil.copytree(
        Path(__file__).resolve().parent.parent / "sample_vault",
        sample,
        ignore=shutil.ignore_patterns(".explorer"),
    )
    generated = work / f"obsidian-vault-{seed}"
    obsidian_vault.write(generated, seed)
    return [("sample_vault", sample), (f"generated (seed {seed})", generated)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.section_query", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default bench-out/)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the generated vault")
    parser.add_argument(
        "--vault", type=Path, action="append", default=[], help="another vault to measure (read in place)"
    )
    parser.add_argument(
        "--row",
        action="append",
        default=[],
        metavar="LABEL:KEY=V,KEY=V",
        help="extra row with settings overrides (the default row always runs)",
    )
    parser.add_argument("--generated-only", action="store_true", help="leave out sample_vault")
    parser.add_argument("--tag", default="", help="suffix of the output file name")
    parser.add_argument("--show-misses", type=int, default=10, help="misses printed per vault and row")
    args = parser.parse_args(argv)
    offline_environment()
    rows: list[tuple[str, dict[str, Any]]] = [("default", {})]
    for spec in args.row:
        label, _, sets = spec.partition(":")
        rows.append(
            (label, {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in sets.split(",") if kv)})
        )
    work = args.out / "section-query"
    vaults = prepare(work, args.seed)[1 if args.generated_only else 0 :] + [(str(v), v) for v in args.vault]
    report: dict[str, Any] = {"machine": machine(), "vaults": {}}
    table = []
    for vault_name, vault in vaults:
        queries = queries_for(vault)
        log(f"{vault_name}: {len(queries)} queries")
        cache = work / f"cache-{vault.name}" if vault.is_relative_to(work) else vault / ".explorer"
        res = run(vault, queries, rows, cache)
        report["vaults"][vault_name] = res
        for label in ["rank_bm25"] + [r[0] for r in rows]:
            lat = res[label].get("latency_ms", {}).get("median")
            for kind, r in res[label]["rates"].items():
                table.append(
                    [
                        vault_name,
                        label,
                        kind,
                        r["n"],
                        pct(r["section@1"]),
                        pct(r["section@5"]),
                        pct(r["note@1"]),
                        "-" if lat is None else f"{lat:.1f}",
                    ]
                )
            if label != "rank_bm25":
                misses = [p for p in res[label]["per_query"] if p["section"] != 1]
                for miss in misses[: args.show_misses]:
                    log(
                        f"  {label} miss {miss['kind']}: {miss['query']!r} -> {miss['target']} "
                        f"(section rank {miss['section']}, note rank {miss['note_rank']}; top {miss['top']})"
                    )
    print(
        markdown_table(
            ["vault", "row", "queries", "n", "section@1", "section@5", "note@1", "median ms"], table
        )
    )
    path = args.out / ("section_query" + (f"-{args.tag}" if args.tag else "") + ".json")
    write_json(path, report)
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
