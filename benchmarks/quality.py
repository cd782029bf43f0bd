r"""Retrieval quality on a BEIR dataset: the explorer's pipeline stage by stage against rank_bm25 and MiniLM alone.

Run with ``python -m benchmarks.quality --dataset DIR``. DIR is a BEIR-format folder
(``corpus.jsonl``, ``queries.jsonl``, ``qrels-test.tsv`` or ``qrels/test.tsv``). The corpus is
written as a vault (one note per document: ``# Title`` then the text, file named after the
document id) into a persistent work folder, indexed by the real indexer (vectors are cached in
its ``.explorer/``, so only the first run embeds), and every test query is run offline through
each row below. nDCG@10, Recall@100 and MRR@10 come from ranx; latency is per query.

Rows:
    rank_bm25_ws  rank_bm25.BM25Okapi, lower-case whitespace split of title + text
    rank_bm25_words  rank_bm25.BM25Okapi, lower-case \w+ words of title + text
    rank_bm25     rank_bm25.BM25Okapi over explorer.text.tokenize of the same text
    bm25          the index's own BM25 (shards, best shard per note)
    dense         the index's dense vectors alone (shards, best shard per note, no threshold)
    hybrid        SearchPipeline pass 1: terms, BM25 + dense per term, RRF (no two-pass, no rerank)
    two_pass      hybrid + the analysis and second pass
    full          the default pipeline (make_pipeline defaults: two-pass and rerank as configured)
    two_pass_k15, full_k15  the same at the default result count (search.top_k, 15), as the app
                  and CLI run them: the reranker then sees 15 candidates, not 100. Their
                  Recall@100 column is recall within those 15 results.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import (
    DEFAULT_OUT,
    log,
    machine,
    markdown_table,
    offline_environment,
    summary,
    write_json,
)

ROWS = (
    "rank_bm25_ws",
    "rank_bm25_words",
    "rank_bm25",
    "bm25",
    "dense",
    "hybrid",
    "two_pass",
    "full",
    "two_pass_k15",
    "full_k15",
)
DENSE_ROWS = frozenset({"dense"})
METRICS = ("ndcg@10", "recall@100", "mrr@10")
DEPTH = 100
#: Shards fetched by the single-retriever rows before they are folded into notes.
SHARD_DEPTH = 1000

#: Settings ablations: (name, row, overrides). Each runs its row with these settings.
ABLATIONS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("defaults", "hybrid", {}),
    ("rrf_k 20", "hybrid", {"experimental.rrf_k": 20}),
    ("rrf_k 100", "hybrid", {"experimental.rrf_k": 100}),
    ("dense_threshold 0.0", "hybrid", {"experimental.dense_threshold": 0.0}),
    ("dense_threshold 0.2", "hybrid", {"experimental.dense_threshold": 0.2}),
    ("dense_threshold 0.3", "hybrid", {"experimental.dense_threshold": 0.3}),
    ("candidates 200", "hybrid", {"experimental.candidates": 200}),
    (
        "dense_threshold 0.2, candidates 200",
        "hybrid",
        {"experimental.dense_threshold": 0.2, "experimental.candidates": 200},
    ),
    ("dense_weight 1.5", "hybrid", {"experimental.dense_weight": 1.5}),
    ("bm25_weight 1.5", "hybrid", {"experimental.bm25_weight": 1.5}),
    (
        "dense_threshold 0.2, candidates 200",
        "full",
        {"experimental.dense_threshold": 0.2, "experimental.candidates": 200},
    ),
    ("reranker on", "full", {"rerank.enabled": True}),
    (
        "reranker on, no time budget",
        "full",
        {
            "rerank.enabled": True,
            "experimental.rerank_pass1_timeout_ms": 0,
            "experimental.rerank_pass2_timeout_ms": 0,
        },
    ),
    ("reranker on", "full_k15", {"rerank.enabled": True}),
)


@dataclass(frozen=True, slots=True)
class Beir:
    """A BEIR dataset's test split."""

    name: str
    """Folder name, used for output files."""
    corpus: dict[str, tuple[str, str]]
    """Document id -> (title, text)."""
    queries: dict[str, str]
    """Test query id -> text, in qrels order."""
    qrels: dict[str, dict[str, int]]
    """Query id -> {document id: relevance > 0}."""


