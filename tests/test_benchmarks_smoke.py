"""Smoke test of the benchmark code: a 20-document BEIR folder through the quality benchmark, BM25 only."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

# benchmarks/ is a top-level folder of the repository, not part of the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import quality, speed
from benchmarks.common import markdown_table, percentile, summary

TOPICS = [
    ("hamster", "Hamster cages", "A hamster needs a deep cage with bedding and a wheel."),
    ("sourdough", "Sourdough starter", "Feed the sourdough starter flour and water every day."),
    ("telescope", "Telescope mirrors", "A reflecting telescope gathers light with a curved mirror."),
    ("espresso", "Espresso extraction", "Espresso extraction depends on grind size and pressure."),
    ("glacier", "Glacier retreat", "The glacier retreated two kilometres over the century."),
    ("bicycle", "Bicycle gears", "Bicycle gears trade cadence for torque on steep hills."),
    ("compost", "Compost heaps", "A compost heap turns kitchen scraps into humus."),
    ("violin", "Violin strings", "Violin strings are tuned in fifths: G, D, A and E."),
    ("mortgage", "Mortgage rates", "A fixed mortgage rate keeps the monthly payment steady."),
    ("volcano", "Volcano eruptions", "A volcano erupts when magma pressure breaks the crust."),
]


def _fake_beir(folder: Path) -> Path:
    """20 documents (two per topic, one with an id that is not a safe file name), 10 test queries."""
    folder.mkdir(parents=True)
    docs, queries, qrels = [], [], ["query-id\tcorpus-id\tscore"]
    for i, (word, title, text) in enumerate(TOPICS):
        docs.append({"_id": f"d{i}", "title": title, "text": text})
        docs.append(
            {
                "_id": f"x/{i}",
                "title": f"Notes {i}",
                "text": f"General remarks number {i} about daily life and {word}s.",
            }
        )
        queries.append({"_id": f"q{i}", "text": f"{word} {text.split()[-1].strip('.')}"})
        qrels.append(f"q{i}\td{i}\t1")
    queries.append({"_id": "unjudged", "text": "not in the qrels"})
    (folder / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n", encoding="utf-8")
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n", encoding="utf-8")
    (folder / "qrels-test.tsv").write_text("\n".join(qrels) + "\n", encoding="utf-8")
    return folder


def test_quality_benchmark_bm25_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = _fake_beir(tmp_path / "fake")
    out, vault = tmp_path / "out", tmp_path / "vault"
    argv = [
        "--dataset",
        str(dataset),
        "--out",
        str(out),
        "--work-dir",
        str(vault),
        "--no-embeddings",
        "--rows",
        "rank_bm25_ws,rank_bm25,bm25,dense,hybrid,two_pass",
        "--scorer",
        "builtin",
        "--ablation",
        "hybrid:search.max_terms=0",
    ]
    assert quality.main(argv) == 0

    notes = sorted(vault.glob("*.md"))
    assert len(notes) == 20
    assert (vault / "d0.md").read_text(encoding="utf-8").startswith("# Hamster cages\n\n")
    assert all("/" not in p.name for p in notes)

    report = json.loads((out / "quality-fake.json").read_text(encoding="utf-8"))
    assert report["queries"] == 10 and report["documents"] == 20
    assert set(report["rows"]) == {"rank_bm25_ws", "rank_bm25", "bm25", "hybrid", "two_pass"}  # dense skipped
    for name, row in report["rows"].items():
        for metric in quality.METRICS:
            assert 0.0 <= row[metric] <= 1.0, (name, metric)
        assert row["latency_ms"]["n"] == 10
    # Each query names its document's rare word: every lexical ranking finds it.
    for name in ("rank_bm25", "bm25", "hybrid"):
        assert report["rows"][name]["recall@100"] == 1.0, name
    assert report["rows"]["rank_bm25"]["ndcg@10"] > 0.9
    assert report["ablations"][0]["overrides"] == {"search.max_terms": "0"}
    table = capsys.readouterr().out
    assert "| rank_bm25 |" in table and "nDCG@10" in table

    # A second run reuses the vault: nothing is rewritten.
    mtimes = {p.name: p.stat().st_mtime_ns for p in notes}
    assert quality.main([*argv[:-2], "--rows", "bm25", "--tag", "again"]) == 0
    assert {p.name: p.stat().st_mtime_ns for p in sorted(vault.glob("*.md"))} == mtimes
    again = json.loads((out / "quality-fake-again.json").read_text(encoding="utf-8"))
    assert again["rows"]["bm25"]["recall@100"] == 1.0


def test_builtin_metrics() -> None:
    m = quality.builtin_metrics({"a": 1, "b": 1}, ["x", "a", "y", "b"])
    assert m["recall@100"] == 1.0
    assert m["mrr@10"] == 0.5
    ideal = 1 + 1 / 1.584962500721156
    assert m["ndcg@10"] == pytest.approx((1 / 1.584962500721156 + 1 / 2.321928094887362) / ideal)
    assert quality.builtin_metrics({"a": 1}, [])["ndcg@10"] == 0.0


def test_doc_filename_is_safe_and_distinct() -> None:
    assert quality.doc_filename("4983") == "4983.md"
    a, b = quality.doc_filename("a/b"), quality.doc_filename("a_b")
    assert a != b and "/" not in a


def test_speed_vault_generator(tmp_path: Path) -> None:
    vocab = speed.vocabulary(2000)
    root = speed.ensure_vault(20, tmp_path, vocab)
    notes = sorted(root.rglob("*.md"))
    assert len(notes) == 20
    for note in notes:
        text = note.read_text(encoding="utf-8")
        assert "# " in text
        assert 60 <= len(text.split()) <= 900
    mtimes = [n.stat().st_mtime_ns for n in notes]
    assert speed.ensure_vault(20, tmp_path, vocab) == root  # reused, not regenerated
    assert [n.stat().st_mtime_ns for n in notes] == mtimes
    queries = speed.make_queries(vocab, 30)
    assert len(set(queries)) == 30


def test_stats_helpers() -> None:
    assert percentile([1, 2, 3, 4, 5], 50) == 3
    assert percentile([0, 10], 95) == pytest.approx(9.5)
    s = summary([5.0, 1.0, 3.0])
    assert s["median"] == 3.0 and s["n"] == 3
    assert markdown_table(["a", "b"], [[1, 0.5]]).splitlines()[2] == "| 1 | 0.500 |"


def test_quality_benchmark_skips_an_ablation_over_budget_and_writes_rows_as_it_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = _fake_beir(tmp_path / "fake")
    out = tmp_path / "out"
    monkeypatch.setattr(quality, "PROBE_QUERIES", 2)
    written: list[set[str]] = []
    real_write = quality.write_json

    def spy(path: Path, data: dict) -> None:
        written.append(set(data["rows"]))
        real_write(path, data)

    monkeypatch.setattr(quality, "write_json", spy)
    argv = [
        "--dataset",
        str(dataset),
        "--out",
        str(out),
        "--work-dir",
        str(tmp_path / "vault"),
        "--no-embeddings",
        "--rows",
        "rank_bm25,bm25",
        "--scorer",
        "builtin",
        "--ablation",
        "hybrid:experimental.rrf_k=20",
        "--ablation-budget",
        "0",
    ]
    assert quality.main(argv) == 0
    assert written[0] == {"rank_bm25"} and written[1] == {"rank_bm25", "bm25"}  # one write per finished row
    report = json.loads((out / "quality-fake.json").read_text(encoding="utf-8"))
    assert report["complete"] is True
    [ablation] = report["ablations"]
    assert "budget 0 s" in ablation["skipped"] and "ndcg@10" not in ablation


#: (judgments, ranking, ranx's ndcg@10, recall@100, mrr@10), computed once with ranx 0.3.21
#: (`evaluate(Qrels({"q": judgments}), Run({"q": {doc: len(ranking) - i}}), [...])`): importing ranx
#: and compiling its metrics costs the suite ~13 s of CPU. Recompute them when ranx is upgraded.
RANX_0_3_21 = [
    ({"a": 2, "b": 1}, ["b", "a"], 0.8597186998521972, 1.0, 1.0),
    ({"a": 1, "b": 1, "c": 1}, ["x", "a", "y", "z", "b"], 0.4776237035032179, 2 / 3, 0.5),
    ({"a": 3, "b": 1, "c": 2}, [f"n{i}" for i in range(10)] + ["a", "b"], 0.0, 2 / 3, 0.0),
    ({"a": 3, "b": 1, "c": 2}, ["c", "n0", "b", "n1", "n2", "a"], 0.7494176499686813, 1.0, 1.0),
]


@pytest.mark.parametrize(("judgments", "ranking", "ndcg", "recall", "mrr"), RANX_0_3_21)
def test_builtin_metrics_match_ranx(judgments, ranking, ndcg, recall, mrr) -> None:
    got = quality.builtin_metrics(judgments, ranking)
    assert (got["ndcg@10"], got["recall@100"], got["mrr@10"]) == pytest.approx((ndcg, recall, mrr))


def test_builtin_ndcg_uses_ranx_default_gain() -> None:
    # Graded judgments: ranx's default ndcg takes gain = relevance (Järvelin), not 2^rel - 1.
    import math

    got = quality.builtin_metrics({"a": 2, "b": 1}, ["b", "a"])["ndcg@10"]
    assert got == pytest.approx((1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3)))
    assert got != pytest.approx((1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3)))  # 2^rel - 1 gains


def test_levels_scifact_vault_names_notes_by_title_and_asks_the_claims(tmp_path: Path) -> None:
    from benchmarks import levels

    folder = _fake_beir(tmp_path / "beir")
    claims = levels.scifact_vault(tmp_path / "papers", folder, seed=3)
    notes = sorted(p.relative_to(tmp_path / "papers").as_posix() for p in (tmp_path / "papers").rglob("*.md"))
    assert len(claims) == 10 and all(c["kind"] == "claim" and len(c["expected"]) == 1 for c in claims)
    assert {c["expected"][0] for c in claims} <= set(notes)  # every cited abstract is a note
    assert "papers/Hamster cages.md" in notes and len(notes) == 20  # cited ones plus the others (<= 80)
    body = (tmp_path / "papers" / "papers/Hamster cages.md").read_text(encoding="utf-8")
    assert body == "A hamster needs a deep cage with bedding and a wheel.\n"
    taken: set[str] = set()
    assert levels.title_filename('A/B: "x"? [y] #z.', taken) == "A B x y z"
    assert levels.title_filename("a b x y z", taken) == "a b x y z (2)"  # unique regardless of case
    # A name the vault holds spelt with hyphens is not an absent query of it.
    queries = levels.queries_for(tmp_path / "papers", {"hamster-cages", "Violin-bows"})
    assert [q["query"] for q in queries if q["kind"] == "absent"] == ["Violin-bows"]
