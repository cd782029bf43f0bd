"""Link suggestions while writing: names and aliases in the paragraph first (case, stems, a typo),
the sentence at the cursor before the rest, linked notes marked, then the hybrid related notes."""

from __future__ import annotations

import pytest

from conftest import CountingEmbedder, write_notes
from explorer.index.local.vault_index import VaultIndex
from explorer.search.core.pipeline import SearchPipeline
from explorer.search.writing.suggest import LinkSuggester, paragraph_bounds, sentence_bounds

NOTES = {
    "Programming/Docker setup.md": "---\naliases: [container setup]\n---\nInstall the engine, add your user to the group.",
    "Programming/Docker.md": "Images, containers and volumes.",
    "Programming/Kubernetes.md": "---\naliases: [K8s]\n---\nPods, deployments and services run on a cluster.",
    "Health/Intermittent fasting.md": "---\naliases: [IF]\n---\nEat within eight hours, fast sixteen.",
    "People/Anna Schmidt.md": "---\naliases: [Anna]\n---\nRuns the pottery studio downtown.",
    "Cooking/Sourdough starter.md": "Feed the starter flour and water every morning; the levain doubles in six hours.",
    "Cooking/Bread baking.md": "Bake the loaf in a hot dutch oven: flour, water, salt and a lively starter.",
    "Journal/today.md": "Nothing yet.",
    "Journal/other/Docker.md": "A second note that is also called Docker.",
    "Music/Rock [live] set.md": "Setlist of the rock live set.",
    "Hostile/plain name.md": '---\naliases: ["\\e[2Jwipe screen"]\n---\nA note whose alias is an escape sequence.',
}


@pytest.fixture(scope="module")
def suggester(tmp_path_factory: pytest.TempPathFactory, embedder):
    index = VaultIndex(write_notes(tmp_path_factory.mktemp("suggest") / "v", NOTES), embedder=embedder)
    index.open()
    index.embed_pending()
    yield LinkSuggester(SearchPipeline(index, index.settings))
    index.close()


def _at_end(sug: LinkSuggester, text: str, **kw):
    return sug.suggest(text, len(text), path="Journal/today.md", **kw)


def test_names_and_aliases_in_the_paragraph_come_first_whatever_their_case(suggester: LinkSuggester) -> None:
    text = "We moved the build to DOCKER SETUP last week, and the k8s cluster runs it now."
    found = _at_end(suggester, text)
    kinds = [(s.kind, s.path) for s in found.items[:2]]
    assert set(kinds) == {
        ("mention", "Programming/Docker setup.md"),
        ("mention", "Programming/Kubernetes.md"),
    }
    by_path = {s.path: s for s in found.items}
    # The longest name wins where names overlap: "Docker setup", not "Docker".
    assert "Programming/Docker.md" not in [s.path for s in found.items if s.kind == "mention"]
    # The link keeps the typed words beside the note's name.
    assert by_path["Programming/Docker setup.md"].link == "[[Docker setup|DOCKER SETUP]]"
    assert by_path["Programming/Kubernetes.md"].link == "[[Kubernetes|k8s]]"
    m = by_path["Programming/Docker setup.md"].mention
    assert m is not None and text[m.start : m.end] == "DOCKER SETUP" and not m.linked


def test_short_alias_matches_only_as_written(suggester: LinkSuggester) -> None:
    """'IF' names the fasting note; the word 'if' does not."""
    lower = _at_end(suggester, "I wonder if this works at all, and what happens if it does not.")
    assert "Health/Intermittent fasting.md" not in [s.path for s in lower.items if s.kind == "mention"]
    upper = _at_end(suggester, "Started IF again this week, breakfast at noon.")
    assert (
        upper.items[0].path == "Health/Intermittent fasting.md"
        and upper.items[0].link == "[[Intermittent fasting|IF]]"
    )


def test_a_typo_in_a_name_is_found_and_corrected_by_the_link(suggester: LinkSuggester) -> None:
    text = "Fed the sourdugh starter at seven."
    found = _at_end(suggester, text)
    first = found.items[0]
    assert first.path == "Cooking/Sourdough starter.md" and first.kind == "mention"
    assert first.mention is not None and first.mention.fuzzy and first.mention.typed == "sourdugh starter"
    assert first.link == "[[Sourdough starter]]"


def test_plural_and_stem_variants_name_the_note(suggester: LinkSuggester) -> None:
    found = _at_end(suggester, "Both docker setups failed on the new laptop.")
    assert found.items[0].path == "Programming/Docker setup.md"