@dataclass(frozen=True, slots=True)
class RowResult:
    """One row's ranked lists and latencies."""

    run: dict[str, list[str]]
    """Query id -> document ids, best first (at most DEPTH)."""
    latency_ms: list[float]
    """Per query wall time."""
    extra: dict[str, Any]
    """Row-specific counters (e.g. how often pass 2 ran)."""


# -- dataset and vault ---------------------------------------------------------------------
def load_beir(folder: Path, limit_queries: int | None = None) -> Beir:
    """Read a BEIR folder; only queries with a relevant document in the test qrels are kept."""
    corpus: dict[str, tuple[str, str]] = {}
    with (folder / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                doc = json.loads(line)
                corpus[str(doc["_id"])] = (str(doc.get("title") or ""), str(doc.get("text") or ""))
    all_queries: dict[str, str] = {}
    with (folder / "queries.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                q = json.loads(line)
                all_queries[str(q["_id"])] = str(q["text"])
    qrels_path = folder / "qrels-test.tsv"
    if not qrels_path.is_file():
        qrels_path = folder / "qrels" / "test.tsv"
    qrels: dict[str, dict[str, int]] = {}
    with qrels_path.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3 or (i == 0 and not parts[2].strip().lstrip("-").isdigit()):
                continue
            qid, did, rel = parts[0], parts[1], int(parts[2])
            if rel > 0 and qid in all_queries:
                qrels.setdefault(qid, {})[did] = rel
    qids = list(qrels)
    if limit_queries:
        qids = qids[:limit_queries]
    return Beir(folder.name, corpus, {q: all_queries[q] for q in qids}, {q: qrels[q] for q in qids})


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def doc_filename(doc_id: str) -> str:
    """A file name for a document id: safe characters kept, others replaced, made unique by a suffix."""
    safe = _UNSAFE.sub("_", doc_id).strip(".") or "doc"
    if safe != doc_id:
        safe = f"{safe}-{sum(map(ord, doc_id)) % 99991:05d}"
    return safe[:150] + ".md"


def note_text(title: str, text: str) -> str:
    """The note of one document: `# Title`, a blank line, the text."""
    title = " ".join(title.split())
    body = text.strip()
    return f"# {title}\n\n{body}\n" if title else f"{body}\n"


def write_vault(data: Beir, vault: Path) -> dict[str, str]:
    """Write the corpus as notes (only files whose content differs); returns note path -> document id.

    Notes of documents no longer in the corpus are deleted, so the vault mirrors the corpus.
    """
    vault.mkdir(parents=True, exist_ok=True)
    mapping: dict[str, str] = {}
    written = 0
    for doc_id, (title, text) in data.corpus.items():
        name = doc_filename(doc_id)
        if name in mapping:
            raise ValueError(f"two document ids map to {name}")
        mapping[name] = doc_id
        path = vault / name
        content = note_text(title, text)
        try:
            if path.read_text(encoding="utf-8") == content:
                continue
        except OSError:
            pass
        path.write_text(content, encoding="utf-8")
        written += 1
    for stale in vault.glob("*.md"):
        if stale.name not in mapping:
            stale.unlink()
    log(f"vault {vault}: {len(mapping)} notes ({written} written)")
    return mapping


# -- rows ----------------------------------------------------------------------------------
def _fold_to_notes(
    items: Sequence[tuple[str, float]], shard_path: Callable[[str], str | None], mapping: dict[str, str]
) -> list[str]:
    """Shard ranking -> document ids, best shard per note, first DEPTH."""
    out: list[str] = []
    seen: set[str] = set()
    for node_id, _score in items:
        path = shard_path(node_id)
        if path is None or path in seen:
            continue
        seen.add(path)
        doc = mapping.get(path)
        if doc is not None:
            out.append(doc)
        if len(out) >= DEPTH:
            break
    return out


class RowTooSlow(RuntimeError):
    """A row's projected wall time exceeds its budget; the message says by how much."""


#: Queries timed before a budgeted row's total time is projected.
PROBE_QUERIES = 10


def _timed_run(
    queries: dict[str, str],
    fn: Callable[[str], tuple[list[str], dict[str, Any]]],
    label: str,
    budget_s: float | None = None,
) -> RowResult:
    """Run `fn` over every query, timing each. With `budget_s`, the first PROBE_QUERIES queries
    project the row's total time; beyond the budget RowTooSlow is raised (nothing else is run)."""
    run: dict[str, list[str]] = {}
    lat: list[float] = []
    extra: dict[str, Any] = {}
    t_row = time.perf_counter()
    for i, (qid, text) in enumerate(queries.items()):
        t = time.perf_counter()
        docs, info = fn(text)
        lat.append((time.perf_counter() - t) * 1000)
        run[qid] = docs
        for key, value in info.items():
            extra[key] = extra.get(key, 0) + value
        if budget_s is not None and i + 1 == PROBE_QUERIES < len(queries):
            projected = (time.perf_counter() - t_row) / PROBE_QUERIES * len(queries)
            if projected > budget_s:
                raise RowTooSlow(
                    f"projected {projected:.0f} s for {len(queries)} queries (from the first "
                    f"{PROBE_QUERIES}) > budget {budget_s:.0f} s"
                )
        if (i + 1) % 50 == 0:
            log(f"  {label}: {i + 1}/{len(queries)} queries ({time.perf_counter() - t_row:.0f} s)")
    return RowResult(run, lat, extra)


def rank_bm25_row(data: Beir, tokenizer: Callable[[str], list[str]], label: str) -> RowResult:
    """rank_bm25.BM25Okapi over title + text of every document, tokenized by `tokenizer`."""
    import numpy as np
    from rank_bm25 import BM25Okapi

    ids = list(data.corpus)
    t = time.perf_counter()
    bm25 = BM25Okapi([tokenizer(f"{title} {text}") for title, text in data.corpus.values()])
    build = time.perf_counter() - t

    def one(query: str) -> tuple[list[str], dict[str, Any]]:
        scores = bm25.get_scores(tokenizer(query))
        top = np.argsort(-scores, kind="stable")[:DEPTH]
        return [ids[i] for i in top if scores[i] > 0], {}

    row = _timed_run(data.queries, one, label)
    row.extra["build_s"] = round(build, 2)
    return row


def index_bm25_row(index: Any, data: Beir, mapping: dict[str, str]) -> RowResult:
    """The index's own BM25 alone: `index.bm25.top` over shards, folded to notes."""
    from explorer.text.tokenize import tokenize

    def path_of(node_id: str) -> str | None:
        shard = index.shards.get(node_id)
        return shard.path if shard else None

    def one(query: str) -> tuple[list[str], dict[str, Any]]:
        items = index.bm25.top(tokenize(query), SHARD_DEPTH)
        return _fold_to_notes(items, path_of, mapping), {}

    return _timed_run(data.queries, one, "bm25")


def index_dense_row(index: Any, data: Beir, mapping: dict[str, str]) -> RowResult:
    """The index's dense vectors alone: query embedding + cosine top-k over shards, folded to notes."""

    def path_of(node_id: str) -> str | None:
        shard = index.shards.get(node_id)
        return shard.path if shard else None

    def one(query: str) -> tuple[list[str], dict[str, Any]]:
        vec = index.encode_query(query)
        if vec is None:
            return [], {}
        items = index.dense.search(vec, SHARD_DEPTH)
        return _fold_to_notes(items, path_of, mapping), {}

    return _timed_run(data.queries, one, "dense")


def pipeline_row(
    pipeline: Any,
    data: Beir,
    mapping: dict[str, str],
    label: str,
    k: int | None = DEPTH,
    budget_s: float | None = None,
    **kwargs: Any,
) -> RowResult:
    """SearchPipeline.search(query, k=k, **kwargs); results mapped to document ids in order."""
    from explorer.search.schema import RerankInfo

    def one(query: str) -> tuple[list[str], dict[str, Any]]:
        res = pipeline.search(query, k=k, record=False, **kwargs)
        docs: list[str] = []
        for r in res.results:
            doc = mapping.get(r.document_path)
            if doc is not None and doc not in docs:
                docs.append(doc)
        rr = res.rerank if res.rerank is not None else RerankInfo()
        info = {
            "pass2_ran": int(len(res.passes) > 1),
            "rerank_applied": int(rr.applied),
            "rerank_pass1_timed_out": int(rr.pass1.timed_out),
            "rerank_pass2_applied": int(rr.pass2.applied),
            "rerank_pass2_timed_out": int(rr.pass2.timed_out),
            "rerank_early_exit": int(rr.early_exit),
            "rerank_error": int(bool(rr.error)),
        }
        return docs[:DEPTH], info

    return _timed_run(data.queries, one, label, budget_s)


def builtin_metrics(qrels: dict[str, int], ranked: Sequence[str]) -> dict[str, float]:
    """nDCG@10, Recall@100 and MRR@10 of one query, in plain Python, as ranx defines them by default.

    ranx's `ndcg` is Järvelin's formulation: gain = relevance, discount log2(rank + 1) (its
    `ndcg_burges` uses 2^rel - 1; the two agree on binary judgments such as SciFact's).
    """
    import math

    gains = [qrels.get(doc, 0) for doc in ranked[:10]]
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains))
    ideal = sorted((r for r in qrels.values() if r > 0), reverse=True)[:10]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    relevant = {d for d, r in qrels.items() if r > 0}
    found = len(relevant & set(ranked[:100]))
    rr = next((1.0 / (i + 1) for i, doc in enumerate(ranked[:10]) if doc in relevant), 0.0)
    return {
        "ndcg@10": dcg / idcg if idcg else 0.0,
        "recall@100": found / len(relevant) if relevant else 0.0,
        "mrr@10": rr,
    }


