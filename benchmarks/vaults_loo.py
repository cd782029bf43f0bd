r"""The development collection of real vaults, one left out: ranking per kind, levels and sections.

Run with ``nice -n 10 python -m benchmarks.vaults_loo --vaults DIR [--embeddings] [--row ...]`` on
the vaults ``python -m benchmarks.vaults --vaults DIR`` lays out (or a slice of them, ``--slice``).
Every query of benchmarks.vault_queries (anchor, section, typo, alias, and the hand-written
question and concept ones) runs through the default pipeline (k=10; lexical only unless
``--embeddings``) and through plain BM25 over each note's name and body (rank_bm25.BM25Okapi,
explorer.text.tokenize, one document per note). Reported per vault and kind: MRR@10 and hit@1
(the first expected note's rank).

Values chosen leaving one vault out:

- Rows (``--row "label:section.key=value,..."``, ``names.part_weight=X`` for the name ranking's
  section weight): the shipped values are the row ``default``; for each vault the row with the
  best mean MRR@10 over the other vaults (each vault's kinds weighing the same) is scored on it
  ("left out"), beside the row best over all vaults ("in sample").
- Levels (explorer.search.quality): the level score is ``score + LEAD_WEIGHT * lead`` and a
  query that is the first result's name is high whatever it is. Thresholds are chosen toward
  "high => the first result is right in >= 80 % of cases, low => in <= 30 %" (`choose`):
  ``high`` stays the shipped value unless those said high are right less than TARGET_HIGH of the
  time over the vaults chosen on, ``medium`` is the highest value (0.01 grid) not above it at
  which the queries said low are right <= TARGET_LOW of the time. A query that nearly spells the
  first result's name (its ``first_likeness`` at least NEAR_NAME) is at least medium; that bar is
  chosen first (`choose_near`), among the queries the other vaults' ``medium`` without it calls low.

Sections: for each ``<note name> <heading>`` query, whether the note comes first (beside BM25 over
name + body), and whether the first result's passage is the heading's shard (beside plain BM25
over shards, best shard per note, as benchmarks.section_query's rank_bm25 row). Records go to
``OUT/vaults_loo[-TAG].jsonl``, the summary to ``OUT/vaults_loo.json``; ``--records A B ...``
reports on joined records without a run.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.common import DEFAULT_OUT, log, markdown_table, offline_environment, write_json
from benchmarks.levels_loo import lead
from benchmarks.vault_queries import KINDS, WRITTEN_KINDS, queries_for, written_for
from explorer.search.quality import HIGH, LEAD_WEIGHT, MEDIUM, NEAR_NAME

TARGET_HIGH = 0.80
TARGET_LOW = 0.30
GRID = [i / 100 for i in range(-20, 121)]
#: NEAR_NAME values chosen among (None: no such floor).
NEAR_GRID: tuple[float | None, ...] = (None, *(i / 100 for i in range(60, 100, 5)))
#: A row's override of explorer.search.names.PART_WEIGHT (a constant, not a setting).
PART_KEY = "names.part_weight"


_PIECE = re.compile(r"@\d+$")


@contextmanager
def _part_weight(value: float | None) -> Iterator[None]:
    """explorer.search.names.PART_WEIGHT set to `value` for the block (None: as shipped)."""
    from explorer.search.core.retrievers import names

    saved = names.PART_WEIGHT
    if value is not None:
        names.PART_WEIGHT = value
    try:
        yield
    finally:
        names.PART_WEIGHT = saved


def run_vault(
    vault: Path,
    cache: Path,
    embeddings: bool,
    rows: Sequence[tuple[str, dict[str, Any]]] = (("default", {}),),
) -> list[dict[str, Any]]:
    """Every query of the vault (derived and written) through each row's pipeline and plain BM25."""
    from rank_bm25 import BM25Okapi  # type: ignore[import-untyped]

    from benchmarks.quality import open_vault_index
    from explorer.engine import make_pipeline
    from explorer.text.tokenize import tokenize

    queries = queries_for(vault) + written_for(vault.name)
    paths = sorted(p.relative_to(vault).as_posix() for p in vault.rglob("*.md"))
    paths = [p for p in paths if not any(x.startswith(".") for x in p.split("/"))]
    docs = []
    for p in paths:
        name = p.rsplit("/", 1)[-1][:-3]
        docs.append(tokenize(name + "\n" + (vault / p).read_text(encoding="utf-8", errors="replace")) or [""])
    bm25 = BM25Okapi(docs)
    base: dict[int, list[str]] = {}
    for i, q in enumerate(queries):
        scores = bm25.get_scores(tokenize(q["query"]))
        order = sorted((j for j in range(len(paths)) if scores[j] > 0), key=lambda j: (-scores[j], paths[j]))
        base[i] = [paths[j] for j in order[:10]]
    out = []
    for label, overrides in rows:
        flags = {k: v for k, v in overrides.items() if k != PART_KEY}
        part = overrides.get(PART_KEY)
        index, settings, _info = open_vault_index(
            vault, {**flags, "index.cache_dir": str(cache)}, embeddings=embeddings
        )
        index.load_all_notes()
        targets = {
            i: _PIECE.sub("", getattr(index.shard_at(q["note"], q["offset"]), "node_id", ""))
            for i, q in enumerate(queries)
            if q["kind"] == "section"
        }
        passage_base = _bm25_passages(index, queries, targets) if label == rows[0][0] else {}
        pipeline = make_pipeline(index, settings)
        with _part_weight(None if part is None else float(part)):
            for i, q in enumerate(queries):
                res = pipeline.search(q["query"], k=10, record=False)
                quality = res.quality
                assert quality is not None
                searched = [r for r in res.results if r.source == "search"]
                ranked = list(dict.fromkeys(r.document_path for r in searched))[:10]
                rec = {
                    "vault": vault.name,
                    "row": label,
                    **q,
                    "rank": next((i + 1 for i, p in enumerate(ranked) if p in q["expected"]), None),
                    "bm25_rank": next((i + 1 for i, p in enumerate(base[i]) if p in q["expected"]), None),
                    "right": bool(ranked) and ranked[0] in q["expected"],
                    "score": quality.score,
                    "level": quality.level,
                    "factors": {
                        k: v for k, v in quality.factors.items() if isinstance(v, (int, float, bool))
                    },
                    "relevances": [r.relevance for r in searched][:10],
                }
                if i in targets:
                    first = searched[0] if searched else None
                    rec["target"] = targets[i]
                    rec["passage_first"] = bool(
                        first is not None
                        and first.document_path == q["note"]
                        and _PIECE.sub("", first.node_id) == targets[i]
                    )
                    if i in passage_base:
                        rec["bm25_passage_first"] = passage_base[i]
                out.append(rec)
        index.close()
    return out


