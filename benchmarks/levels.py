r"""What the quality levels mean on notes vaults: how often "high" comes with a wrong first result, "low" with a right one.

Run with ``nice -n 10 python -m benchmarks.levels``. For the sample vault and a generated
Obsidian-style vault (benchmarks.obsidian_vault, seeded), queries of the kinds people type are
written from the vault's own files by templates (seeded; every note gets each kind it can have,
none is picked by how it ranks):

    name      the note's file name
    question  a question around the name ("what is X?", "where did I write about X?", ...)
    concept   three content words of the note's body, in body order
    section   the text of one of the note's headings
    typo      the file name with one typo (benchmarks.known_item.one_typo)
    absent    a file name of the *other* vaults that no note of this one bears (hyphens and
              underscores read as spaces): nothing answers it
    claim     (SciFact vault only) a SciFact test claim, right when the first result is an abstract
              its qrels cite

Three notes vaults: sample_vault, the generated vault (benchmarks.obsidian_vault, seed 7) and a
vault of paper notes built from the SciFact corpus (``--scifact DIR``): every abstract that a
test claim cites plus a seeded sample of others, each a note named after the paper's title (as
a reference manager names them) whose body is the abstract.

Each query runs through the default pipeline (k=10). The first result is right when it is the
note the query was written from, or a note that answers it as well: for a name or a typo any
note of that name, for a section any note with that heading, for a concept any note whose body
holds the three words; for an absent query nothing is right. Per query the quality score, level and ``no_good_match`` flag are
recorded; the report gives per vault and kind how often a wrong first result says "high" and a
right one says "low", and the thresholds that would meet the targets (<= 10 % each) chosen
leaving one vault out (chosen on the other vaults, scored on this one) beside the in-sample ones.
Per-query records go to ``OUT/levels[-TAG].jsonl``, the summary to ``OUT/levels[-TAG].json``.

With ``--locomo RECORDS.jsonl`` (a ``benchmarks.locomo`` run of the explorer row) the LoCoMo
conversations join as vaults of conversation turns, whose levels have their own thresholds
(explorer.search.quality TURN_HIGH / TURN_MEDIUM): there the first result is right when it is an
evidence turn of an answerable question (an adversarial question has no right one), and those
thresholds are chosen leaving one conversation out in the same way.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import obsidian_vault
from benchmarks.common import (
    DEFAULT_OUT,
    REPO,
    log,
    machine,
    markdown_table,
    offline_environment,
    pct,
    write_json,
)
from benchmarks.known_item import note_names, one_typo

KINDS = ("name", "question", "concept", "section", "typo", "absent", "claim")
DEFAULT_SCIFACT = REPO.parent / "shared" / "bench" / "scifact"
#: Abstracts of the SciFact vault that no test claim cites (seeded sample): notes nothing asks for.
SCIFACT_OTHERS = 80
QUESTIONS = (
    "what is {}?",
    "where did I write about {}?",
    "what do my notes say about {}?",
    "how does {} work?",
    "notes on {}",
)
#: Share of wrong first results allowed to say "high", and of right ones allowed to say "low".
TARGET = 0.10
_FM = re.compile(r"\A---\r?\n.*?\r?\n---\r?\n", re.DOTALL)
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_CODE = re.compile(r"```.*?```", re.DOTALL)
_LINK = re.compile(r"!?\[\[[^\]]*\]\]|\[[^\]]*\]\([^)]*\)|https?://\S+")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{4,}")
_STOP = frozenset(
    """about above after again against among because before being below between could doing during
