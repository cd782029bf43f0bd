"""A search does the work its answer needs: the notes it reads, the shards it fuses and explains."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from conftest import write_notes
from explorer.config import Settings
from explorer.engine import make_pipeline
from explorer.index.local.vault_index import VaultIndex
from explorer.search.fusion import Fused, rrf, score_fusion
from explorer.search.schema import Ranking

LEXICAL = Settings().with_overrides({"index.embeddings": False, "rerank.enabled": False})
KNOWLEDGE = {
    f"Knowledge/k{i:02d}.md": f"# Kiln {i}\n\nThe kiln {i} fires glaze at cone six, kiln wash on the shelf.\n"
    for i in range(14)
}
OTHERS = {f"notes/n{i:02d}.md": f"# Walk {i}\n\nA walk by the kiln yard, day {i}.\n" for i in range(6)}


def _reading(index: VaultIndex) -> set[str]:
    """The paths whose stored records are read through `index`'s store from now on."""
    read: set[str] = set()
    one, many = index.store.load_record, index.store.load_records

    def load_record(path, digest):
        read.add(path)
        return one(path, digest)

    def load_records(wanted):
        read.update(wanted)
        return many(wanted)

    index.store.load_record = load_record  # type: ignore[method-assign]
    index.store.load_records = load_records  # type: ignore[method-assign]
    return read


@pytest.mark.parametrize("two_pass", [False, True])
def test_a_search_reads_the_texts_of_the_notes_it_shows_and_no_others(tmp_path: Path, two_pass: bool) -> None:
    root = write_notes(tmp_path / "vault", {**KNOWLEDGE, **OTHERS})
    fresh = VaultIndex(root, LEXICAL)
    fresh.open()
    want = make_pipeline(fresh, LEXICAL).search("kiln glaze shelf", k=3, two_pass=two_pass, record=False)
    fresh.close()

    index = VaultIndex(root, LEXICAL)  # a warm open: the notes' texts stay in the store until read
    index.open()
    read = _reading(index)
    out = make_pipeline(index, LEXICAL).search("kiln glaze shelf", k=3, two_pass=two_pass, record=False)
    # Knowledge first judged the 10 best knowledge notes before pass 1 ran, from the index alone:
    # the texts read are those of the page pass 1 built (k results, or 10 when a second pass may follow).
    page = [p for p, _ in out.trace.entries[: 10 if two_pass else 3]]
    assert out.searched_sources in (["fact"], ["fact", "all"])
    assert read and read <= set(page)
    assert [(r.document_path, r.score, r.relevance, r.snippet) for r in out.results] == [
        (r.document_path, r.score, r.relevance, r.snippet) for r in want.results
    ]
    assert out.quality == want.quality
    index.close()


def _rankings(seed: int) -> list[Ranking]:
    rnd = random.Random(seed)
    ids = [f"n{i}" for i in range(80)]
    return [
        Ranking(
            f"t{j % 3}",
            ("bm25", "dense", "feedback", "name")[j % 4],
            rnd.choice((1.0, 0.7)),
            rnd.choice((1.0, 0.5)),
            tuple((node_id, rnd.random()) for node_id in rnd.sample(ids, rnd.randint(0, 40))),
        )
        for j in range(rnd.randint(1, 9))
    ]


@pytest.mark.parametrize("seed", range(25))
def test_fusing_a_few_shards_gives_them_their_scores_and_order_in_the_whole_fusion(seed: int) -> None:
    rankings = _rankings(seed)
    weight = {f"n{i}": 1.5 for i in range(0, 80, 3)}.get
    rnd = random.Random(seed + 100)
    only = {f"n{i}" for i in rnd.sample(range(80), 12)}
    whole = rrf(rankings, 60, lambda n: weight(n) or 1.0)
    part = rrf(rankings, 60, lambda n: weight(n) or 1.0, only=only)
    assert part == [f for f in whole if f.node_id in only]


@pytest.mark.parametrize("seed", range(10))
def test_a_fused_shard_spells_out_contributions_that_sum_to_its_score(seed: int) -> None:
    for fused in (rrf(_rankings(seed), 60), score_fusion(_rankings(seed), 0.2)):
        for f in fused:
            contribs = f.contributions
            assert contribs is f.contributions  # spelt out once
            assert f.score == sum(c.contribution for c in contribs)
            assert f.best_rank == min(c.rank for c in contribs)
            assert f == Fused(f.node_id, f.score, contribs, f.best_rank)
            assert hash(f) == hash(Fused(f.node_id, f.score, contribs, f.best_rank))
    f = rrf(_rankings(3), 60)[0]
    with pytest.raises(AttributeError):
        f.score = 1.0  # type: ignore[misc]


_PIECES = (
    "Garden",
    "garden's",
    "gardens",
    "GARDENING",
    "café",
    "cafe\u0301s",
    "rock'n'roll",
    "n",
    "roll",
    "it’s",
    "its",
    "'",
    "’",
    "_",
    "snake_case",
    "x2",
    "2x",
    "naïve",
    "run",
    "running",
    "runs",
    "-",
    ".",
    " ",
    "  ",
    "\n",
    "''",
    "長城",
    "Straße",
    "ﬁle",
)


@pytest.mark.parametrize("seed", range(60))
def test_finding_a_few_words_gives_the_spans_of_tokenizing_everything(seed: int) -> None:
    from explorer.text.tokenize import fold_word, token_spans_of, tokenize_spans

    rnd = random.Random(seed)
    pieces = [p for p in _PIECES if seed % 3 or not any("\u3040" <= c <= "\ufaff" for c in p)]
    text = "".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 60)))
    folded = {fold_word(w) for w in rnd.sample(_PIECES, 6)} | {
        rnd.choice(["garden", "run", "n", "roll", "file"])
    }
    assert token_spans_of(text, folded) == [s for s in tokenize_spans(text) if s[0] in folded]