def _bm25_passages(index: Any, queries: Sequence[dict[str, Any]], targets: dict[int, str]) -> dict[int, bool]:
    """Section queries: is the first note of plain BM25 over shards (best shard per note) the target's
    note, with the target as its best shard (benchmarks.section_query's rank_bm25 row)?"""
    from rank_bm25 import BM25Okapi

    from explorer.text.tokenize import tokenize

    ids = [n for p in sorted(index.notes) for n in index.shard_ids(p)]
    if not ids or not targets:
        return {}
    shards = [index.shards[n] for n in ids]
    engine = BM25Okapi([tokenize(d.search_text) or [""] for d in shards])
    out = {}
    for i in targets:
        scores = engine.get_scores(tokenize(queries[i]["query"]))
        j = min(range(len(ids)), key=lambda j: (-scores[j], ids[j]))
        out[i] = bool(
            scores[j] > 0 and shards[j].path == queries[i]["note"] and _PIECE.sub("", ids[j]) == targets[i]
        )
    return out


def level_score(r: dict[str, Any]) -> float:
    return float(r["score"]) + LEAD_WEIGHT * lead(r)


def named(r: dict[str, Any]) -> bool:
    return bool((r.get("factors") or {}).get("first_named"))


def likeness(r: dict[str, Any]) -> float:
    """How nearly the query spells the first result's name (0 in records made before it was recorded)."""
    return float((r.get("factors") or {}).get("first_likeness", 0.0))


def level(r: dict[str, Any], high: float, medium: float, near: float | None = NEAR_NAME) -> str:
    s = level_score(r)
    if named(r) or s >= high:
        return "high"
    return "medium" if s >= medium or (near is not None and likeness(r) >= near) else "low"


def choose_near(recs: Sequence[dict[str, Any]]) -> float | None:
    """The NEAR_NAME bar over `recs` pooled: among the queries said low at the `medium` chosen there
    without the bar, those it lifts to medium should be right: the value with the most right less
    wrong ones lifted (ties: the higher value, lifting fewer), None when no value lifts more right
    ones than wrong."""
    _high, medium = choose(recs, None)
    low = [r for r in recs if level(r, HIGH, medium, None) == "low"]
    best: tuple[int, float | None] = (0, None)
    for t in NEAR_GRID[1:]:
        assert t is not None
        gain = sum(1 if r["right"] else -1 for r in low if likeness(r) >= t)
        if gain > 0 and gain >= best[0]:
            best = (gain, t)
    return best[1]


