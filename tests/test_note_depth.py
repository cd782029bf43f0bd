"""note_depth: a shard ranking cut after the shards of its first N distinct notes, fetching deeper when needed."""

from __future__ import annotations

import random
from types import SimpleNamespace

from explorer.search.core.retrievers.base import note_depth


def _note_of(snap: SimpleNamespace, node_id: str) -> str:
    shard = snap.shards.get(node_id)
    return shard.path if shard is not None else node_id


def _vault(rng: random.Random, n_notes: int) -> tuple[SimpleNamespace, list[tuple[str, float]]]:
    """Shards of `n_notes` notes (1-6 each) ranked at random, some node_ids unknown to the snapshot."""
    shards = {}
    for note in range(n_notes):
        for part in range(rng.randint(1, 6)):
            shards[f"n{note}#{part}"] = SimpleNamespace(path=f"note-{note}.md")
    ranked = list(shards) + [f"gone-{i}" for i in range(rng.randint(0, 4))]
    rng.shuffle(ranked)
    return SimpleNamespace(shards=shards), [(node_id, 1.0 / (i + 1)) for i, node_id in enumerate(ranked)]


def test_cut_before_the_first_shard_of_the_note_past_the_depth() -> None:
    shards = {
        node: SimpleNamespace(path=path)
        for node, path in [("a1", "a"), ("a2", "a"), ("b1", "b"), ("c1", "c")]
    }
    items = [("a1", 0.9), ("b1", 0.8), ("a2", 0.7), ("c1", 0.6)]
    snap = SimpleNamespace(shards=shards)
    asked: list[int] = []

    def fetch(n: int) -> list[tuple[str, float]]:
        asked.append(n)
        return items[:n]

    assert note_depth(snap, fetch, 4, 2) == [("a1", 0.9), ("b1", 0.8), ("a2", 0.7)]
    assert asked == [4]
    assert note_depth(snap, fetch, 4, 0) == []
    # too few notes in the first fetch: asks four times as deep, once more than there is
    asked.clear()
    assert note_depth(snap, fetch, 2, 3) == items
    assert asked == [2, 8]


def test_the_cut_holds_on_random_rankings() -> None:
    """The answer is a head of the ranking holding the shards of its first `notes` notes (all of them
    when it has fewer), cut just before the first shard of the next note."""
    rng = random.Random(5)
    for _ in range(400):
        snap, ranked = _vault(rng, rng.randint(0, 30))
        n, notes = rng.randint(1, 40), rng.randint(0, 35)

        def fetch(k: int, ranked: list[tuple[str, float]] = ranked) -> list[tuple[str, float]]:
            return ranked[:k]

        first = fetch(n) if rng.random() < 0.5 else None
        out = note_depth(snap, fetch, n, notes, first)
        assert out == ranked[: len(out)]
        kept = {_note_of(snap, node_id) for node_id, _ in out}
        assert len(kept) == min(notes, len({_note_of(snap, node_id) for node_id, _ in ranked}))
        if len(out) < len(ranked):
            assert _note_of(snap, ranked[len(out)][0]) not in kept
