"""A why-not that proves itself: every counterfactual it states is run again here, independently, and holds."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from explorer.config import Settings
from explorer.engine import make_pipeline
from explorer.index.local.vault_index import VaultIndex
from explorer.search.explain.whynot import Change, prove
from tests.conftest import write_notes

K = 10


def _rank(pipeline, query: str, path: str, k: int = K) -> int | None:
    res = pipeline.search(query, k=k, record=False)
    return next((i for i, r in enumerate(res.results, 1) if r.document_path == path), None)


def _run_again(index: VaultIndex, change: Change, path: str, tmp_path: Path, embedder) -> int | None:
    """The change made by hand, on a fresh pipeline (and for a word, a fresh copy of the vault)."""
    settings = index.settings
    if change.kind == "filter":
        return _rank(make_pipeline(index, settings), change.query, path, change.k)
    if change.kind == "floor":
        changed = replace(
            settings, experimental=replace(settings.experimental, dense_threshold=float(change.value))
        )
        return _rank(make_pipeline(index, changed), change.query, path, change.k)
    if change.kind == "depth":
        changed = replace(settings, experimental=replace(settings.experimental, candidates=int(change.value)))
        return _rank(make_pipeline(index, changed), change.query, path, change.k)
    assert change.kind == "word" and change.at is not None
    root = tmp_path / f"again-{change.value}"
    shutil.copytree(index.root, root)  # with its index: only the edited note is read and embedded again
    file = root / path
    text = file.read_text(encoding="utf-8")
    file.write_text(text[: change.at] + f"\n{change.value}\n" + text[change.at :], encoding="utf-8")
    copy = VaultIndex(root, settings, embedder=embedder if index.model_state == "ready" else None)
    try:
        copy.open()
        copy.embed_pending()
        return _rank(make_pipeline(copy, settings), change.query, path, change.k)
    finally:
        copy.close()


def _check(proof, index: VaultIndex, tmp_path: Path, embedder, k: int = K) -> set[str]:
    kinds = set()
    for change in proof.changes:
        kinds.add(change.kind)
        assert _run_again(index, change, proof.path, tmp_path, embedder) == change.rank, change
        assert change.holds == (change.rank is not None and change.rank <= k)
        assert ("not enough" in change.claim) is not change.holds
        if change.rank is not None:
            assert f"#{change.rank}" in change.claim
    data = proof.to_dict()
    assert all(c["holds"] for c in data["changes"]) and not any(c["holds"] for c in data["not_enough"])
    return kinds


@pytest.mark.parametrize(
    ("query", "note", "kind", "k"),
    [
        ("old wars and empires", "History/ming-dynasty.md", "floor", K),
        ("writing clean code", "Programming/git-workflow.md", "floor", K),
        ("syrian hamster bedding -cage", "Pets/syrian-hamster-care.md", "filter", K),
        ("espresso grind", "Pets/hamster-diet.md", "word", 15),
    ],
)
def test_each_stated_change_holds_when_run_again(
    sample_index, sample_pipeline, embedder, tmp_path: Path, query: str, note: str, kind: str, k: int
) -> None:
    proof = prove(sample_pipeline, query, note, k=k, make_pipeline=make_pipeline)
    assert proof.path == note
    assert proof.rank is None or proof.rank > k
    assert proof.rank == _rank(sample_pipeline, query, note, 50)
    kinds = _check(proof, sample_index, tmp_path, embedder, k)
    assert kind in kinds
    assert any(c.kind == kind and c.holds for c in proof.changes), proof.to_dict()
    assert proof.summary.startswith("It ranks #" if proof.rank else "It is not in the first 50")


def test_the_floor_claim_names_the_cosine_and_the_floor(sample_pipeline) -> None:
    proof = prove(sample_pipeline, "old wars and empires", "ming-dynasty", k=K)
    fact = next(f for f in proof.facts if "floor" in f)
    assert "under the 0.40 floor" in fact
    floor = next(c for c in proof.changes if c.kind == "floor")
    cosine = float(fact.split("cosine ")[1].split()[0])
    assert float(floor.value) <= cosine < 0.40
    assert floor.claim.startswith(f"with the floor at {floor.value}, it would rank #")


def test_a_filter_that_leaves_the_note_out_is_named(sample_pipeline) -> None:
    proof = prove(sample_pipeline, "syrian hamster bedding -cage", "Pets/syrian-hamster-care.md", k=K)
    assert "left out by -cage" in proof.facts
    change = next(c for c in proof.changes if c.kind == "filter")
    assert change.query == "syrian hamster bedding" and change.value == "-cage"
    assert "left out by -cage — without it, it would rank #" in proof.summary


def test_a_note_in_the_top_k_needs_no_change_and_an_unknown_note_is_said(sample_pipeline) -> None:
    found = prove(sample_pipeline, "syrian hamster bedding", "Pets/syrian-hamster-care.md", k=K)
    assert found.rank is not None and found.rank <= K and not found.changes
    assert found.summary == f"It ranks #{found.rank} (in the top {K})."
    missing = prove(sample_pipeline, "hamster", "no-such-note-anywhere", k=K)
    assert missing.path is None and "No indexed note" in missing.summary


def test_past_the_candidate_depth_is_run_with_a_deeper_list(tmp_path: Path, embedder) -> None:
    notes = {f"Wheels/w{i:03d}.md": f"# W{i}\n\n" + "wheel " * 5 + "spoke rim\n" for i in range(130)}
    notes["Far/target.md"] = "# Target\n\n" + "A long note about many other things. " * 40 + "One wheel.\n"
    vault = write_notes(tmp_path / "vault", notes)
    settings = Settings()
    settings = replace(settings, index=replace(settings.index, embeddings=False))
    index = VaultIndex(vault, settings)
    index.open()
    try:
        pipeline = make_pipeline(index, settings)
        proof = prove(pipeline, "wheel", "Far/target.md", k=K, make_pipeline=make_pipeline)
        assert any("past the 100-note candidate depth" in f and "BM25" in f for f in proof.facts), proof.facts
        depth = next(c for c in proof.changes if c.kind == "depth")
        assert depth.value == "150"
        assert _run_again(index, depth, "Far/target.md", tmp_path, embedder) == depth.rank
        assert "not enough" in depth.claim  # a deeper list finds it, but 130 notes say "wheel" more often
    finally:
        index.close()


def test_cli_why_not_prints_the_proof_and_its_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from explorer.cli import main

    vault = write_notes(
        tmp_path / "vault",
        {
            "Pets/hamster.md": "# Hamster\n\nThe hamster wheel must be 30 cm wide.\n",
            "Projects/cart.md": "# Cart\n\nA wheel for the cart, and a wheel for the hamster.\n",
            "Travel/bike.md": "# Bike\n\nA spare wheel and a pump.\n",
        },
    )
    common = ["--vault", str(vault), "--no-embeddings", "-k", "3"]
    assert main(["why-not", "wheel -cart", "Projects/cart.md", *common, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (
        data["note"] == "Projects/cart.md" and data["rank"] is None and "left out by -cart" in data["facts"]
    )
    change = data["changes"][0]
    assert change["kind"] == "filter" and change["query"] == "wheel" and change["holds"]
    assert main(["why-not", "wheel", "Projects/cart.md", *common, "--json"]) == 0  # run again by hand
    assert json.loads(capsys.readouterr().out)["rank"] == change["rank"]

    assert main(["why-not", "wheel -cart", "cart", *common]) == 0
    text = capsys.readouterr().out
    assert f"left out by -cart — without it, it would rank #{change['rank']}" in text and "Stages" in text
    assert main(["why-not", "wheel", "no-such-note", *common]) == 2
    assert "No indexed note" in capsys.readouterr().out