every having itself might other ought their theirs there these those through under until where which while whose
would yours really should still thing things using often always never maybe""".split()
)


def _notes(vault: Path) -> dict[str, Path]:
    out = {}
    for path in sorted(vault.rglob("*.md")):
        rel = path.relative_to(vault).as_posix()
        if not any(part.startswith(".") for part in Path(rel).parts):
            out[rel] = path
    return out


def _spelling(name: str) -> str:
    """A name folded, with hyphens and underscores read as spaces."""
    return " ".join(re.sub(r"[-_]+", " ", name.casefold()).split())


def queries_for(vault: Path, other_names: set[str], seed: int = 13) -> list[dict[str, Any]]:
    """The queries of every kind for every note of `vault` (absent ones from `other_names`)."""
    rng = random.Random(seed)
    notes = _notes(vault)
    by_name: dict[str, list[str]] = {}
    for rel, path in notes.items():
        for name in note_names(path, rel):
            by_name.setdefault(name.casefold(), []).append(rel)
    bodies = {
        rel: _FM.sub("", path.read_text(encoding="utf-8", errors="replace"), count=1)
        for rel, path in notes.items()
    }
    vocab = {
        rel: {w.lower() for w in _WORD.findall(_LINK.sub(" ", _CODE.sub(" ", body)))}
        for rel, body in bodies.items()
    }
    heads = {rel: {h.strip().casefold() for h in _HEADING.findall(body)} for rel, body in bodies.items()}
    out: list[dict[str, Any]] = []
    for rel in notes:
        name = rel.rsplit("/", 1)[-1][:-3]
        same = by_name.get(name.casefold(), [rel])
        body = bodies[rel]
        out.append({"kind": "name", "query": name, "note": rel, "expected": same})
        out.append(
            {"kind": "question", "query": rng.choice(QUESTIONS).format(name), "note": rel, "expected": [rel]}
        )
        words = [w.lower() for w in _WORD.findall(_LINK.sub(" ", _CODE.sub(" ", _HEADING.sub(" ", body))))]
        words = list(dict.fromkeys(w for w in words if w not in _STOP and w not in name.lower()))
        if len(words) >= 3:
            picked = [words[i] for i in sorted(rng.sample(range(len(words)), 3))]
            holders = [n for n, v in vocab.items() if all(w in v for w in picked)]
            out.append(
                {"kind": "concept", "query": " ".join(picked), "note": rel, "expected": holders or [rel]}
            )
        headings = [
            h for h in _HEADING.findall(body) if h.strip().casefold() != name.casefold() and _WORD.search(h)
        ]
        if headings:
            heading = rng.choice(headings)
            out.append(
                {
                    "kind": "section",
                    "query": heading,
                    "note": rel,
                    "expected": [n for n, h in heads.items() if heading.strip().casefold() in h],
                }
            )
        typo = one_typo(rng, name)
        if typo is not None:
            out.append({"kind": "typo", "query": typo, "note": rel, "expected": same})
    # A name this vault holds spelt another way ("strength-training-basics" for "Strength training
    # basics") is not absent from it.
    mine = {_spelling(n) for n in by_name}
    absent = sorted(n for n in other_names if _spelling(n) not in mine)
    for name in rng.sample(absent, min(len(absent), max(1, len(notes) // 2))):
        out.append({"kind": "absent", "query": name, "note": None, "expected": []})
    return out


_TITLE_UNSAFE = re.compile(r'[\\/:*?"<>|#^\[\]]+')


def title_filename(title: str, taken: set[str]) -> str:
    """A note's file name from a paper title: characters files and links cannot hold dropped, at most
    100 characters (cut at a word), made unique by " (2)", " (3)", ..."""
    name = " ".join(_TITLE_UNSAFE.sub(" ", title).split()).rstrip(". ")
    if len(name) > 100:
        name = name[:100].rsplit(" ", 1)[0]
    name = name or "untitled"
    base, n = name, 1
    while name.casefold() in taken:
        n += 1
        name = f"{base} ({n})"
    taken.add(name.casefold())
    return name


def scifact_vault(vault: Path, folder: Path, seed: int = 7) -> list[dict[str, Any]]:
    """Write a vault of paper notes from SciFact; return its claim queries.

    The notes: every abstract a test claim cites and SCIFACT_OTHERS others (seeded), each named
    after its title with the abstract as its body. One `claim` query per test claim, whose right
    first results are the abstracts its qrels cite.
    """
    from benchmarks.quality import load_beir

    data = load_beir(folder)
    cited = sorted({d for rel in data.qrels.values() for d in rel if d in data.corpus})
    others = sorted(set(data.corpus) - set(cited))
    picked = cited + random.Random(seed).sample(others, min(SCIFACT_OTHERS, len(others)))
    if vault.exists():
        shutil.rmtree(vault)
    (vault / "papers").mkdir(parents=True)
    taken: set[str] = set()
    rel_of: dict[str, str] = {}
    for doc_id in picked:
        title, text = data.corpus[doc_id]
        rel = f"papers/{title_filename(title, taken)}.md"
        (vault / rel).write_text(text.strip() + "\n", encoding="utf-8")
        rel_of[doc_id] = rel
    return [
        {
            "kind": "claim",
            "query": text,
            "note": None,
            "expected": [rel_of[d] for d in data.qrels[qid] if d in rel_of],
        }
        for qid, text in data.queries.items()
    ]


def run(
    vault: Path, queries: list[dict[str, Any]], cache: Path, jsonl: Path, label: str
) -> list[dict[str, Any]]:
    """Every query through the default pipeline; one record each (appended to `jsonl`)."""
    from benchmarks.quality import open_vault_index
    from explorer.engine import make_pipeline

    index, settings, _info = open_vault_index(vault, {"index.cache_dir": str(cache)}, embeddings=True)
    pipeline = make_pipeline(index, settings)
    records = []
    with jsonl.open("a", encoding="utf-8") as fh:
        for q in queries:
            res = pipeline.search(q["query"], k=10, record=False)
            ranked = [r.document_path for r in res.results if r.source == "search"]
            rec = {
                "vault": label,
                **q,
                "top": ranked[:3],
                "right": bool(ranked) and ranked[0] in q["expected"],
                "score": res.quality.score,
                "level": res.quality.level,
                "no_good_match": bool(res.quality.factors.get("no_good_match")),
                "matched": res.quality.factors.get("matched"),
                "factors": {
                    k: v for k, v in res.quality.factors.items() if isinstance(v, (int, float, bool))
                },
                "scores": [round(r.score, 6) for r in res.results if r.source == "search"][:10],
                "relevances": [r.relevance for r in res.results if r.source == "search"][:10],
            }
            records.append(rec)
            fh.write(json.dumps(rec) + "\n")
    index.close()
    return records


def rates(
    records: Sequence[dict[str, Any]], high: float | None = None, medium: float | None = None
) -> dict[str, Any]:
    """Shares of wrong first results said "high" and right ones said "low" (levels as recorded, or by thresholds)."""

    def level(r: dict[str, Any]) -> str:
        if high is None or medium is None:
            return r["level"]
        return "high" if r["score"] >= high else "medium" if r["score"] >= medium else "low"

    wrong = [r for r in records if not r["right"]]
    right = [r for r in records if r["right"]]
    return {
        "n": len(records),
        "right": len(right),
        "wrong": len(wrong),
        "wrong_high": _share(level(r) == "high" for r in wrong),
        "right_low": _share(level(r) == "low" for r in right),
        "right_high": _share(level(r) == "high" for r in right),
        "high_right": _share(r["right"] for r in records if level(r) == "high"),
        "low_right": _share(r["right"] for r in records if level(r) == "low"),
        "wrong_flagged": _share(r["no_good_match"] for r in wrong),
        "right_flagged": _share(r["no_good_match"] for r in right),
    }


def choose(records: Sequence[dict[str, Any]], target: float = TARGET) -> tuple[float, float]:
    """(high, medium) that meet the marks in *every* vault of `records`: the lowest `high` at which each
    vault's wrong first results say high at most `target` of the time, the highest `medium` at which
    each vault's right ones say low at most `target` of the time (scores on a 0.01 grid; medium never
    above high)."""
    grid = [i / 100 for i in range(101)]
    highs, mediums = [], []
    for vault in dict.fromkeys(r["vault"] for r in records):
        wrong = [r["score"] for r in records if r["vault"] == vault and not r["right"]]
        right = [r["score"] for r in records if r["vault"] == vault and r["right"]]
        highs.append(next((t for t in grid if sum(s >= t for s in wrong) <= target * len(wrong)), 1.0))
        mediums.append(
            max((t for t in grid if sum(s < t for s in right) <= target * len(right)), default=0.0)
        )
    high, medium = max(highs, default=1.0), min(mediums, default=0.0)
    return high, min(medium, high)


def locomo_records(path: Path) -> list[dict[str, Any]]:
    """LoCoMo questions (explorer row) as level records: right when the first turn is evidence."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        r = json.loads(line) if line.strip() else None
        if not r or r.get("row") != "explorer" or (r["category"] != 5 and not r["evidence"]):
            continue
        right = r["category"] != 5 and bool(r["ranked"]) and r["ranked"][0] in r["evidence"]
        out.append(
            {
                "vault": r["qid"].split("#")[0],
                "family": "conversation",
                "kind": "locomo",
                "right": right,
                "score": r["quality"],
                "level": r["level"],
                "no_good_match": r["no_good_match"],
            }
        )
    return out