def score(data: Beir, row: RowResult, scorer: str = "ranx") -> tuple[dict[str, float], dict[str, float]]:
    """(mean metrics, per-query nDCG@10) of a row, by ranx (or by `builtin_metrics`)."""
    if scorer == "builtin":
        per = {q: builtin_metrics(rels, row.run.get(q, [])) for q, rels in data.qrels.items()}
        means = {m: round(sum(p[m] for p in per.values()) / len(per), 4) if per else 0.0 for m in METRICS}
        return means, {q: round(p["ndcg@10"], 4) for q, p in per.items()}
    from ranx import Qrels, Run, evaluate

    run_dict = {qid: {doc: float(DEPTH - i) for i, doc in enumerate(docs)} for qid, docs in row.run.items()}
    # ranx rejects a query with an empty ranking: give it a dummy document that is never relevant.
    for qid in data.queries:
        if not run_dict.get(qid):
            run_dict[qid] = {"\u2205-no-result": 1.0}
    qrels = Qrels({q: dict(d) for q, d in data.qrels.items()})
    run = Run(run_dict)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        means = evaluate(qrels, run, list(METRICS), make_comparable=True)
    per_query = {q: round(float(v), 4) for q, v in run.scores["ndcg@10"].items()}
    return {m: round(float(v), 4) for m, v in means.items()}, per_query


