r"""Links removed: the related notes ranked by a scorer fitted on the vault's own linked paragraphs.

Run with ``python -m benchmarks.link_suggest_learned [VAULT ...]`` (the generated vault whose links
follow the text, then every vault named). The cases are those of ``benchmarks.link_suggest`` (each
link of a paragraph, its links hidden: A keeps the link words, B removes them). For each case the
writer's call runs once without the scorer (``LinkSuggester.suggest``), and its candidates are
described by ``explorer.search.writing.linkrank.candidate_features`` from what the writer has at that
moment (the hidden text: the paragraph's own links are gone, the rest of the note's links stay).

Protocol: a vault's scorer is fitted on the same vault's other paragraphs, never on the tested
paragraph's links. The paragraphs are split into five folds (``benchmarks.link_suggest``'s hash of
note and paragraph); each fold is ranked by a scorer fitted on the B cases of the other four
(links removed, the linked note the positive). Beside it: the writer's list as it is, a scorer
fitted on the other vaults only (leave one vault out), and one fitted on the whole vault
(in-sample, for reference only). Recall@5 with the link words kept (A) and removed (B).
"""

from __future__ import annotations

import argparse
import hashlib
import pickle
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import log, markdown_table, offline_environment, write_json
from benchmarks.link_suggest import FOLDS, K, add_vault_arguments, cases, vault_key, vaults_of


def collect(vault: Path, cache: Path) -> list[dict[str, Any]]:
    """Every case of `vault` with the writer's list and its candidates' features, both variants."""
    from benchmarks.quality import open_vault_index
    from explorer.engine import make_pipeline
    from explorer.search.writing.suggest import LinkSuggester

    index, settings, _info = open_vault_index(vault, {"index.cache_dir": str(cache)}, embeddings=True)
    sug = LinkSuggester(make_pipeline(index, settings), learn=False)
    todo = cases(index)
    out: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for n, case in enumerate(todo):
        row: dict[str, Any] = {"note": case["note"], "target": case["target"], "fold": case["fold"]}
        for variant in ("A", "B"):
            text, cursor = case[variant]
            got = sug.suggest(text, cursor, path=case["note"], features=True)
            row[variant] = {
                "items": [(s.path, s.kind) for s in got.items],
                "named": [s.path for s in got.items if s.kind == "mention"],
                "candidates": got.candidates,
            }
        out.append(row)
        if n % 200 == 0:
            log(f"  {vault.name}: {n}/{len(todo)} ({time.perf_counter() - t0:.0f} s)")
    index.close()
    return out


def top(case: dict[str, Any], scorer: Any) -> list[str]:
    """The first K of the list: the writer's as it is (no scorer), or named notes then the scored candidates."""
    from explorer.search.writing.linkrank import rerank

    if scorer is None:
        return [p for p, _kind in case["items"]][:K]
    related = [p for p, kind in case["items"] if kind != "mention"]
    return rerank(case["named"], related, scorer, case["candidates"])[:K]


def evaluate(data: dict[str, list[dict[str, Any]]], columns: Sequence[int] | None = None) -> dict[str, Any]:
    """Recall per vault: the writer's list, fitted on the other folds, on the other vaults, in-sample."""
    from explorer.search.writing.linkrank import fit
    from explorer.search.writing.suggest import TRAIN_LINKS

    def groups(rows: Sequence[dict[str, Any]]) -> list[tuple[Any, str]]:
        return [(r["B"]["candidates"], r["target"]) for r in rows]

    def rate(rows: Sequence[dict[str, Any]], scorers: Sequence[Any], variant: str) -> float:
        hits = sum(r["target"] in top(r[variant], s) for r, s in zip(rows, scorers))
        return round(hits / max(len(rows), 1), 4)

    out: dict[str, Any] = {}
    for name, rows in data.items():
        fold_scorers = {
            f: fit(groups([r for r in rows if r["fold"] != f]), columns=columns) for f in range(FOLDS)
        }
        folds = [fold_scorers[r["fold"]] for r in rows]
        # As the writer fits: TRAIN_LINKS links taken note by note in the order of a hash of the
        # note's path (here from the other folds only).
        by_hash = sorted(
            range(len(rows)),
            key=lambda i: (hashlib.blake2b(rows[i]["note"].encode(), digest_size=8).digest(), i),
        )
        sampled = {
            f: fit(groups([rows[i] for i in by_hash if rows[i]["fold"] != f][:TRAIN_LINKS]), columns=columns)
            for f in range(FOLDS)
        }
        folds_sampled = [sampled[r["fold"]] for r in rows]
        others = [r for o, rs in data.items() if o != name for r in rs]
        other = fit(groups(others), columns=columns) if others else None
        whole = fit(groups(rows), columns=columns)
        res: dict[str, Any] = {"links": len(rows)}
        for label, scorers in (
            ("writer", [None] * len(rows)),
            ("other folds", folds),
            (f"other folds, {TRAIN_LINKS} links (as shipped)", folds_sampled),
            ("other vaults", [other] * len(rows)),
            ("in-sample", [whole] * len(rows)),
        ):
            res[label] = {v: rate(rows, scorers, v) for v in ("A", "B")}
        res["weights (whole vault)"] = whole.as_dict() if whole is not None else None
        out[name] = res
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.link_suggest_learned", description=__doc__.splitlines()[0]
    )
    add_vault_arguments(parser)
    parser.add_argument(
        "--search-depth", type=int, help="results the related search gives (linkrank.SEARCH_DEPTH)"
    )
    parser.add_argument(
        "--no-paragraph-bm25", action="store_true", help="no BM25 of the paragraph (linkrank.PARAGRAPH_BM25)"
    )
    parser.add_argument("--tag", default="", help="suffix of the output files")
    parser.add_argument("--reuse", action="store_true", help="read the collected features of an earlier run")
    args = parser.parse_args(argv)
    offline_environment()
    work = args.out / "link-suggest"
    vaults = vaults_of(args, work, ("text",))
    data = {}
    for name, vault in vaults:
        key = vault_key(vault)
        dump = work / f"learned-{key}{args.tag}.pickle"
        if args.reuse and dump.exists():
            data[name] = pickle.loads(dump.read_bytes())
            continue
        data[name] = collect(vault, (work / f"cache-{key}").resolve())
        dump.write_bytes(pickle.dumps(data[name]))
    res = evaluate(data)
    table = []
    for name, r in res.items():
        for label in [k for k in r if isinstance(r[k], dict) and "B" in r[k]]:
            table.append([name, r["links"], label, f"{r[label]['A']:.1%}", f"{r[label]['B']:.1%}"])
    print(markdown_table(["vault", "links", "scorer fitted on", "recall@5 A", "recall@5 B"], table))
    for name, r in res.items():
        print(name, r["weights (whole vault)"])
    write_json(args.out / f"link_suggest_learned{args.tag}.json", res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
