"""Vault reading: every Markdown construct with offsets checked against the raw text, shards, node_ids, ignore rules, bad input."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from explorer.config import Settings, VaultSettings
from explorer.index.local.vault_index import VaultIndex
from explorer.vault.links import LinkGraph
from explorer.vault.parse import parse_note
from explorer.vault.scan import is_ignored, load_note, read_text, scan_vault, source_type_for
from explorer.vault.shard import estimate_tokens, make_shards

NOTE = """---
title: Hamster handbook
tags: [pets, "#care"]
aliases: [hamsters]
---
# Hamsters

Intro with #inline-tag and #nested/tag and a [[Other note]] link.
See [[Other note#Feeding|the feeding part]] and [[Other note#^feed-1]] and ![[diagram.png]].

## Care

Fresh water daily. ^water-1

- bullet one
- bullet two
^list-1

### Diet

Seeds, vegetables, protein. Issue #123 is not a tag; neither is a#b.

```python
# comment #not-a-tag [[not-a-link]]
print("x")
```

Inline `#also-not [[nope]]` code.

> [!warning] Careful
> Citrus is bad for hamsters. [[Other note|alias only]]

| food | ok |
|------|----|
| carrot | yes |

## Care
Second section with the same name.
"""


def test_frontmatter_title_tags_and_offsets() -> None:
    note = parse_note("Pets/hamsters.md", NOTE)
    assert note.title == "Hamster handbook"
    assert note.frontmatter["aliases"] == ["hamsters"]
    assert NOTE[note.body_start :].startswith("\n# Hamsters")
    names = [t.name for t in note.tags]
    assert names == ["pets", "care", "inline-tag", "nested/tag"]
    for tag in note.tags:
        if tag.start >= 0:
            assert NOTE[tag.start : tag.end] == "#" + tag.name
    assert "not-a-tag" not in names and "also-not" not in names and "123" not in names
    assert note.tag_names == ("pets", "care", "inline-tag", "nested/tag")


def test_headings_have_raw_offsets() -> None:
    note = parse_note("Pets/hamsters.md", NOTE)
    got = [(h.level, h.text) for h in note.headings]
    assert got == [(1, "Hamsters"), (2, "Care"), (3, "Diet"), (2, "Care")]
    for h in note.headings:
        assert NOTE[h.start : h.end] == "#" * h.level + " " + h.text


def test_wikilinks_embeds_and_aliases() -> None:
    note = parse_note("Pets/hamsters.md", NOTE)
    links = [(ln.target, ln.heading, ln.block, ln.alias, ln.embed) for ln in note.links]
    assert links == [
        ("Other note", "", "", "", False),
        ("Other note", "Feeding", "", "the feeding part", False),
        ("Other note", "", "feed-1", "", False),
        ("diagram.png", "", "", "", True),
        ("Other note", "", "", "alias only", False),
    ]
    for link in note.links:
        raw = NOTE[link.start : link.end]
        assert raw.startswith("![[" if link.embed else "[[") and raw.endswith("]]")
    assert all("nope" not in ln.target and "not-a-link" not in ln.target for ln in note.links)


def test_block_ids_cover_their_block() -> None:
    note = parse_note("Pets/hamsters.md", NOTE)
    blocks = {b.id: NOTE[b.start : b.end] for b in note.blocks}
    assert blocks["water-1"] == "Fresh water daily."
    assert blocks["list-1"] == "- bullet one\n- bullet two"


def test_title_is_the_file_name_unless_frontmatter_sets_one() -> None:
    # As in Obsidian: a first H1 is a heading, not the title.
    note = parse_note("a/x.md", "# Big title\n\ntext")
    assert note.title == "x" and [h.text for h in note.headings] == ["Big title"]
    assert parse_note("a/plain note.md", "just text, no heading").title == "plain note"
    named = parse_note("a/plain note.md", "---\ntitle: Shown name\naliases: [One, two]\n---\ntext")
    assert named.title == "Shown name"
    assert named.names == ("Shown name", "plain note", "One", "two")
    legacy = parse_note("b.md", "---\nalias: first, second\ndescription: What it is\n---\ntext")
    assert legacy.names == ("b", "first", "second") and legacy.description == "What it is"


def test_crlf_offsets_refer_to_raw_text() -> None:
    text = "---\r\ntitle: T\r\n---\r\n# H1\r\n\r\n## Sec\r\nbody #tag here\r\n"
    note = parse_note("c.md", text)
    sec = next(h for h in note.headings if h.text == "Sec")
    assert text[sec.start : sec.end] == "## Sec"
    tag = next(t for t in note.tags if t.name == "tag")
    assert text[tag.start : tag.end] == "#tag"
    for s in make_shards(note):
        assert text[s.start : s.end] == s.text


def test_malformed_frontmatter_is_reported_and_note_kept() -> None:
    text = "---\ntitle: [unclosed\ntags: x\n---\n# Real title\nbody\n"
    note = parse_note("bad.md", text)
    assert note.frontmatter == {}
    assert note.warnings and "malformed frontmatter" in note.warnings[0]
    assert note.title == "bad"
    assert any("body" in s.text for s in make_shards(note))


def test_shards_are_exact_spans_with_readable_node_ids() -> None:
    note = parse_note("Pets/hamsters.md", NOTE)
    shards = make_shards(note)
    ids = [s.node_id for s in shards]
    assert ids == [
        "Pets/hamsters.md",
        "Pets/hamsters.md#Care",
        "Pets/hamsters.md#Care#Diet",
        "Pets/hamsters.md#Care (2)",
    ]
    assert [s.heading_path for s in shards][2] == ("Hamsters", "Care", "Diet")
    for s in shards:
        assert NOTE[s.start : s.end] == s.text
        assert s.search_text.startswith("Hamster handbook")
    assert len({s.hash for s in shards}) == len(shards)


def test_node_ids_stable_when_another_section_changes() -> None:
    note = parse_note("n.md", NOTE)
    edited = NOTE.replace(
        "Fresh water daily.", "Fresh water daily, changed twice a day, with a long new sentence."
    )
    before = {s.node_id: s.hash for s in make_shards(note)}
    after = {s.node_id: s.hash for s in make_shards(parse_note("n.md", edited))}
    assert before.keys() == after.keys()
    changed = [k for k in before if before[k] != after[k]]
    assert changed == ["n.md#Care"]


def test_long_sections_split_within_model_window_with_overlap() -> None:
    para = " ".join(f"word{i} is a token in sentence number {i}." for i in range(400))
    note = parse_note("long.md", "# T\n\n## Big\n\n" + para)
    shards = make_shards(note, max_tokens=200, overlap=30)
    assert len(shards) > 5
    assert [s.node_id for s in shards[:3]] == ["long.md#Big", "long.md#Big@2", "long.md#Big@3"]
    for a, b in itertools.pairwise(shards):
        assert b.start < a.end, "consecutive pieces overlap"
        assert estimate_tokens(a.text) <= 200
    # Every word of the section is in some shard.
    covered = set()
    for s in shards:
        covered.update(range(s.start, s.end))
    assert all(i in covered for i in range(note.text.index("word0"), len(note.text)))


def test_estimate_never_far_below_real_word_pieces(embedder) -> None:
    from tokenizers import Tokenizer

    from explorer.index.local.embed import bundled_model_dir

    tok = Tokenizer.from_file(str(bundled_model_dir() / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    samples = [
        "The Syrian hamster (Mesocricetus auratus) is a solitary, nocturnal rodent.",
        "长城是中国古代的军事防御工程。",
        "Photosynthesis converts CO₂ and H₂O into glucose; efficiency ≈ 1–2 %.",
    ]
    for text in samples:
        real = len(tok.encode(text, add_special_tokens=False).ids)
        assert estimate_tokens(text) >= real * 0.75


def test_cjk_and_unicode_paths(tmp_path: Path) -> None:
    (tmp_path / "Travel").mkdir()
    (tmp_path / "Travel" / "café notes.md").write_text("# Café\n\n長城 and 京都の寺", encoding="utf-8")
    (tmp_path / "space dir").mkdir()
    (tmp_path / "space dir" / "a b.md").write_text("hello", encoding="utf-8")
    scan = scan_vault(tmp_path, VaultSettings())
    assert [f.path for f in scan.files] == ["Travel/café notes.md", "space dir/a b.md"]


def test_ignore_rules(tmp_path: Path) -> None:
    for rel in [
        ".obsidian/app.md",
        ".git/x.md",
        ".trash/old.md",
        ".explorer/y.md",
        ".hidden/z.md",
        "notes/.swap.md",
        "notes/draft.md.swp",
        "notes/a.md~",
        "notes/.#lock.md",
        "notes/#auto#",
        "notes/keep.md",
        "notes/readme.txt",
        "private/secret.md",
        "drafts/x/y.md",
    ]:
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("text", encoding="utf-8")
    settings = VaultSettings(ignore=("private/**", "drafts"))
    scan = scan_vault(tmp_path, settings)
    assert [f.path for f in scan.files] == ["notes/keep.md"]
    assert is_ignored("a/.obsidian", settings, is_dir=True)
    assert not is_ignored("a/b.md", settings)


def test_source_types_from_folders() -> None:
    vs = VaultSettings()
    assert source_type_for("Users/u/turns/turn_000101/context.md", vs) == "turn_summary"
    assert source_type_for("Users/u/Knowledge/hamsters.md", vs) == "fact"
    assert source_type_for("Knowledge/sub/deep.md", vs) == "fact"
    assert source_type_for("Users/u/Beliefs/b.md", vs) == "belief"
    assert source_type_for("Users/u/sessions/s1/preferences.md", vs) == "preference"
    assert source_type_for("Users/u/research_cache/r.md", vs) == "research_cache"
    assert source_type_for("Recipes/bread.md", vs) == "note"
    custom = VaultSettings(source_types=(("Journal/**", "journal"),))
    assert source_type_for("Journal/2026/a.md", custom) == "journal"


def test_turn_metadata_is_indexed_with_context(tmp_path: Path) -> None:
    turn = tmp_path / "Users" / "u" / "turns" / "turn_000007"
    turn.mkdir(parents=True)
    (turn / "context.md").write_text("# Turn 7\n\nWe talked.", encoding="utf-8")
    (turn / "metadata.json").write_text(
        '{"topic": "bicycle gears", "keywords": ["derailleur", "cassette"]}', encoding="utf-8"
    )
    scan = scan_vault(tmp_path, VaultSettings())
    note, _ = load_note(scan.files[0], VaultSettings())
    assert note.source_type == "turn_summary"
    assert note.metadata["topic"] == "bicycle gears"
    assert "derailleur" in make_shards(note)[0].search_text


# -- bad input -------------------------------------------------------------------------------
def _index(tmp_path: Path) -> VaultIndex:
    return VaultIndex(tmp_path, Settings().with_overrides({"index.embeddings": False}))


def test_turn_metadata_edited_while_closed_is_seen_on_open(tmp_path: Path) -> None:
    turn = tmp_path / "Users" / "u" / "turns" / "turn_000007"
    turn.mkdir(parents=True)
    (turn / "context.md").write_text("# Turn 7\n\nWe talked.", encoding="utf-8")
    (turn / "metadata.json").write_text('{"topic": "bicycle gears"}', encoding="utf-8")
    rel = "Users/u/turns/turn_000007/context.md"
    ix = _index(tmp_path)
    ix.open()
    assert ix.notes[rel].metadata["topic"] == "bicycle gears"
    ix.close()
    # Only the sidecar changes, with the app closed; context.md keeps its size and mtime.
    (turn / "metadata.json").write_text(
        '{"topic": "sailing knots", "keywords": ["bowline"]}', encoding="utf-8"
    )
    st = (turn / "metadata.json").stat()
    os.utime(turn / "metadata.json", ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    ix = _index(tmp_path)
    report = ix.open()
    try:
        assert rel in report.changed
        assert ix.notes[rel].metadata["topic"] == "sailing knots"
        from explorer.text.tokenize import tokenize

        assert [k for k, _ in ix.bm25.top(tokenize("bowline"), 3)] == [rel]
        # Nothing changed since: a third open re-reads nothing.
        ix.close()
        ix = _index(tmp_path)
        again = ix.open()
        assert not again.changed and not again.added
    finally:
        ix.close()


def test_bad_inputs_are_skipped_with_reasons_and_nothing_else_lost(tmp_path: Path) -> None:
    (tmp_path / "good.md").write_text("# Good\n\nA fine note about kites.", encoding="utf-8")
    (tmp_path / "binary.md").write_bytes(b"\x89PNG\x00\x00\x01binary")
    (tmp_path / "latin1.md").write_bytes("caf\xe9 au lait".encode("latin-1"))
    (tmp_path / "empty.md").write_text("", encoding="utf-8")
    (tmp_path / "bad fm.md").write_text(
        "---\n: : :\n  - [\n---\nbody of bad frontmatter note", encoding="utf-8"
    )
    big = tmp_path / "huge.md"
    with open(big, "wb") as fh:
        fh.write(b"# Huge\n\n")
        fh.write((b"lorem ipsum dolor sit amet " * 40_000) * 20)  # ~21 MB
    index = _index(tmp_path)
    report = index.open()
    assert set(index.notes) == {"good.md", "empty.md", "bad fm.md"}
    assert "binary" in index.skipped["binary.md"]
    assert "UTF-8" in index.skipped["latin1.md"]
    assert "too large" in index.skipped["huge.md"]
    assert index.notes["bad fm.md"].warnings
    assert report.skipped.keys() == {"binary.md", "latin1.md", "huge.md"}
    assert index.bm25.top(["kite"], 5)[0][0] == "good.md"
    index.close()


def test_unreadable_file_and_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file and a folder the user may not read (permission errors raised by the real open and
    scandir calls for those two paths, so the test also holds when it runs as root)."""
    import builtins

    (tmp_path / "ok.md").write_text("ok", encoding="utf-8")
    locked = tmp_path / "locked.md"
    locked.write_text("secret", encoding="utf-8")
    folder = tmp_path / "closed"
    folder.mkdir()
    (folder / "in.md").write_text("x", encoding="utf-8")
    real_open, real_scandir = builtins.open, os.scandir

    def guarded_open(file, *args, **kwargs):
        if Path(file) == locked:
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    def guarded_scandir(path="."):
        if Path(path) == folder:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(builtins, "open", guarded_open)
    monkeypatch.setattr(os, "scandir", guarded_scandir)
    index = _index(tmp_path)
    index.open()
    monkeypatch.undo()
    assert "ok.md" in index.notes and "locked.md" not in index.notes
    assert "permission" in index.skipped["locked.md"]
    assert "unreadable" in index.skipped["closed"]
    index.close()


def test_unreadable_file_reason_even_as_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "x.md"
    p.write_text("hello", encoding="utf-8")
    real_open = open

    def deny(path, *a, **kw):
        if str(path) == str(p):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *a, **kw)

    monkeypatch.setattr("builtins.open", deny)
    text, reason = read_text(p, 1_000_000)
    assert text is None and "permission denied" in reason


def test_unreadable_folder_reason_even_as_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ok.md").write_text("ok", encoding="utf-8")
    (tmp_path / "closed").mkdir()
    (tmp_path / "closed" / "in.md").write_text("x", encoding="utf-8")
    real_scandir = os.scandir

    def deny(path):
        if str(path).endswith("closed"):
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    monkeypatch.setattr("explorer.vault.scan.os.scandir", deny)
    scan = scan_vault(tmp_path, VaultSettings())
    assert [f.path for f in scan.files] == ["ok.md"]
    assert scan.skipped[0].path == "closed" and "unreadable" in scan.skipped[0].reason


def test_symlink_loop_and_empty_vault(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "n.md").write_text("note", encoding="utf-8")
    (tmp_path / "a" / "loop").symlink_to(tmp_path / "a", target_is_directory=True)
    (tmp_path / "dangling.md").symlink_to(tmp_path / "nowhere.md")
    scan = scan_vault(tmp_path, VaultSettings())
    assert [f.path for f in scan.files] == ["a/n.md"]
    reasons = {s.path: s.reason for s in scan.skipped}
    assert "symlink loop" in reasons["a/loop"]
    assert reasons["dangling.md"] == "broken symlink"
    empty = tmp_path / "empty"
    empty.mkdir()
    index = _index(empty)
    index.open()
    assert index.stats().notes == 0
    index.close()


def test_vault_that_is_not_a_folder(tmp_path: Path) -> None:
    from explorer.vault.scan import VaultError

    f = tmp_path / "file.md"
    f.write_text("x", encoding="utf-8")
    with pytest.raises(VaultError, match="not a folder"):
        VaultIndex(f)
    with pytest.raises(VaultError, match="not found"):
        VaultIndex(tmp_path / "missing")


def test_sample_vault_parses_cleanly(sample_index) -> None:
    st = sample_index.stats()
    assert st.notes >= 60
    assert not sample_index.skipped
    kinds = {n.source_type for n in sample_index.notes.values()}
    assert {"fact", "belief", "preference", "turn_summary", "note"} <= kinds
    graph = sample_index.links()
    dangling = {(s, ln.target) for s, ln in graph.dangling()}
    assert all(s == "Projects/ideas.md" for s, _ in dangling), dangling
    for note in sample_index.notes.values():
        for shard_id in sample_index.shards_by_path[note.path]:
            s = sample_index.shards[shard_id]
            assert note.text[s.start : s.end] == s.text


def test_backlinks_and_resolution() -> None:
    a = parse_note("Pets/hamsters.md", "---\naliases: [hammy]\n---\n# H\ntext")
    b = parse_note(
        "Daily/2026.md", "See [[hamsters]] and [[Pets/hamsters#H|x]] and [[hammy]] and [[nothing]]."
    )
    graph = LinkGraph({a.path: a, b.path: b})
    assert graph.resolve("hamsters") == "Pets/hamsters.md"
    assert graph.resolve("pets/hamsters.md") == "Pets/hamsters.md"
    assert graph.resolve("hammy") == "Pets/hamsters.md"
    assert graph.resolve("nothing") is None
    assert [bl.source for bl in graph.backlinks("Pets/hamsters.md")] == ["Daily/2026.md"] * 3


def test_tags_links_and_block_ids_at_the_edges_of_the_text_and_the_frontmatter() -> None:
    # The scans start at the frontmatter's end and look at the character before a `#`, `[[` or `^`:
    # at the text's first offset there is none, right after the frontmatter it is the closing `---`.
    text = "#first x#not (#paren) ,#comma\n^top\n![[Start]] and [[Plain|alias]] `#code [[no]]`\ntail ^end"
    note = parse_note("a.md", text)
    assert [t.name for t in note.tags] == ["first", "paren", "comma"]
    assert [(t.start, t.end) for t in note.tags] == [(0, 6), (14, 20), (23, 29)]
    assert [(x.target, x.embed, x.alias, text[x.start : x.end]) for x in note.links] == [
        ("Start", True, "", "![[Start]]"),
        ("Plain", False, "alias", "[[Plain|alias]]"),
    ]
    assert [b.id for b in note.blocks] == ["top", "end"]
    fm = "---\ntags: [a]\n---\n"
    after = parse_note("b.md", fm + "![[Next]] #real\n^id")
    assert [(x.target, x.embed, x.start) for x in after.links] == [("Next", True, len(fm))]
    assert [t.name for t in after.tags] == ["a", "real"]
    assert [b.id for b in after.blocks] == ["id"]
    # No `^`, backtick, `](` or `[[` anywhere: nothing of those kinds, and the display text is the text.
    plain = parse_note("c.md", "# Title\n\nwords only #t\n")
    assert (plain.links, plain.blocks, [t.name for t in plain.tags]) == ((), (), ["t"])
