"""The related notes of the writer's list ranked by a scorer fitted on the vault's own links."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import write_notes
from explorer.index.local.vault_index import VaultIndex
from explorer.search.core.pipeline import SearchPipeline
from explorer.search.writing.linkrank import FEATURES, Candidates, by_name, fit
from explorer.search.writing.suggest import TRAIN_MIN, LinkSuggester

WORDS = "amber birch cedar delta ember fjord grove harbor iris juniper kestrel lagoon".split()


def _vault() -> dict[str, str]:
    """Day notes that each link one contact twice, in two paragraphs: the rest of a note's links say
    which note a paragraph links to, its words do not."""
    notes = {}
    for i in range(36):
        w = WORDS[i % len(WORDS)]
        notes[f"Days/Day {i:02d}.md"] = (
            f"Breakfast was quiet and the weather mild near the {w} path.\n\n"
            f"Called [[Contact {i:02d}]] about the garden plans.\n\n"
            f"Later wrote a long letter to [[Contact {i:02d}]] about the trip.\n"
        )
        notes[f"People/Contact {i:02d}.md"] = f"Reachable most evenings; collects {w} postcards number {i}."
    return notes


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, embedder):
    index = VaultIndex(write_notes(tmp_path_factory.mktemp("scorer") / "v", _vault()), embedder=embedder)
    index.open()
    index.embed_pending()
    yield SearchPipeline(index, index.settings)
    index.close()


def test_fit_weighs_the_feature_that_tells_linked_notes_apart() -> None:
    rng = np.random.default_rng(3)
    groups = []
    for g in range(40):
        paths = tuple(f"n{j}" for j in range(10))
        x = rng.random((10, len(FEATURES))).astype(np.float32)
        x[:, FEATURES.index("linked_here")] = 0.0
        x[g % 10, FEATURES.index("linked_here")] = 1.0
        groups.append((Candidates(paths, x), f"n{g % 10}"))
    scorer = fit(groups)
    assert scorer is not None and scorer.positives == 40
    assert scorer.as_dict()["linked_here"] > 1.0
    row = {"linked_here": 1.0, "related": 0.1}
    other = {"linked_here": 0.0, "related": 1.0}
    assert scorer.scores(by_name(row))[0] > scorer.scores(by_name(other))[0]
    # Nothing to learn from: no linked note among the candidates.
    assert fit([(c, "elsewhere") for c, _ in groups]) is None
    assert fit([]) is None


def test_prepare_fits_the_scorer_on_the_vaults_links_and_the_list_follows_it(pipeline) -> None:
    sug = LinkSuggester(pipeline)
    text = "Called [[Contact 07]] yesterday about the seeds.\n\nThen I sat down after lunch and wrote a long letter to "
    before = sug.suggest(text, len(text), path="Days/Day 07.md")
    assert before.candidates is None  # no scorer yet: the search's order, nothing more computed
    # The paragraph's words do not lead to the contact: the search alone does not offer it.
    assert "People/Contact 07.md" not in [s.path for s in before.items[:5]]
    sug.prepare(text, len(text))
    assert sug.scorer is not None and sug.scorer.positives >= TRAIN_MIN
    assert sug.scorer.as_dict()["linked_here"] > 0
    after = sug.suggest(text, len(text), path="Days/Day 07.md")
    assert after.candidates is not None and "People/Contact 07.md" in after.candidates.paths
    related = [s for s in after.items if s.kind != "mention"]
    assert related[0].path == "People/Contact 07.md" and related[0].kind == "related"
    assert related[0].link == "[[Contact 07]]"
    # A later suggester on the same index takes the fitted scorer without fitting again.
    again = LinkSuggester(pipeline)
    assert again.fit_scorer() is sug.scorer and not again.learn


def test_a_vault_with_few_links_keeps_the_search_order(tmp_path, embedder) -> None:
    notes = {"a.md": "Apples and [[b]].", "b.md": "Bananas.", "c.md": "Cherries and apples."}
    index = VaultIndex(write_notes(tmp_path / "v", notes), embedder=embedder)
    index.open()
    try:
        sug = LinkSuggester(SearchPipeline(index, index.settings))
        sug.prepare("Apples in a pie.", 0)
        assert sug.scorer is None and not sug.learn
        found = sug.suggest("Apples in a pie.", 16, path="a.md")
        assert [s.path for s in found.items][:1] == ["c.md"] and found.candidates is None
    finally:
        index.close()


def test_a_cancelled_fit_leaves_no_scorer_and_is_tried_again(tmp_path, embedder) -> None:
    # Notes of their own: a scorer fitted on another test's vault of the same notes would be taken.
    notes = {**_vault(), "Cancelled.md": "A fit of these notes is cancelled first."}
    index = VaultIndex(write_notes(tmp_path / "v", notes), embedder=embedder)
    index.open()
    try:
        sug = LinkSuggester(SearchPipeline(index, index.settings))
        assert sug.fit_scorer(cancelled=lambda: True) is None
        assert sug.scorer is None and sug.learn
        assert sug.fit_scorer() is not None and not sug.learn
    finally:
        index.close()


def test_indexes_opened_on_the_same_notes_share_one_fit_and_a_changed_note_fits_again(
    tmp_path, embedder, monkeypatch
) -> None:
    from explorer.search.writing import suggest

    fits: list[int] = []

    def counting_fit(groups):
        fits.append(len(groups))
        return fit(groups)

    monkeypatch.setattr(suggest, "fit", counting_fit)
    vault = write_notes(tmp_path / "v", {**_vault(), "Shared.md": "Two windows open this vault."})

    def fitted() -> object:
        index = VaultIndex(vault, embedder=embedder)
        index.open()
        try:
            index.embed_pending()
            return LinkSuggester(SearchPipeline(index, index.settings)).fit_scorer()
        finally:
            index.close()

    first = fitted()
    assert first is not None and len(fits) == 1
    # Another index object on the same notes (another app, another window): the same scorer, no fit.
    assert fitted() is first and len(fits) == 1
    # A note changes: the vault's links are read again.
    (vault / "Days" / "Day 03.md").write_text("Called [[Contact 05]] today.\n", encoding="utf-8")
    again = fitted()
    assert again is not None and again is not first and len(fits) == 2


def test_training_links_hide_each_paragraphs_links_and_skip_huge_notes() -> None:
    from explorer.search.writing.suggest import TRAIN_NOTE_CHARS, training_links
    from explorer.vault.links import LinkGraph
    from explorer.vault.parse import parse_note

    texts = {
        "a.md": "Intro words here.\n\nSee [[b]] and [[c]] for more.\n",
        "b.md": "Bee.",
        "c.md": "Sea.",
        "huge.md": "[[b]] " * (TRAIN_NOTE_CHARS // 6 + 1),
    }
    notes = {p: parse_note(p, t) for p, t in texts.items()}
    got = training_links(notes, LinkGraph(notes), limit=10)
    assert [(p, target) for p, _t, _c, target in got] == [("a.md", "b.md"), ("a.md", "c.md")]
    for _p, text, cursor, target in got:
        assert text == "Intro words here.\n\nSee and for more.\n"
        assert "[[" not in text and text[:cursor].endswith("See" if target == "b.md" else "See and")
