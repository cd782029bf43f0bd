"""BM25: equal to rank_bm25.BM25Okapi on the same corpus, after any sequence of adds, changes and removes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rank_bm25 import BM25Okapi

from explorer.config import Settings
from explorer.index.local.lexical import BM25Index
from explorer.index.local.vault_index import VaultIndex
from explorer.text.tokenize import tokenize


def _assert_parity(index: BM25Index, docs: dict[str, list[str]], queries: list[list[str]]) -> None:
    keys = list(docs)
    ref = BM25Okapi([docs[k] for k in keys])
    for q in queries:
        expected = ref.get_scores(q)
        got = index.get_scores(q)
        assert set(got) == set(keys)
        for key, score in zip(keys, expected):
            assert got[key] == pytest.approx(score, abs=1e-9, rel=1e-9), (q, key)


def _random_update(
    rng: random.Random,
    index: BM25Index,
    docs: dict[str, list[str]],
    doc,
    new_key: str,
    add_below: float,
    change_below: float,
    min_docs: int = 0,
) -> None:
    """One random step applied to both `docs` and `index`: add `new_key`, change a note, or remove one."""
    op = rng.random()
    if op < add_below or len(docs) < min_docs:
        key = new_key
    elif op < change_below:
        key = rng.choice(list(docs))
    else:
        key = rng.choice(list(docs))
        del docs[key]
        assert index.remove(key)
        return
    docs[key] = doc()
    index.add(key, docs[key])


def test_parity_after_random_updates() -> None:
    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(60)]

    def doc() -> list[str]:
        hi = rng.randint(2, 60)
        return [rng.choice(vocab[:hi]) for _ in range(rng.randint(1, 40))]

    docs: dict[str, list[str]] = {}
    index = BM25Index()
    queries = [["w1"], ["w3", "w7", "w1", "w1"], ["w59", "nope"], ["w0", "w2", "w4", "w8", "w16"]]
    for step in range(300):
        _random_update(rng, index, docs, doc, f"d{step}", 0.5, 0.8, min_docs=3)
        if step % 25 == 0:
            _assert_parity(index, docs, queries)
    _assert_parity(index, docs, queries)


def test_parity_holds_on_a_segment_loaded_from_arrays_and_updated() -> None:
    """An index reopened from its exported arrays scores like rank_bm25, through changes and re-exports."""
    rng = random.Random(11)
    vocab = [f"w{i}" for i in range(80)]

    def doc() -> list[str]:
        hi = rng.randint(2, 80)
        return [rng.choice(vocab[:hi]) for _ in range(rng.randint(1, 40))]

    docs = {f"d{i}": doc() for i in range(120)}
    index = BM25Index()
    for k, v in docs.items():
        index.add(k, v)
    queries = [["w1"], ["w3", "w7", "w1", "w1"], ["w79", "nope"], ["w0", "w2", "w4", "w8", "w16"], ["w77"]]
    for round_ in range(3):
        keys = sorted(docs)
        vocab_out, arrays = index.export(keys)
        index = BM25Index()
        index.load_base(keys, vocab_out, arrays)
        _assert_parity(index, docs, queries)
        assert all(index.terms(k) == dict(__import__("collections").Counter(docs[k])) for k in keys[:10])
        for step in range(150):
            _random_update(rng, index, docs, doc, f"n{round_}-{step}", 0.4, 0.7)
            if step % 30 == 0:
                _assert_parity(index, docs, queries)
                some = rng.choice(list(docs))
                assert index.doc_freq("w1") == sum(1 for d in docs.values() if "w1" in d)
                assert index.term_freq(some, "w1") == docs[some].count("w1")
        _assert_parity(index, docs, queries)


def test_negative_idf_floor_matches_reference() -> None:
    # "common" is in most documents: its raw idf is negative and floored at epsilon * mean idf.
    docs = {f"d{i}": ["common", f"rare{i}"] + (["common"] if i % 2 else []) for i in range(6)}
    docs["x"] = ["rare0", "other"]
    index = BM25Index()
    for k, v in docs.items():
        index.add(k, v)
    _assert_parity(index, docs, [["common"], ["common", "rare0"], ["other"]])


def test_top_orders_by_score_then_key_and_filters() -> None:
    index = BM25Index()
    index.add("b", ["kite", "wind"])
    index.add("a", ["kite", "wind"])
    index.add("c", ["kite"])
    index.add("d", ["rain"])
    top = index.top(["kite", "wind"], 10)
    assert [k for k, _ in top] == ["a", "b", "c"]
    assert [k for k, _ in index.top(["kite"], 10, allowed={"c"})] == ["c"]
    assert index.top(["absent"], 10) == []


def test_vault_index_bm25_equals_fresh_reference_after_file_changes(tmp_path: Path) -> None:
    root = tmp_path / "v"
    root.mkdir()
    texts = {
        "a.md": "# Kites\n\nFlying kites in strong wind.\n\n## Lines\n\nKite lines snap in gusts.",
        "b.md": "# Bread\n\nSourdough needs a lively starter and time.",
        "c.md": "# Wind\n\nWind turbines and kites both harvest wind energy.",
    }
    for name, text in texts.items():
        (root / name).write_text(text, encoding="utf-8")
    index = VaultIndex(root, Settings().with_overrides({"index.embeddings": False}))
    index.open()
    (root / "b.md").write_text("# Bread\n\nRye bread with caraway; no kites here.", encoding="utf-8")
    (root / "c.md").unlink()
    (root / "d.md").write_text("# Gliders\n\nGliders ride thermals, like kites ride wind.", encoding="utf-8")
    index.refresh()
    docs = {nid: tokenize(index.shards[nid].search_text) for nid in index.shards}
    _assert_parity(
        index.bm25, docs, [tokenize("kites wind"), tokenize("bread"), tokenize("thermals gliders kite")]
    )
    index.close()


def test_tokenizer_folds_case_accents_and_stems() -> None:
    assert tokenize("Hamsters' CAFÉ Running") == ["hamster", "cafe", "run"]
    assert tokenize("naïve façade") == tokenize("naive facade")


def test_cjk_queries_find_cjk_notes(tmp_path: Path) -> None:
    root = tmp_path / "v"
    root.mkdir()
    (root / "zh.md").write_text("# 长城\n\n长城是中国古代的军事防御工程，全长两万多公里。", encoding="utf-8")
    (root / "ja.md").write_text(
        "# 京都\n\n京都の寺は紅葉の季節に美しい。清水寺が有名です。", encoding="utf-8"
    )
    (root / "en.md").write_text("# Walls\n\nThe Great Wall of China is long.", encoding="utf-8")
    index = VaultIndex(root, Settings().with_overrides({"index.embeddings": False}))
    index.open()
    assert index.bm25.top(tokenize("长城"), 3)[0][0] == "zh.md"
    assert index.bm25.top(tokenize("防御工程"), 3)[0][0] == "zh.md"
    assert index.bm25.top(tokenize("清水寺"), 3)[0][0] == "ja.md"
    assert index.bm25.top(tokenize("京都の紅葉"), 3)[0][0] == "ja.md"
    index.close()


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=14))
def test_ascii_fast_fold_equals_the_unicode_fold(word: str) -> None:
    from explorer.text.tokenize import _fold, _fold_unicode

    assert _fold.__wrapped__(word) == _fold_unicode(word)


def test_spread_scores_equal_bm25_over_the_expanded_documents() -> None:
    """`top_spread` with whole-weight pairs equals BM25Okapi over the documents with their sources
    appended; a term in half the expanded documents or more counts nothing; half weights count half."""
    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(40)]
    docs = {f"d{i}": [rng.choice(vocab) for _ in range(rng.randint(3, 12))] for i in range(30)}
    index = BM25Index()
    for key, toks in docs.items():
        index.add(key, toks)
    index.remove("d5")  # a free slot in the middle
    del docs["d5"]
    keys = list(docs)
    links = [(keys[i], keys[i + 1]) for i in range(0, len(keys) - 1, 3)]
    pairs = index.spread_pairs(
        [(a, b, 1.0) for a, b in links] + [(b, a, 1.0) for a, b in links] + [("gone", "d0", 1.0)]
    )
    assert len(pairs[0]) == 2 * len(links)
    expanded = {k: list(v) for k, v in docs.items()}
    for a, b in links:
        expanded[a] += docs[b]
        expanded[b] += docs[a]
    ref = BM25Okapi([expanded[k] for k in keys])
    n = len(keys)
    for query in (["w1"], ["w3", "w7", "w7"], vocab[:10]):
        got = dict(index.top_spread(query, n, pairs))
        useful = [t for t in query if 0 < sum(t in expanded[k] for k in keys) < n / 2]
        expected = dict(zip(keys, ref.get_scores(useful))) if useful else {}
        for key in keys:
            assert got.get(key, 0.0) == pytest.approx(expected.get(key, 0.0), abs=1e-9), (query, key)
    assert (
        index.top_spread(["w1"], 3, pairs)
        == sorted(index.top_spread(["w1"], n, pairs), key=lambda p: (-p[1], p[0]))[:3]
    )
    half = index.spread_pairs([(a, b, 0.5) for a, b in links])
    a, b = next((a, b) for a, b in links if "w3" in docs[b] and "w3" not in docs[a])
    assert dict(index.top_spread(["w3"], n, half)).get(a, 0.0) > 0.0
    assert a not in dict(index.top(["w3"], n))
    mask = index.mask([a])
    assert [k for k, _ in index.top_spread(["w3"], n, half, mask)] == [a]
