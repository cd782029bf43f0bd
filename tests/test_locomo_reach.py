"""The LoCoMo reach study on two small conversations: every turn's signals recorded, misses read, ideas chosen left out."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import locomo_reach
from tests.test_locomo_bench import CONVERSATION


def _two_conversations() -> list[dict]:
    first = copy.deepcopy(CONVERSATION[0])
    second = copy.deepcopy(first)
    second["sample_id"] = "conv-y"
    for turn in second["conversation"]["session_2"]:
        turn["text"] = turn["text"].replace("frisbee", "ball")
    return [first, second]


def test_parts_and_logistic() -> None:
    names = {"ana", "ben"}
    assert locomo_reach.parts_of("What did Ana paint, knit and bake?", names) == [
        "What did Ana paint",
        "knit",
        "bake",
    ]
    assert locomo_reach.parts_of("Where does Ana live?", names) == []
    # Separable data: the fitted weight points the right way, and the bias is free.
    x = np.array([[0.0], [0.1], [0.9], [1.0]])
    w = locomo_reach.logistic((x - x.mean()) / x.std(), np.array([0.0, 0.0, 1.0, 1.0]))
    assert w[0] > 0


def test_reach_dump_analyse_ideas(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps(_two_conversations()), encoding="utf-8")
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    common = ["--data", str(data), "--work-dir", str(work)]
    assert locomo_reach.main(["dump", *common, "--out", str(out)]) == 0
    recs = [json.loads(line) for line in (out / "locomo-reach.jsonl").read_text().splitlines()]
    assert len(recs) == 8  # every question of both conversations
    first = recs[0]
    assert first["dias"] == ["D1:1", "D1:2", "D2:1", "D2:2"]
    for signal in ("own", "ctx", "prf", "enriched", "turn_session"):
        assert len(first[signal]) == 4
    assert len(first["session_bm25"]) == len(first["session_cos"]) == 2
    assert first["candidates"][0][0] == "D1:1"  # "When did Ana adopt the greyhound?"
    assert first["named"] == ["Ana"]
    # The question's words' neighbours among the conversation's words, never its own word or a name.
    near = {stem for stem, _ in first["expansion"]}
    assert "greyhound" not in near and "ana" not in near
    assert all(cos >= locomo_reach.EXPANSION_FLOOR for _, cos in first["expansion"])

    records = ["--records", str(out / "locomo-reach.jsonl")]
    assert locomo_reach.main(["analyse", *common, *records]) == 0
    report = tmp_path / "ideas.json"
    assert locomo_reach.main(["ideas", *common, *records, "--report", str(report)]) == 0
    ideas = json.loads(report.read_text())
    assert {"depth", "session", "prf", "parts", "enriched", "expand", "rescore", "linear"} <= set(ideas)
    for name, idea in ideas.items():
        assert set(idea["left_out"]) >= {"all", "multi-hop", "temporal", "single-hop"}, name
    assert ideas["depth"]["off"]["all"] == ideas["depth"]["left_out"]["all"]
    assert "linear" in capsys.readouterr().out


def test_evidence_depth(tmp_path: Path) -> None:
    """Per question and pooled: one question finds 1 of 2 evidence turns first, the other its only one at 3."""
    rows = [
        {"row": "explorer", "category": 1, "evidence": ["D1:1", "D1:2"], "candidates": [["D1:1", 1.0, 0.9]]},
        {
            "row": "explorer",
            "category": 1,
            "evidence": ["D2:1"],
            "candidates": [["D1:1", 1.0, 0.9], ["D1:3", 0.9, 0.8], ["D2:1", 0.8, 0.7]],
        },
    ]
    path = tmp_path / "base.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    depth = locomo_reach.evidence_depth(path)["multi-hop"]
    assert depth["questions"] == 2 and depth["evidence turns"] == 3
    assert depth["first 10"] == {"per question": 0.75, "pooled": pytest.approx(0.667, abs=1e-3)}
    assert locomo_reach.evidence_depth(path)["open-domain"]["questions"] == 0