# -- orchestration -------------------------------------------------------------------------
def open_vault_index(
    vault: Path, overrides: dict[str, Any], embeddings: bool
) -> tuple[Any, Any, dict[str, Any]]:
    """Index the vault with the real indexer (embedding what the cache lacks); (index, settings, report)."""
    from explorer.config import load_settings
    from explorer.engine import open_index

    flags = dict(overrides)
    if not embeddings:
        flags["index.embeddings"] = False
    settings = load_settings(vault, flags)
    t = time.perf_counter()
    index, _report = open_index(vault, settings)
    opened = time.perf_counter() - t
    pending = len(index.pending()) if embeddings else 0
    t = time.perf_counter()
    embedded = 0
    if embeddings:
        last = [0.0]

        def progress(_stage: str, done: int, total: int) -> None:
            now = time.perf_counter()
            if now - last[0] > 30 or done == total:
                last[0] = now
                log(f"  embedding {done}/{total} distinct shard texts ({now - t:.0f} s)")

        embedded = index.embed_pending(progress=progress)
    embed_s = time.perf_counter() - t
    st = index.stats()
    info = {
        "notes": st.notes,
        "shards": st.shards,
        "vectors": st.embedded,
        "pending_before": pending,
        "embedded_now": embedded,
        "open_s": round(opened, 2),
        "embed_s": round(embed_s, 2),
        "embed_rate_per_s": round(embedded / embed_s, 1) if embedded and embed_s else None,
        "model_state": st.model_state,
        "runtime": st.runtime,
    }
    log(f"index: {info}")
    return index, settings, info


