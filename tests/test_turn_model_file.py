"""The turn model is data: the shipped file matches its record, a damaged file is refused by name, and the
study's writer round-trips through the loader the product uses."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import locomo_ltr
from explorer.search.memory import rescore
from explorer.search.memory.fitted import FIGURE_FIELDS, FIT_FIELDS, ModelFileError

SHIPPED = rescore.TURN_MODEL_FILE


def _raw() -> dict[str, Any]:
    return json.loads(SHIPPED.read_text(encoding="utf-8"))


def test_shipped_file_is_the_turn_model_and_matches_its_hash() -> None:
    doc = _raw()
    assert doc["format"] == "explorer.linear-model" and doc["version"] == 1
    rows = doc["features"]
    assert tuple(r["name"] for r in rows) == rescore.TURN_FEATURES
    # the hash recomputed here from the raw file, not through the loader
    numbers = {k: [r[k] for r in rows] for k in ("mean", "std", "weight")}
    text = json.dumps(
        {"features": [r["name"] for r in rows], **numbers}, sort_keys=True, separators=(",", ":")
    )
    assert hashlib.sha256(text.encode()).hexdigest() == doc["sha256"]
    # what rescore scores with is the file's numbers, exactly
    mean, std, weight = rescore.TURN_MODEL.arrays()
    assert mean.tolist() == numbers["mean"] and std.tolist() == numbers["std"]
    assert weight.tolist() == numbers["weight"]
    assert rescore.load_turn_model() == rescore.TURN_MODEL


def test_shipped_file_records_its_fit_and_figures() -> None:
    model = rescore.load_turn_model()
    for key in FIT_FIELDS:
        assert model.fit.get(key) not in (None, "", []), key
    for key in FIGURE_FIELDS:
        assert model.figures.get(key) not in (None, ""), key
    command = model.fit["command"]
    assert command.startswith("python -m benchmarks.locomo_ltr study") and "--write-model" in command
    assert all(f"'{f}'" in command or f" {f} " in command for f in rescore.TURN_FEATURES)
    assert model.fit["conversations"] == ["conv-26", "conv-30", "conv-41", "conv-42", "conv-43"]
    assert model.fit["l2"] == 1.0
    assert model.figures["left_out"] == pytest.approx(0.842)
    assert model.figures["in_sample"] == pytest.approx(0.843)


def _damaged(tmp_path: Path, change: Callable[[dict[str, Any]], object]) -> Path:
    doc = _raw()
    change(doc)
    path = tmp_path / "turn_model.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda d: d["features"][3].update(weight=0.5), "sha256"),
        (lambda d: d["features"].reverse(), "features"),
        (lambda d: d["features"].pop(), "features"),
        (lambda d: d["features"][0].update(std="0.2"), "not a finite number"),
        (lambda d: d["features"][0].pop("mean"), "lacks"),
        (lambda d: d.update(version=2), "version"),
        (lambda d: d["fit"].pop("command"), "command"),
        (lambda d: d["figures"].pop("left_out"), "left_out"),
    ],
)
def test_a_damaged_file_is_refused_naming_it(
    tmp_path: Path, change: Callable[[dict[str, Any]], object], says: str
) -> None:
    path = _damaged(tmp_path, change)
    with pytest.raises(ModelFileError, match=says) as err:
        rescore.load_turn_model(path)
    assert str(path) in str(err.value)


def test_a_truncated_or_non_finite_file_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "turn_model.json"
    path.write_text(SHIPPED.read_text(encoding="utf-8")[:300], encoding="utf-8")
    with pytest.raises(ModelFileError, match="cannot read") as err:
        rescore.load_turn_model(path)
    assert str(path) in str(err.value)
    path.write_text(SHIPPED.read_text(encoding="utf-8").replace("0.776", "NaN"), encoding="utf-8")
    with pytest.raises(ModelFileError, match="finite"):
        rescore.load_turn_model(path)
    with pytest.raises(ModelFileError, match="cannot read"):
        rescore.load_turn_model(tmp_path / "missing.json")


def _synthetic_fit() -> locomo_ltr.Learner:
    rng = np.random.default_rng(7)
    n = len(rescore.TURN_FEATURES)
    xs, ys = [], []
    for _ in range(30):
        x = rng.normal(size=(20, n)) * rng.uniform(0.1, 2.0, size=n) + rng.normal(size=n)
        y = (x[:, 0] + 0.5 * x[:, 14] > 1.0).astype(float)
        xs.append(x)
        ys.append(y)
    return locomo_ltr.Learner("weighted", 1.0).fit(xs, ys)


def test_the_study_writer_round_trips_through_the_product_loader(tmp_path: Path) -> None:
    learner = _synthetic_fit()
    fit = {
        "command": "python -m benchmarks.locomo_ltr study --write-model x",
        "data": {"file": "synthetic"},
        "conversations": ["a", "b"],
        "split": "all",
        "learner": "logistic",
        "weighting": "weighted",
        "l2": 1.0,
    }
    figures = {"metric": "recall@10", "left_out": 0.5, "in_sample": 0.6}
    path = tmp_path / "models" / "turn_model.json"
    path.parent.mkdir()
    written = locomo_ltr.write_model(path, learner, rescore.TURN_FEATURES, fit, figures)
    loaded = rescore.load_turn_model(path)
    assert loaded == written
    assert loaded.fit == fit and loaded.figures == figures
    # the numbers are the fit's, rounded as the study prints them (5 places, weights 3)
    mean, std, weight = loaded.arrays()
    assert mean.tolist() == learner.mu.round(5).tolist()
    assert std.tolist() == learner.sd.round(5).tolist()
    assert weight.tolist() == [round(float(w), 3) for w in learner.w]
    # and score as the fit does, up to that rounding
    x = np.random.default_rng(1).normal(size=(50, len(rescore.TURN_FEATURES)))
    assert np.allclose(((x - mean) / std) @ weight, learner.score(x), atol=0.05)
    # writing what was loaded gives the same file
    again = tmp_path / "again.json"
    locomo_ltr.write_fitted(again, loaded)
    assert again.read_bytes() == path.read_bytes()


def test_the_writer_refuses_features_the_product_does_not_compute(tmp_path: Path) -> None:
    learner = _synthetic_fit()
    names = list(rescore.TURN_FEATURES)
    names[0], names[1] = names[1], names[0]
    with pytest.raises(SystemExit, match="features"):
        locomo_ltr.write_model(tmp_path / "m.json", learner, names, {}, {})
    assert not (tmp_path / "m.json").exists()
