"""The LoCoMo re-ranking study on two small conversations: results and turns recorded, re-scorers chosen left out."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import locomo_ltr
from explorer.search.memory.rescore import TURN_FEATURES, load_turn_model
from tests.test_locomo_bench import CONVERSATION


def _two_conversations() -> list[dict]:
    """The bench test's conversation and a copy of it under another id, one word changed."""
    first = copy.deepcopy(CONVERSATION[0])
    second = copy.deepcopy(first)
    second["sample_id"] = "conv-y"
    for turn in second["conversation"]["session_2"]:
        turn["text"] = turn["text"].replace("frisbee", "ball")
    return [first, second]


def test_question_kinds_from_words() -> None:
    names = locomo_ltr.KIND_NAMES
    k = dict(zip(names, locomo_ltr.kinds("What activities has Melanie done with her family?")))
    assert k["list"] == 1 and k["when"] == 0
    k = dict(zip(names, locomo_ltr.kinds("When did Caroline go to the LGBTQ support group?")))
    assert k["when"] == 1 and k["list"] == 0
    k = dict(zip(names, locomo_ltr.kinds("Would Caroline likely pursue writing as a career option?")))
    assert k["would"] == 1


def test_pairwise_learner_orders_a_separable_signal() -> None:
    rng = np.random.default_rng(0)
    xs, ys = [], []
    for _ in range(20):
        x = rng.normal(size=(12, 2))
        y = (x[:, 0] > 0.8).astype(float)
        xs.append(x)
        ys.append(y)
    for kind in ("pointwise", "pairwise", "weighted"):
        model = locomo_ltr.Learner(kind, 1.0).fit(xs, ys)
        assert model.w[0] > abs(model.w[1]), kind  # the signal, not the noise


def test_dump_study_speed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps(_two_conversations()), encoding="utf-8")
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    common = ["--data", str(data), "--work-dir", str(work), "--out", str(out)]
    assert locomo_ltr.main(["dump", *common]) == 0
    lines = [json.loads(line) for line in (out / "locomo-ltr.jsonl").read_text().splitlines()]
    turns = [r["turns"] for r in lines if "turns" in r]
    recs = [r for r in lines if "turns" not in r]
    assert len(turns) == 2
    assert len(recs) == 8
    assert np.load(out / f"locomo-ltr-{turns[0]['conv']}.npy").shape == (4, 384)
    first = recs[0]
    assert first["candidates"][0][0] == "D1:1"  # "When did Ana adopt the greyhound?"
    assert len(first["qvec"]) == 384
    for _dia, _score, shares in first["candidates"]:  # per retriever: summed share, best rank, best raw score
        assert shares and all(len(v) == 3 and v[1] >= 1 for v in shares.values())

    report = tmp_path / "study.json"
    args = [*common, "--l2", "1", "--only", "pointwise", "mmr", "--report", str(report)]
    assert locomo_ltr.main(["study", *args]) == 0
    study = json.loads(report.read_text())
    assert {"off", "pointwise l2=1.0", "mmr (list questions)"} <= set(study)
    for name in ("pointwise l2=1.0", "mmr (list questions)"):
        assert set(study[name]["left_out"]) >= {"all", "multi-hop", "temporal", "single-hop"}, name
    assert set(study["pointwise l2=1.0"]["weights"]) == set(locomo_ltr.DEFAULT_FEATURES)

    # the adopted row written as the turn model's file, by command, read by the product's loader
    model_path = tmp_path / "turn_model.json"
    turn = ["--features", *TURN_FEATURES, "--l2", "1", "--skip-kind", "when", "--only", "weighted"]
    assert locomo_ltr.main(["study", *common, *turn, "--write-model", str(model_path)]) == 0
    model = load_turn_model(model_path)
    assert model.features == TURN_FEATURES
    assert model.fit["conversations"] == sorted({r["conv"] for r in recs})
    assert model.fit["l2"] == 1.0 and "--write-model" in model.fit["command"]
    assert model.fit["data"]["records_sha256"] and 0.0 <= model.figures["left_out"] <= 1.0
    with pytest.raises(SystemExit, match="not fitted"):
        locomo_ltr.main(["study", *common, *turn[:-1], "pointwise", "--write-model", str(model_path)])
    assert locomo_ltr.main(["speed", *common]) == 0
    assert "ratio on / off" in capsys.readouterr().out