def choose(recs: Sequence[dict[str, Any]], near: float | None = NEAR_NAME) -> tuple[float, float]:
    """(high, medium) toward low => right <= TARGET_LOW, high => right >= TARGET_HIGH, over `recs` pooled.

    `high` stays the shipped HIGH while the queries said high there are right at least
    TARGET_HIGH of the time, else it is the lowest value above it at which they are (a lower
    `high` would meet the mark too when most first results are right, but the mark does not ask
    for it, and it would undo what HIGH was chosen for on the other benchmarks). `medium`: the
    highest value not above `high` at which the queries said low are right at most TARGET_LOW of
    the time (a query that spells the first result's name `near`ly is not low whatever its score).
    """

    def said_high(t: float) -> list[bool]:
        return [r["right"] for r in recs if named(r) or level_score(r) >= t]

    high = HIGH
    said = said_high(high)
    if said and sum(said) / len(said) < TARGET_HIGH:
        high = next(
            (t for t in GRID if t > HIGH and (s := said_high(t)) and sum(s) / len(s) >= TARGET_HIGH),
            GRID[-1],
        )
    medium = GRID[0]
    for t in GRID:
        low = [r["right"] for r in recs if level(r, high, t, near) == "low"]
        if t <= high and (not low or sum(low) / len(low) <= TARGET_LOW):
            medium = t
    return high, medium


def choose_all(recs: Sequence[dict[str, Any]]) -> tuple[float, float, float | None]:
    """(high, medium, near) chosen over `recs` pooled: the near-name bar first, then the thresholds with it."""
    near = choose_near(recs)
    return (*choose(recs, near), near)


def _near(x: float | None) -> str:
    return "off" if x is None else f"{x:.2f}"


def calib(
    recs: Sequence[dict[str, Any]], high: float, medium: float, near: float | None = NEAR_NAME
) -> dict[str, Any]:
    lv = [level(r, high, medium, near) for r in recs]
    n = len(recs)
    out: dict[str, Any] = {"n": n}
    for name in ("high", "medium", "low"):
        said = [r["right"] for r, x in zip(recs, lv, strict=True) if x == name]
        out[f"{name}_share"] = round(len(said) / n, 4) if n else None
        out[f"{name}_right"] = round(sum(said) / len(said), 4) if said else None
        out[f"{name}_n"] = len(said)
    return out


def ranking(recs: Sequence[dict[str, Any]], key: str) -> dict[str, float]:
    n = len(recs)
    return {
        "n": n,
        "mrr10": round(sum(1 / r[key] for r in recs if r[key]) / n, 4) if n else 0.0,
        "hit1": round(sum(r[key] == 1 for r in recs) / n, 4) if n else 0.0,
    }


def _p(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f} %"