def _level_of(r: dict[str, Any], high: float, medium: float) -> str:
    return "high" if r["score"] >= high else "medium" if r["score"] >= medium else "low"


def _pooled(records: list[dict[str, Any]], chosen: dict[str, Any]) -> dict[str, Any]:
    """Rates over every vault of a kind, each scored at the thresholds chosen without it."""
    relabelled = [
        {**r, "level": _level_of(r, *chosen[r["vault"]]["chosen"])} for r in records if r["vault"] in chosen
    ]
    return rates(relabelled)


def _share(values: Any) -> float | None:
    vals = [float(v) for v in values]
    return round(sum(vals) / len(vals), 4) if vals else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.levels", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default bench-out/)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the generated vault")
    parser.add_argument("--tag", default="", help="suffix of the output file names")
    parser.add_argument(
        "--scifact",
        type=Path,
        default=DEFAULT_SCIFACT,
        help="BEIR SciFact folder of the third vault (default ../shared/bench/scifact)",
    )
    parser.add_argument("--no-scifact", action="store_true", help="the two other notes vaults only")
    parser.add_argument(
        "--locomo", type=Path, default=None, help="per-question records of benchmarks.locomo (explorer row)"
    )
    args = parser.parse_args(argv)
    if args.no_scifact:
        args.scifact = None
    offline_environment()
    work = args.out / "levels"
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
    vaults = {"sample_vault": sample, f"generated (seed {args.seed})": generated}
    extra: dict[str, list[dict[str, Any]]] = {}
    if args.scifact is not None:
        papers = work / "scifact-papers"
        extra["SciFact papers"] = scifact_vault(papers, args.scifact, args.seed)
        vaults["SciFact papers"] = papers
    names = {label: {rel.rsplit("/", 1)[-1][:-3] for rel in _notes(v)} for label, v in vaults.items()}
    suffix = f"-{args.tag}" if args.tag else ""
    jsonl = args.out / f"levels{suffix}.jsonl"
    jsonl.parent.mkdir(parents=True, exist_ok=True)
    jsonl.write_text("", encoding="utf-8")
    records: list[dict[str, Any]] = []
    for label, vault in vaults.items():
        other = set().union(*(n for lab, n in names.items() if lab != label))
        queries = queries_for(vault, other) + extra.get(label, [])
        log(f"{label}: {len(queries)} queries")
        records += run(vault, queries, work / f"cache-{vault.name}", jsonl, label)
    report: dict[str, Any] = {"machine": machine(), "vaults": {}, "kinds": {}}
    table = []
    for label in vaults:
        recs = [r for r in records if r["vault"] == label]
        report["vaults"][label] = rates(recs)
        for kind in KINDS:
            sub = [r for r in recs if r["kind"] == kind]
            if sub:
                report["kinds"][f"{label} / {kind}"] = rates(sub)
                x = report["kinds"][f"{label} / {kind}"]
                table.append(
                    [
                        label,
                        kind,
                        x["n"],
                        x["right"],
                        pct(x["wrong_high"]),
                        pct(x["right_low"]),
                        pct(x["wrong_flagged"]),
                        pct(x["right_flagged"]),
                    ]
                )
        x = report["vaults"][label]
        table.append(
            [
                f"**{label}**",
                "all",
                x["n"],
                x["right"],
                pct(x["wrong_high"]),
                pct(x["right_low"]),
                pct(x["wrong_flagged"]),
                pct(x["right_flagged"]),
            ]
        )
    print(
        markdown_table(
            [
                "vault",
                "kind",
                "queries",
                "right first",
                "wrong said high",
                "right said low",
                "wrong flagged",
                "right flagged",
            ],
            table,
        )
    )
    for r in records:
        r["family"] = "notes"
    if args.locomo is not None:
        records += locomo_records(args.locomo)
    # Thresholds leaving one vault out: chosen on the others of its kind, scored on it.
    loo = []
    for label in dict.fromkeys(r["vault"] for r in records):
        family = next(r["family"] for r in records if r["vault"] == label)
        train = [r for r in records if r["vault"] != label and r["family"] == family]
        test = [r for r in records if r["vault"] == label]
        high, medium = choose(train)
        own = choose(test)
        x, y = rates(test, high, medium), rates(test, *own)
        report.setdefault("leave_one_vault_out", {})[label] = {
            "chosen": [high, medium],
            "left_out": x,
            "in_sample": [*own],
            "in_sample_rates": y,
        }
        loo.append(
            [
                label,
                f"{high:.2f} / {medium:.2f}",
                pct(x["wrong_high"]),
                pct(x["right_low"]),
                f"{own[0]:.2f} / {own[1]:.2f}",
                pct(y["wrong_high"]),
                pct(y["right_low"]),
            ]
        )
    for family in dict.fromkeys(r["family"] for r in records):
        fam = [r for r in records if r["family"] == family]
        left = _pooled(fam, report["leave_one_vault_out"])
        report.setdefault("pooled", {})[family] = {
            "left_out": left,
            "in_sample": [*choose(fam)],
            "in_sample_rates": rates(fam, *choose(fam)),
            "n": len(fam),
        }
        loo.append(
            [
                f"**all {family} (pooled)**",
                "",
                pct(left["wrong_high"]),
                pct(left["right_low"]),
                "{:.2f} / {:.2f}".format(*choose(fam)),
                pct(report["pooled"][family]["in_sample_rates"]["wrong_high"]),
                pct(report["pooled"][family]["in_sample_rates"]["right_low"]),
            ]
        )
    print()
    print(
        markdown_table(
            [
                "left-out vault",
                "high / medium chosen on the others of its kind",
                "wrong said high",
                "right said low",
                "in-sample high / medium",
                "wrong said high",
                "right said low",
            ],
            loo,
        )
    )
    path = args.out / f"levels{suffix}.json"
    write_json(path, report)
    log(f"wrote {path} and {jsonl}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