def run_rows(
    rows: Sequence[str],
    data: Beir,
    index: Any,
    settings: Any,
    mapping: dict[str, str],
    on_row: Callable[[str, RowResult], None] | None = None,
) -> dict[str, RowResult]:
    """Run the named rows; pipeline rows share one make_pipeline pipeline. `on_row(name, result)`
    is called as each row finishes."""
    from explorer.engine import make_pipeline
    from explorer.text.tokenize import tokenize

    out: dict[str, RowResult] = {}
    pipeline = None
    dense = index.model_state != "off"
    for name in rows:
        if name in DENSE_ROWS and not dense:
            log(f"row {name}: skipped (embeddings off)")
            continue
        log(f"row {name} ...")
        if name == "rank_bm25_ws":
            out[name] = rank_bm25_row(data, lambda s: s.lower().split(), name)
        elif name == "rank_bm25_words":
            out[name] = rank_bm25_row(data, lambda s: re.findall(r"\w+", s.lower()), name)
        elif name == "rank_bm25":
            out[name] = rank_bm25_row(data, tokenize, name)
        elif name == "bm25":
            out[name] = index_bm25_row(index, data, mapping)
        elif name == "dense":
            out[name] = index_dense_row(index, data, mapping)
        else:
            if pipeline is None:
                pipeline = make_pipeline(index, settings)
                pipeline.search("warm up the model", k=5, two_pass=False, rerank=False, record=False)
            if name == "hybrid":
                out[name] = pipeline_row(pipeline, data, mapping, name, two_pass=False, rerank=False)
            elif name == "two_pass":
                out[name] = pipeline_row(pipeline, data, mapping, name, two_pass=True, rerank=False)
            elif name == "full":
                out[name] = pipeline_row(pipeline, data, mapping, name)
            elif name == "two_pass_k15":
                out[name] = pipeline_row(pipeline, data, mapping, name, k=None, two_pass=True, rerank=False)
            elif name == "full_k15":
                out[name] = pipeline_row(pipeline, data, mapping, name, k=None)
            else:
                raise ValueError(f"unknown row {name!r} (known: {', '.join(ROWS)})")
        if on_row is not None:
            on_row(name, out[name])
    return out


