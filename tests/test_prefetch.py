"""After a warm open, a search reads the stored records of the notes it shows in one query, not one per note."""

from __future__ import annotations

from pathlib import Path

from conftest import write_notes
from explorer.config import Settings
from explorer.engine import make_pipeline
from explorer.index.local.vault_index import VaultIndex

LEXICAL = Settings().with_overrides({"index.embeddings": False, "rerank.enabled": False})
NOTES = {
    f"notes/n{i:02d}.md": f"# Lantern {i}\n\nPaper lanterns number {i} float over the harbour.\n\n"
    f"## Tide\n\nThe tide {i} turns at dusk beside the lantern pier.\n"
    for i in range(30)
}


def _page(out) -> list[tuple[str, tuple[str, ...]]]:
    return [(r.document_path, tuple(c.text for c in r.context_shards)) for r in out.results]


def _counting(index: VaultIndex) -> dict[str, int]:
    """Count the store's record reads (one note, many notes) made through `index`'s store."""
    calls = {"one": 0, "many": 0}
    one, many = index.store.load_record, index.store.load_records

    def load_record(path, digest):
        calls["one"] += 1
        return one(path, digest)

    def load_records(wanted):
        calls["many"] += 1
        return many(wanted)

    index.store.load_record = load_record  # type: ignore[method-assign]
    index.store.load_records = load_records  # type: ignore[method-assign]
    return calls


def test_a_search_after_a_warm_open_reads_its_page_in_one_query(tmp_path: Path) -> None:
    root = write_notes(tmp_path / "vault", NOTES)
    fresh = VaultIndex(root, LEXICAL)
    fresh.open()
    want = _page(make_pipeline(fresh, LEXICAL).search("lantern tide harbour", record=False))
    fresh.close()
    assert len(want) > 5

    index = VaultIndex(root, LEXICAL)
    index.open()
    calls = _counting(index)
    out = make_pipeline(index, LEXICAL).search("lantern tide harbour", record=False)
    assert _page(out) == want  # the same page, texts and highlights as from a fresh index
    assert calls["one"] == 0  # no note read its record on its own
    assert 1 <= calls["many"] <= len(out.passes) + 1  # one read per page built
    index.close()


def test_a_held_snapshot_keeps_its_version_when_a_change_lands_before_its_page_is_read(
    tmp_path: Path,
) -> None:
    root = write_notes(tmp_path / "vault", NOTES)
    VaultIndex(root, LEXICAL).open()
    index = VaultIndex(root, LEXICAL)
    index.open()
    old = NOTES["notes/n03.md"]
    with index.snapshot() as snap:
        (root / "notes/n03.md").write_text("# Other\n\nnew text entirely\n", encoding="utf-8")
        assert index.refresh(["notes/n03.md"]).changed == ["notes/n03.md"]
        snap.prefetch(["notes/n03.md", "notes/n04.md"])
        assert snap.notes["notes/n03.md"].text == old
        assert [snap.shards[i].text for i in snap.shard_ids("notes/n03.md")] == [
            old[s.start : s.end] for s in (snap.shards[i] for i in snap.shard_ids("notes/n03.md"))
        ]
        assert snap.notes["notes/n04.md"].text == NOTES["notes/n04.md"]
    assert index.note("notes/n03.md").text == "# Other\n\nnew text entirely\n"
    index.close()