def test_linked_notes_are_marked_and_never_suggested_as_mentions(suggester: LinkSuggester) -> None:
    text = "See [[Docker setup]] and [the fasting note](Health/Intermittent%20fasting.md); Anna set up Kubernetes."
    found = _at_end(suggester, text)
    linked = {m.path for m in found.mentions if m.linked}
    assert linked == {"Programming/Docker setup.md", "Health/Intermittent fasting.md"}
    mentions = [s.path for s in found.items if s.kind == "mention"]
    # One sentence: the mention nearest the cursor first.
    assert mentions == ["Programming/Kubernetes.md", "People/Anna Schmidt.md"]
    kinds = {s.path: s.kind for s in found.items}
    assert (
        kinds.get("Programming/Docker setup.md") == "linked"
        and kinds.get("Health/Intermittent fasting.md") == "linked"
    )
    assert all(kinds[p] != "mention" for p in linked)


def test_the_sentence_at_the_cursor_counts_more_than_the_rest(suggester: LinkSuggester) -> None:
    text = "Kubernetes took the whole morning. Then Anna called about the pottery studio."
    at_end = _at_end(suggester, text)
    assert [s.path for s in at_end.items[:2]] == ["People/Anna Schmidt.md", "Programming/Kubernetes.md"]
    at_start = suggester.suggest(text, 5, path="Journal/today.md")
    assert [s.path for s in at_start.items[:2]] == ["Programming/Kubernetes.md", "People/Anna Schmidt.md"]


def test_related_notes_follow_and_the_note_itself_is_left_out(suggester: LinkSuggester) -> None:
    text = "Feed the starter flour and water, then bake a loaf in the dutch oven."
    found = suggester.suggest(text, len(text), path="Cooking/Bread baking.md")
    paths = [s.path for s in found.items]
    assert "Cooking/Bread baking.md" not in paths
    assert "Cooking/Sourdough starter.md" in paths[:3]
    assert found.results is not None and all(s.kind == "related" for s in found.items)


def test_two_notes_of_one_name_link_by_path(suggester: LinkSuggester) -> None:
    found = _at_end(suggester, "The docker daemon crashed twice today, no idea why.")
    links = {s.link for s in found.items if s.kind == "mention"}
    assert links == {"[[Programming/Docker|docker]]", "[[Journal/other/Docker|docker]]"}


def test_paragraph_and_sentence_bounds() -> None:
    text = "First paragraph has quite a few words in it here.\n\nOne. Two words here! Three"
    start, end = paragraph_bounds(text, len(text))
    assert text[start:end] == "One. Two words here! Three" or text[start:end].endswith(
        "One. Two words here! Three"
    )
    i = text.rindex("words")
    lo, hi = sentence_bounds(text, i, start, end)
    assert text[lo:hi].strip() == "Two words here!"
    # Just after a full stop, the cursor belongs to the sentence it ends.
    j = text.index("here!") + len("here!")
    lo, hi = sentence_bounds(text, j, start, end)
    assert text[lo:hi].strip() == "Two words here!"


def test_hostile_and_huge_paragraphs_stay_bounded(suggester: LinkSuggester) -> None:
    text = "\x1b[31mDocker setup\x1b[0m " + "word " * 50_000 + "[[" * 1000
    found = suggester.suggest(text, 10, path="Journal/today.md")
    assert found.end - found.start <= 600
    assert found.items and found.items[0].path == "Programming/Docker setup.md"


def test_a_name_that_would_break_a_wikilink_is_linked_as_markdown(suggester: LinkSuggester) -> None:
    found = _at_end(suggester, "Played the rock live set twice.")
    first = found.items[0]
    assert first.path == "Music/Rock [live] set.md"
    assert first.link == "[rock live set](Music/Rock%20%5Blive%5D%20set.md)"


def test_an_alias_with_control_characters_is_never_matched_or_linked(suggester: LinkSuggester) -> None:
    found = _at_end(suggester, "Time to wipe screen and plain name things.")
    assert [s.path for s in found.items if s.kind == "mention"] == ["Hostile/plain name.md"]
    assert all("\x1b" not in s.link for s in found.items)
    assert not any("\x1b" in m.name for m in found.mentions)


def test_tags_dashes_and_colons_in_the_paragraph_are_words_not_filters(suggester: LinkSuggester) -> None:
    # `#baking` would be read as a tag filter (no note has it: an empty list), `---` as an exclusion,
    # `starter:` as an operator; in a paragraph being written they are words.
    text = "--- #baking starter: feed the levain flour and water every morning, then bake the loaf"
    found = _at_end(suggester, text)
    assert found.results is not None and not found.results.filters
    assert "Cooking/Sourdough starter.md" in [s.path for s in found.items][:3]