def run_ablations(
    ablations: Sequence[tuple[str, str, dict[str, Any]]],
    data: Beir,
    index: Any,
    settings: Any,
    mapping: dict[str, str],
    scorer: str = "ranx",
    budget_s: float | None = None,
    on_done: Callable[[list[dict[str, Any]]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run each (name, row, overrides) with a fresh pipeline built from the overridden settings.

    An ablation whose projected time exceeds `budget_s` is not run: its entry says `skipped` and
    why. `on_done(results so far)` is called after each one, so a stopped run keeps them.
    """
    from explorer.engine import make_pipeline

    out = []
    for name, row, overrides in ablations:
        s2 = settings.with_overrides(overrides, origin=f"ablation {name}")
        pipe = make_pipeline(index, s2)
        kwargs: dict[str, Any] = (
            {"two_pass": False, "rerank": False}
            if row == "hybrid"
            else ({"two_pass": True, "rerank": False} if row == "two_pass" else {})
        )
        if row == "full_k15":
            kwargs["k"] = None
        log(f"ablation {name} ({row}) ...")
        try:
            res = pipeline_row(pipe, data, mapping, name, budget_s=budget_s, **kwargs)
        except RowTooSlow as exc:
            log(f"  {name}: skipped, {exc}")
            out.append({"name": name, "row": row, "overrides": overrides, "skipped": str(exc)})
        else:
            means, _ = score(data, res, scorer)
            out.append(
                {
                    "name": name,
                    "row": row,
                    "overrides": overrides,
                    **means,
                    "latency_ms": summary(res.latency_ms),
                    "extra": res.extra,
                }
            )
            log(f"  {name}: {means}")
        if on_done is not None:
            on_done(out)
    return out


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """`section.key=value` strings -> dict (values coerced by Settings)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: write section.key=value")
        out[key.strip()] = value.strip()
    return out


def parse_ablation(text: str) -> tuple[str, str, dict[str, Any]]:
    """`row:section.key=value,section.key=value` -> an ablation named after its overrides."""
    row, _, rest = text.partition(":")
    if row not in ("hybrid", "two_pass", "full", "full_k15"):
        raise SystemExit(f"--ablation {text!r}: start with hybrid:, two_pass:, full: or full_k15:")
    overrides = parse_overrides([p for p in rest.split(",") if p.strip()]) if rest else {}
    return (rest or "defaults", row, overrides)


def main(argv: Sequence[str] | None = None) -> int:
    """Index the dataset, run the rows (and ablations), print the table and write JSON."""
    offline_environment()
    parser = argparse.ArgumentParser(prog="python -m benchmarks.quality", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dataset", type=Path, required=True, help="BEIR folder (corpus.jsonl, queries.jsonl, qrels)"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default bench-out/)")
    parser.add_argument(
        "--work-dir", type=Path, default=None, help="vault folder (default OUT/<dataset>-vault; reused)"
    )
    parser.add_argument("--limit-queries", type=int, default=None, help="first N test queries only")
    parser.add_argument(
        "--rows", default=",".join(ROWS), help=f"comma list of rows (default all: {','.join(ROWS)})"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="settings override for every row",
    )
    parser.add_argument("--no-embeddings", action="store_true", help="BM25 only (dense rows skipped)")
    parser.add_argument("--ablations", action="store_true", help="also run the built-in settings ablations")
    parser.add_argument(
        "--ablation",
        action="append",
        default=[],
        metavar="ROW:KEY=V,KEY=V",
        help="an extra ablation, e.g. hybrid:search.max_terms=0,experimental.rrf_k=20",
    )
    parser.add_argument("--tag", default="", help="suffix of the output file name")
    parser.add_argument(
        "--ablation-budget",
        type=float,
        default=1800.0,
        metavar="SECONDS",
        help="skip (and mark) an ablation whose projected time exceeds this (default 1800)",
    )
    parser.add_argument(
        "--scorer",
        choices=("ranx", "builtin"),
        default="ranx",
        help="metric implementation (builtin: plain Python, same formulas, no numba start-up)",
    )
    args = parser.parse_args(argv)

    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown} (known: {', '.join(ROWS)})")
    t_all = time.perf_counter()
    data = load_beir(args.dataset, args.limit_queries)
    log(f"{data.name}: {len(data.corpus)} documents, {len(data.queries)} test queries")
    vault = args.work_dir or (args.out / f"{data.name}-vault")
    mapping = write_vault(data, vault)
    overrides = parse_overrides(args.set)
    index, settings, index_info = open_vault_index(vault, overrides, not args.no_embeddings)

    table_rows: list[list[Any]] = []
    report_rows: dict[str, Any] = {}
    cross_check: dict[str, float] = {}
    ablation_out: list[dict[str, Any]] = []
    suffix = f"-{args.tag}" if args.tag else ""
    out_file = args.out / f"quality-{data.name}{suffix}.json"

    def report(complete: bool) -> dict[str, Any]:
        return {
            "benchmark": "quality",
            "dataset": str(args.dataset),
            "complete": complete,
            "documents": len(data.corpus),
            "queries": len(data.queries),
            "vault": str(vault),
            "settings_overrides": overrides,
            "index": index_info,
            "rows": report_rows,
            "ablations": ablation_out,
            "scorer": args.scorer,
            "ranx_vs_builtin_max_abs_diff": cross_check,
            # an engine backend's calls by kind over the whole run (explorer.index.milvus.Engine)
            "engine_calls": dict(getattr(getattr(index, "engine", None), "calls", {}) or {}),
            "machine": machine(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "wall_s": round(time.perf_counter() - t_all, 1),
        }

    def row_done(name: str, res: RowResult) -> None:
        means, per_query = score(data, res, args.scorer)
        if args.scorer == "ranx":
            plain, _ = score(data, res, "builtin")
            cross_check[name] = round(max(abs(plain[m] - means[m]) for m in METRICS), 6)
        lat = summary(res.latency_ms)
        report_rows[name] = {**means, "latency_ms": lat, "extra": res.extra, "per_query_ndcg@10": per_query}
        table_rows.append(
            [
                name,
                means["ndcg@10"],
                means["recall@100"],
                means["mrr@10"],
                f"{lat['median']:.1f}",
                f"{lat['p95']:.1f}",
            ]
        )
        write_json(out_file, report(False))  # a stopped run keeps every finished row

    def ablations_done(done: list[dict[str, Any]]) -> None:
        ablation_out[:] = done
        write_json(out_file, report(False))

    run_rows(rows, data, index, settings, mapping, on_row=row_done)
    ablations = list(ABLATIONS) if args.ablations else []
    ablations += [parse_ablation(a) for a in args.ablation]
    if ablations:
        run_ablations(
            ablations, data, index, settings, mapping, args.scorer, args.ablation_budget, ablations_done
        )
    index.close()

    headers = ["row", "nDCG@10", "Recall@100", "MRR@10", "p50 ms", "p95 ms"]
    print(
        f"\n{data.name}: {len(data.corpus)} documents, {len(data.queries)} queries, {index_info['shards']} shards\n"
    )
    print(markdown_table(headers, table_rows))
    if ablation_out:
        print()
        print(
            markdown_table(
                ["ablation", "row", "nDCG@10", "Recall@100", "MRR@10", "p50 ms", "p95 ms"],
                [
                    [
                        a["name"],
                        a["row"],
                        a["ndcg@10"],
                        a["recall@100"],
                        a["mrr@10"],
                        f"{a['latency_ms']['median']:.1f}",
                        f"{a['latency_ms']['p95']:.1f}",
                    ]
                    if "skipped" not in a
                    else [a["name"], a["row"], "skipped", a["skipped"], "-", "-", "-"]
                    for a in ablation_out
                ],
            )
        )
    final = report(True)
    write_json(out_file, final)
    log(f"wrote {out_file} ({final['wall_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