def _share(xs: Sequence[bool]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def vault_mrr(recs: Sequence[dict[str, Any]]) -> float:
    """A vault's MRR@10 with each kind weighing the same (so 60 typo queries do not drown 7 concept ones)."""
    kinds = sorted({r["kind"] for r in recs})
    return sum(ranking([r for r in recs if r["kind"] == k], "rank")["mrr10"] for k in kinds) / len(kinds)


def choose_row(recs: Sequence[dict[str, Any]], vaults: Sequence[str], rows: Sequence[str]) -> str:
    """The row with the best mean over `vaults` of each vault's MRR@10 (ties: the earlier row)."""
    best, best_v = rows[0], -1.0
    if not vaults:
        return best
    for row in rows:
        v = sum(vault_mrr([r for r in recs if r["row"] == row and r["vault"] == x]) for x in vaults) / len(
            vaults
        )
        if v > best_v + 1e-9:
            best, best_v = row, v
    return best


def _pick(recs: Sequence[dict[str, Any]], row: str, vault: str, kind: str) -> list[dict[str, Any]]:
    return [
        r for r in recs if r["row"] == row and r["vault"] == vault and (kind == "all" or r["kind"] == kind)
    ]


def report(recs: list[dict[str, Any]], default_row: str = "default") -> tuple[dict[str, Any], str]:
    vaults = list(dict.fromkeys(r["vault"] for r in recs))
    rows = list(dict.fromkeys(r.get("row", default_row) for r in recs))
    for r in recs:
        r.setdefault("row", default_row)
    base = [r for r in recs if r["row"] == default_row]
    summary: dict[str, Any] = {"ranking": {}, "levels": {}, "sections": {}, "rows": {}}
    kinds = (*KINDS, *WRITTEN_KINDS)
    # Rows: each value set chosen leaving one vault out, by the mean of the other vaults' MRR@10.
    # (on the vaults run with every row: a row run on some vaults only is chosen among those)
    have = {(r["vault"], r["row"]) for r in recs}
    full = [v for v in vaults if all((v, row) in have for row in rows)]
    chosen = {v: choose_row(recs, [x for x in full if x != v], rows) for v in vaults}
    in_sample_row = choose_row(recs, full, rows)
    summary["rows"] = {"rows": rows, "vaults": full, "in_sample": in_sample_row, "left_out": chosen}
    table = []
    for v in vaults:
        for kind in (*kinds, "all"):
            sub = _pick(recs, default_row, v, kind)
            if not sub:
                continue
            a, b = ranking(sub, "rank"), ranking(sub, "bm25_rank")
            ins, out = (
                ranking(_pick(recs, in_sample_row, v, kind), "rank"),
                ranking(_pick(recs, chosen[v], v, kind), "rank"),
            )
            summary["ranking"][f"{v}/{kind}"] = {"pipeline": a, "bm25": b, "in_sample": ins, "left_out": out}
            table.append(
                [
                    v,
                    kind,
                    a["n"],
                    f"{a['mrr10']:.3f} / {_p(a['hit1'])}",
                    f"{ins['mrr10']:.3f} / {_p(ins['hit1'])}",
                    f"{out['mrr10']:.3f} / {_p(out['hit1'])}",
                    f"{b['mrr10']:.3f} / {_p(b['hit1'])}",
                ]
            )
    text = (
        "### Ranking per vault and kind: MRR@10 / hit@1 (shipped values; row chosen on all vaults;"
        " row chosen on the other vaults; plain BM25 over name + body)\n\n"
    )
    text += markdown_table(["vault", "kind", "n", "shipped", "in sample", "left out", "BM25"], table)
    if len(rows) > 1:
        text += (
            "\n\nRows: "
            + ", ".join(rows)
            + f" (run on {', '.join(full)}); in sample: {in_sample_row}; left out: "
        )
        text += ", ".join(f"{v} <- {chosen[v]}" for v in vaults) + "\n"
    # Sections: the note first, and the section's passage first.
    table = []
    for v in vaults:
        sec = [r for r in base if r["vault"] == v and r["kind"] == "section"]
        if not sec:
            continue
        note1 = _share([r["rank"] == 1 for r in sec])
        bnote1 = _share([r["bm25_rank"] == 1 for r in sec])
        pas = _share([bool(r.get("passage_first")) for r in sec])
        bpas = _share([bool(r.get("bm25_passage_first")) for r in sec])
        given = _share([bool(r.get("passage_first")) for r in sec if r["rank"] == 1])
        summary["sections"][v] = {
            "n": len(sec),
            "note1": note1,
            "bm25_note1": bnote1,
            "section1": pas,
            "bm25_shards_section1": bpas,
            "passage_given_note1": given,
        }
        table.append([v, len(sec), f"{_p(note1)} / {_p(bnote1)}", f"{_p(pas)} / {_p(bpas)}", _p(given)])
    text += "\n\n### Section queries (`<note name> <heading>`), shipped values\n\n"
    text += markdown_table(
        [
            "vault",
            "n",
            "note@1 pipeline / BM25 name+body",
            "section@1 pipeline / BM25 shards",
            "passage first when note first",
        ],
        table,
    )
    # Levels.
    in_sample = choose_all(base)
    summary["levels"]["in_sample_thresholds"] = in_sample
    table = []
    left: list[dict[str, Any]] = []
    for v in vaults:
        test = [r for r in base if r["vault"] == v]
        th = choose_all([r for r in base if r["vault"] != v])
        cur, ins, out = calib(test, HIGH, MEDIUM), calib(test, *in_sample), calib(test, *th)
        left.extend({**r, "_th": th} for r in test)
        summary["levels"][v] = {"left_out_thresholds": th, "current": cur, "in_sample": ins, "left_out": out}
        table.append(
            [
                v,
                cur["n"],
                f"{_p(cur['high_right'])} / {_p(cur['low_right'])}",
                f"{_p(ins['high_right'])} / {_p(ins['low_right'])}",
                f"{th[0]:.2f} / {th[1]:.2f} / {_near(th[2])}",
                f"{_p(out['high_right'])} / {_p(out['low_right'])}",
                f"{_p(out['high_share'])} / {_p(out['low_share'])}",
            ]
        )
    pooled: dict[str, Any] = {"current": calib(base, HIGH, MEDIUM), "in_sample": calib(base, *in_sample)}
    lv = [level(r, *r["_th"]) for r in left]
    pooled["left_out"] = {
        f"{name}_{what}": (
            _share([r["right"] for r, x in zip(left, lv, strict=True) if x == name])
            if what == "right"
            else round(sum(x == name for x in lv) / len(lv), 4)
        )
        for name in ("high", "medium", "low")
        for what in ("right", "share")
    }
    summary["levels"]["pooled"] = pooled
    text += (
        f"\n\n### Levels: top-1 right when high / when low (current HIGH {HIGH} / MEDIUM {MEDIUM} /"
        f" NEAR_NAME {NEAR_NAME}; in sample {in_sample[0]:.2f} / {in_sample[1]:.2f} / {_near(in_sample[2])})\n\n"
    )
    text += markdown_table(
        [
            "vault",
            "n",
            "current",
            "in sample",
            "left-out high / medium / near name",
            "left out",
            "left out: share high / low",
        ],
        table,
    )
    table = []
    for label, c in (
        ("current", pooled["current"]),
        ("in sample", pooled["in_sample"]),
        ("left out", pooled["left_out"]),
    ):
        table.append(
            [label]
            + [
                f"{_p(c[f'{x}_share'])} of queries, right {_p(c[f'{x}_right'])}"
                for x in ("high", "medium", "low")
            ]
        )
    text += "\n\n### Share right per level, pooled\n\n" + markdown_table(
        ["values", "high", "medium", "low"], table
    )
    # Per kind (the written kinds carry the levels people meet most).
    table = []
    for kind in kinds:
        sub = [r for r in left if r["kind"] == kind]
        if not sub:
            continue
        lvk = [level(r, *r["_th"]) for r in sub]
        cur = calib(sub, HIGH, MEDIUM)
        row = [
            kind,
            len(sub),
            f"{_p(cur['high_right'])} / {_p(cur['medium_right'])} / {_p(cur['low_right'])}",
        ]
        row.append(
            " / ".join(
                _p(_share([r["right"] for r, x in zip(sub, lvk, strict=True) if x == name]))
                for name in ("high", "medium", "low")
            )
        )
        row.append(" / ".join(f"{sum(x == name for x in lvk)}" for name in ("high", "medium", "low")))
        table.append(row)
    text += "\n\n### Right per level by kind (high / medium / low)\n\n" + markdown_table(
        ["kind", "n", "current values", "left out", "left out: count high / medium / low"], table
    )
    return summary, text + "\n"


def parse_row(spec: str) -> tuple[str, dict[str, Any]]:
    """``label:key=value,key=value`` -> (label, overrides); `names.part_weight` sets PART_WEIGHT."""
    label, _, rest = spec.partition(":")
    out: dict[str, Any] = {}
    for part in filter(None, rest.split(",")):
        key, _, value = part.partition("=")
        out[key.strip()] = value.strip()
    return label, out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.vaults_loo", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--vaults", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--embeddings", action="store_true", help="run the model too (slow)")
    parser.add_argument(
        "--records", type=Path, nargs="+", default=None, help="report from these records (joined), no run"
    )
    parser.add_argument(
        "--row",
        action="append",
        default=[],
        help='a value set to choose among, "label:section.key=value,..." (names.part_weight=X too); '
        "the shipped values are the row `default`, always run first",
    )
    parser.add_argument("--only", action="append", default=[], help="run only these vaults")
    parser.add_argument("--tag", default="", help="name the records vaults_loo-TAG.jsonl")
    parser.add_argument("--skip-default", action="store_true", help="run the --row rows only")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    jsonl = args.out / (f"vaults_loo-{args.tag}.jsonl" if args.tag else "vaults_loo.jsonl")
    if args.records:
        recs = [
            json.loads(x)
            for f in args.records
            for x in f.read_text(encoding="utf-8").splitlines()
            if x.strip()
        ]
    else:
        offline_environment()
        rows = [*([] if args.skip_default else [("default", {})]), *(parse_row(x) for x in args.row)]
        recs = []
        jsonl.write_text("", encoding="utf-8")
        for vault in sorted(p for p in args.vaults.iterdir() if p.is_dir()):
            if args.only and vault.name not in args.only:
                continue
            t = time.perf_counter()
            got = run_vault(vault, args.out / "cache" / vault.name, args.embeddings, rows)
            log(f"{vault.name}: {len(got)} records in {time.perf_counter() - t:.0f} s")
            with jsonl.open("a", encoding="utf-8") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in got)
            recs.extend(got)
    summary, text = report(recs)
    summary["embeddings"] = args.embeddings if not args.records else None
    write_json(args.out / ("vaults_loo-report.json" if args.records else "vaults_loo.json"), summary)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