def test_the_paragraph_never_grows_into_the_frontmatter(suggester: LinkSuggester) -> None:
    text = "---\naliases: [Kubernetes notes]\ntags: [ops]\n---\n# Today\n\nShort start"
    start, end = paragraph_bounds(text, len(text))
    assert text[start:end] == "# Today\n\nShort start"
    found = _at_end(suggester, text)
    assert "aliases" not in found.query and "Kubernetes" not in found.query
    # With the cursor in the frontmatter, the frontmatter is the paragraph.
    start, _ = paragraph_bounds(text, 5)
    assert start == 0


def test_sentence_vectors_match_the_whole_text_and_embed_only_new_sentences(embedder) -> None:
    import numpy as np

    from explorer.search.writing.suggest import SentenceVectors

    counting = CountingEmbedder(embedder)
    calls = counting.batches

    vectors = SentenceVectors(counting)
    para = "Feed the starter flour and water every morning. The levain doubles in six hours."
    one = vectors.encode([para])[0]
    whole = embedder.encode([para])[0]
    assert abs(float(np.linalg.norm(one)) - 1.0) < 1e-5
    assert float(one @ whole) > 0.9  # the mean of its sentences points where the paragraph does
    calls.clear()
    vectors.encode([para + " Then bake"])
    # A sentence without its full stop yet is the same sentence as with one: one vector.
    assert calls == [["Then bake."]]
    calls.clear()
    vectors.encode([para + " Then bake."])
    assert calls == []


def test_typing_embeds_only_the_sentence_at_the_cursor_and_an_opened_note_is_embedded_ahead(
    tmp_path, embedder
) -> None:
    """The related search reads the sentence at the cursor, then the paragraph: a typed word costs
    one new sentence's vector, and after `prepare` (the writer opening a note) the first word typed
    in any paragraph costs no more."""
    counting = CountingEmbedder(embedder)
    calls = counting.batches

    index = VaultIndex(write_notes(tmp_path / "v", NOTES), embedder=counting)
    index.open()
    index.embed_pending()
    sug = LinkSuggester(SearchPipeline(index, index.settings))
    note = (
        "---\ntags: [bread]\n---\n# Baking day\n\nThe oven was hot by noon. We fed the starter twice. "
        "The loaf rose well\n\nLater the kitchen smelled of bread. Anna came by with flour and salt.\n"
    )
    first_end = note.index("rose well") + len("rose well")
    calls.clear()
    sug.suggest(note, first_end, path="Journal/today.md")
    typed = note[:first_end] + " overnight" + note[first_end:]
    calls.clear()
    sug.suggest(typed, first_end + len(" overnight"), path="Journal/today.md")
    assert calls == [["The loaf rose well overnight."]]
    # A note opened in the writer: every paragraph's sentences embedded ahead, nearest the cursor first.
    assert sug.prepare(typed, 0) == 3  # the heading, and the second paragraph's two sentences
    second_end = typed.index("salt.") + len("salt.")
    more = typed[:second_end] + " Then we" + typed[second_end:]
    calls.clear()
    sug.suggest(more, second_end + len(" Then we"), path="Journal/today.md")
    assert calls == [["Then we."]]
    assert sug.prepare(more, 0, cancelled=lambda: True) == 0
    index.close()


def test_a_long_paragraph_is_cut_at_sentence_boundaries_that_stay_put_while_typing() -> None:
    text = " ".join(f"Sentence number {i} has a few words in it." for i in range(40))
    starts = set()
    for typed in ("", " more", " more words", " more words typed"):
        t = text + typed
        start, end = paragraph_bounds(t, len(t))
        assert end - start <= 600 and end == len(t)
        assert t[start:].startswith("Sentence number")  # a whole sentence, not a fragment
        starts.add(start)
    # The window drops a whole sentence at a time (here at most once for 17 typed characters),
    # rather than a character at a time.
    assert len(starts) <= 2
    # Typing in the middle: both cuts fall after a full stop.
    middle = len(text) // 2
    start, end = paragraph_bounds(text, middle)
    assert text[start:].startswith("Sentence number") and text[:end].endswith(".")


def test_an_exclusion_without_a_word_excludes_nothing(suggester: LinkSuggester) -> None:
    pipeline = suggester.pipeline
    plain = pipeline.search("starter flour water", record=False)
    dashed = pipeline.search("starter flour water ---", record=False)
    assert [r.document_path for r in dashed.results] == [r.document_path for r in plain.results]
