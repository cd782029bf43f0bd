r"""Links removed: would a second ranking, fused with the writer's list, find the linked note sooner?

Run with ``python -m benchmarks.link_suggest_priors [VAULT ...]`` (the generated vault whose links
follow the text, then every vault named). The cases are those of ``benchmarks.link_suggest``
(each link of a paragraph, its links hidden: A keeps the link words, B removes them). For each
case the writer's own call runs once (``LinkSuggester.suggest``, 60 entries), and beside it these
rankings of the vault's notes are built from what the writer has at that moment:

- ``graph``: the note's local graph. The notes the rest of the note links to (its text outside
  the paragraph: 2 points), the notes linking to it (1 point), and every note those notes link to
  (1 point per path).
- ``l1``, ``b1``, ``hop``: the three parts of ``graph`` alone.
- ``nv``: the related search's query vector against a note-level vector (the mean of the note's
  shard vectors); ``nvp`` with the paragraph's vector alone, ``nvs`` with the sentence's alone.
- ``tf``: the query vector against the vector of the note's title and first paragraph.
- ``bm_rare``: BM25 on the paragraph's rarer half of words (by idf); ``bm_sent``: BM25 on the
  sentence at the cursor alone.

A ranking enters at weight ``w`` by reciprocal-rank fusion with the related part of the list
(weight 1, k = 60; named notes stay first); recall@5 as in ``benchmarks.link_suggest``. The weights
(one ranking at 0.1-2, and pairs of them) are chosen by leave-one-vault-out: each vault is scored
with the point best on the other vaults (their links found with words kept and removed, each
vault counted by its links, and each vault counted equally), beside its own best point.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import log, markdown_table, offline_environment, write_json
from benchmarks.link_suggest import K, add_vault_arguments, cases, vault_key, vaults_of

#: Reciprocal-rank fusion constant, as the search's.
RRF_K = 60
#: Entries of each ranking read.
DEPTH = 60
WEIGHTS = (0.1, 0.25, 0.5, 1.0, 2.0)
FEATURES = ("graph", "l1", "b1", "hop", "nv", "nvp", "nvs", "tf", "bm_rare", "bm_sent")
PAIRS = (
    ("graph", "nv"),
    ("graph", "tf"),
    ("graph", "bm_sent"),
    ("graph", "bm_rare"),
    ("graph", "nvs"),
    ("nv", "bm_sent"),
    ("bm_rare", "nv"),
    ("b1", "nv"),
    ("b1", "bm_sent"),
    ("l1", "hop"),
)


def rankings(vault: Path, cache: Path) -> list[dict[str, Any]]:
    """Every case of `vault` with the writer's list and the candidate rankings, both variants."""
    import numpy as np

    from benchmarks.quality import open_vault_index
    from explorer.engine import make_pipeline
    from explorer.search.writing.suggest import (
        _MDLINK,
        _WIKILINK,
        LinkSuggester,
        paragraph_bounds,
        paragraphs,
        plain_query,
        related_query,
        sentence_bounds,
    )
    from explorer.text.tokenize import tokenize
    from explorer.vault.parse import markdown_link_target

    index, settings, _info = open_vault_index(vault, {"index.cache_dir": str(cache)}, embeddings=True)
    sug = LinkSuggester(make_pipeline(index, settings))
    todo = cases(index)
    out: list[dict[str, Any]] = []
    with index.snapshot() as snap:
        graph = snap.links()
        paths = sorted(snap.notes)
        emb = sug.related.index.embedder()
        rows = []
        for p in paths:
            vs = [v for v in (snap.vector(n) for n in snap.shard_ids(p)) if v is not None]
            m = np.mean(vs, axis=0) if vs else np.zeros(emb.dim, dtype=np.float32)
            rows.append(m / max(float(np.linalg.norm(m)), 1e-9))
        note_vecs = np.array(rows, dtype=np.float32)
        heads = []
        for p in paths:
            note = snap.notes[p]
            body = note.text[note.body_start :]
            spans = paragraphs(body)
            first = plain_query(body[spans[0][0] : spans[0][1]])[:400] if spans else ""
            heads.append(f"{note.title}. {first}")
        head_vecs = emb.embedder.encode(heads)
        idf = snap.lexical.idf()

        def by_vector(matrix: Any, vec: Any) -> list[str]:
            return [paths[i] for i in np.argsort(-(matrix @ vec))[:DEPTH]]

        def bm25(words: list[str], own: str) -> list[str]:
            got: list[str] = []
            for node_id, _score in snap.bm25_top(list(dict.fromkeys(words)), 300):
                shard = snap.shards.get(node_id)
                if shard is not None and shard.path != own and shard.path not in got:
                    got.append(shard.path)
                if len(got) >= DEPTH:
                    break
            return got

        for n, case in enumerate(todo):
            row: dict[str, Any] = {"note": case["note"], "target": case["target"]}
            for variant in ("A", "B"):
                text, cursor = case[variant]
                items = [
                    (s.path, s.kind) for s in sug.suggest(text, cursor, path=case["note"], k=DEPTH).items
                ]
                start, end = paragraph_bounds(text, cursor)
                s_lo, s_hi = sentence_bounds(text, cursor, start, end)
                linked: list[str] = []
                for m in _WIKILINK.finditer(text):
                    if not start <= m.start() < end:
                        target = m.group(1).partition("|")[0].partition("#")[0].strip()
                        linked.append(graph.resolve(target, case["note"]) or "")
                for m in _MDLINK.finditer(text):
                    if not start <= m.start() < end:
                        dest = markdown_link_target(m.group(2))
                        linked.append(graph.resolve(dest[0], case["note"], True) or "" if dest else "")
                l1 = list(dict.fromkeys(t for t in linked if t and t != case["note"]))
                b1 = sorted({b.source for b in graph.backlinks(case["note"])} - {case["note"]})
                hop: dict[str, int] = {}
                for src in set(l1) | set(b1):
                    for _link, t in graph.outgoing(src):
                        if t and t not in (case["note"], src):
                            hop[t] = hop.get(t, 0) + 1
                qv = emb.encode([related_query(text, cursor, start, end, sug.scope)])[0]
                pv = emb.encode([plain_query(text[start:end]) or "."])[0]
                sv = emb.encode([plain_query(text[s_lo:s_hi]) or "."])[0]
                ptoks = tokenize(text[start:end])
                ranked_idf = sorted((idf.get(t, 0.0) for t in set(ptoks)), reverse=True)
                cut = ranked_idf[len(ranked_idf) // 2] if ranked_idf else 0.0
                rare = [t for t in ptoks if idf.get(t, 0.0) >= cut]
                stoks = tokenize(text[s_lo:s_hi])
                row[variant] = {
                    "items": items,
                    "l1": l1,
                    "b1": b1,
                    "hop": hop,
                    "nv": by_vector(note_vecs, qv),
                    "nvp": by_vector(note_vecs, pv),
                    "nvs": by_vector(note_vecs, sv),
                    "tf": by_vector(head_vecs, qv),
                    "bm_rare": bm25(rare, case["note"]) if rare else [],
                    "bm_sent": bm25(stoks, case["note"]) if stoks else [],
                }
            out.append(row)
            if n % 200 == 0:
                log(f"  {vault.name}: {n}/{len(todo)}")
    index.close()
    return out


def ranking(case: dict[str, Any], name: str) -> list[str]:
    """One candidate ranking of a case (variant already chosen)."""
    if name in ("graph", "hop"):
        score: dict[str, float] = {}
        if name == "graph":
            for p in case["l1"]:
                score[p] = score.get(p, 0) + 2
            for p in case["b1"]:
                score[p] = score.get(p, 0) + 1
        for p, c in case["hop"].items():
            score[p] = score.get(p, 0) + c
        return [p for p, _ in sorted(score.items(), key=lambda t: (-t[1], t[0]))]
    return list(case[name])


def top(row: dict[str, Any], variant: str, weights: dict[str, float]) -> list[str]:
    """The first K of the writer's list with `weights` of the rankings fused into its related part."""
    case = row[variant]
    named = [p for p, kind in case["items"] if kind == "mention"]
    rest = [p for p, kind in case["items"] if kind != "mention"]
    if not any(weights.values()):
        return (named + rest)[:K]
    score: dict[str, float] = {}
    for r, p in enumerate(rest):
        score[p] = score.get(p, 0.0) + 1.0 / (RRF_K + r)
    for name, w in weights.items():
        for r, p in enumerate(ranking(case, name)[:DEPTH]):
            score[p] = score.get(p, 0.0) + w / (RRF_K + r)
    order = [p for p, _ in sorted(score.items(), key=lambda t: -t[1]) if p != row["note"] and p not in named]
    return (named + order)[:K]


def grid() -> list[dict[str, float]]:
    """The points tried: nothing, each ranking at each weight, each pair at each pair of weights."""
    points: list[dict[str, float]] = [{}]
    points += [{f: w} for f in FEATURES for w in WEIGHTS]
    points += [{a: wa, b: wb} for a, b in PAIRS for wa in WEIGHTS for wb in WEIGHTS]
    return points


def evaluate(data: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Hits at every grid point per vault, and the leave-one-vault-out choices."""
    points = grid()
    hits = {
        name: [{v: sum(r["target"] in top(r, v, p) for r in rows) for v in ("A", "B")} for p in points]
        for name, rows in data.items()
    }
    links = {name: len(rows) for name, rows in data.items()}

    def rates(name: str, i: int) -> dict[str, float]:
        return {v: round(hits[name][i][v] / max(links[name], 1), 4) for v in ("A", "B")}

    out: dict[str, Any] = {"points": [str(p) for p in points], "vaults": {}}
    for name in data:
        others = [o for o in data if o != name]
        own = max(range(len(points)), key=lambda i: (hits[name][i]["A"] + hits[name][i]["B"], i == 0))
        by_links = max(
            range(len(points)),
            key=lambda i: (sum(hits[o][i]["A"] + hits[o][i]["B"] for o in others), i == 0),
        )
        equal = max(
            range(len(points)),
            key=lambda i: (
                sum((hits[o][i]["A"] + hits[o][i]["B"]) / max(links[o], 1) for o in others),
                i == 0,
            ),
        )
        out["vaults"][name] = {
            "links": links[name],
            "writer": rates(name, 0),
            "own_best": {"point": points[own], **rates(name, own)},
            "left_out_by_links": {"point": points[by_links], **rates(name, by_links)},
            "left_out_equal": {"point": points[equal], **rates(name, equal)},
            "single": {
                f: {str(w): rates(name, points.index({f: w}))["B"] for w in WEIGHTS} for f in FEATURES
            },
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.link_suggest_priors", description=__doc__.splitlines()[0]
    )
    add_vault_arguments(parser)
    args = parser.parse_args(argv)
    offline_environment()
    work = args.out / "link-suggest"
    vaults = vaults_of(args, work, ("text",))
    data = {}
    for name, vault in vaults:
        cache = (work / f"cache-{vault_key(vault)}").resolve()
        data[name] = rankings(vault, cache)
    res = evaluate(data)
    table = []
    for name, r in res["vaults"].items():
        table.append([name, r["links"], "writer's list", r["writer"]["A"], r["writer"]["B"]])
        for key, label in (
            ("own_best", "best point on this vault (in-sample)"),
            ("left_out_by_links", "point best on the other vaults (by links)"),
            ("left_out_equal", "point best on the other vaults (each vault equal)"),
        ):
            table.append([name, r["links"], f"{label}: {r[key]['point']}", r[key]["A"], r[key]["B"]])
    print(markdown_table(["vault", "links", "row", "recall@5 A", "recall@5 B"], table))
    single = []
    for f in FEATURES:
        single.append(
            [f]
            + [" / ".join(f"{r['single'][f][str(w)]:.3f}" for w in WEIGHTS) for r in res["vaults"].values()]
        )
    print()
    print(
        markdown_table(["ranking (B at weight " + "/".join(map(str, WEIGHTS)) + ")", *res["vaults"]], single)
    )
    write_json(args.out / "link_suggest_priors.json", res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
