"""Fitted models as data files: a linear scorer's numbers with the record of how they were fitted.

A model file (JSON, `format` FORMAT, `version` VERSION) holds, per feature in order, its name, the
mean and standard deviation the fit standardised it by and its weight (the score of a row `x` is
`sum(weight * (x - mean) / std)`), a `sha256` of those numbers (`numbers_sha256`), the record of
the fit (`fit`: the command that fits it, the data, the split, the learner, its weighting and L2)
and its figures (`figures`: the metric, left out and in-sample). Files are written by the command
that fits them (`write_model`), never edited by hand: `load_model` refuses a file whose numbers do
not match their hash, whose features are not the ones the code computes, or whose record is missing,
with an error naming the file.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from explorer.text.files import write_atomic

__all__ = [
    "FIGURE_FIELDS",
    "FIT_FIELDS",
    "FORMAT",
    "VERSION",
    "LinearModel",
    "ModelFileError",
    "load_model",
    "numbers_sha256",
    "write_model",
]

FORMAT = "explorer.linear-model"
VERSION = 1
#: What every model file records of its fit.
FIT_FIELDS = ("command", "data", "conversations", "split", "learner", "weighting", "l2")
#: What every model file records of its figures.
FIGURE_FIELDS = ("metric", "left_out", "in_sample")


class ModelFileError(ValueError):
    """A model file that cannot be used: unreadable, damaged, or not the model the code expects."""


@dataclass(frozen=True, slots=True)
class LinearModel:
    """A linear scorer over standardised features, and the record of its fit."""

    features: tuple[str, ...]
    """The feature names, in the order of a row."""
    mean: tuple[float, ...]
    """Per feature, the mean it is standardised by."""
    std: tuple[float, ...]
    """Per feature, the standard deviation it is standardised by (> 0)."""
    weight: tuple[float, ...]
    """Per feature, its weight on the standardised value."""
    fit: Mapping[str, Any] = field(default_factory=dict)
    """How it was fitted: at least FIT_FIELDS."""
    figures: Mapping[str, Any] = field(default_factory=dict)
    """What it measured: at least FIGURE_FIELDS."""

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Mean, standard deviation and weight as float arrays."""
        return np.array(self.mean), np.array(self.std), np.array(self.weight)

    @property
    def sha256(self) -> str:
        """The hash of its numbers (numbers_sha256)."""
        return numbers_sha256(self.features, self.mean, self.std, self.weight)


def numbers_sha256(
    features: Sequence[str], mean: Sequence[float], std: Sequence[float], weight: Sequence[float]
) -> str:
    """SHA-256 of the compact JSON (keys sorted) of {"features", "mean", "std", "weight"}."""
    doc = {"features": list(features), "mean": list(mean), "std": list(std), "weight": list(weight)}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _document(model: LinearModel) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "score": "sum over features of weight * (x - mean) / std",
        "features": [
            {"name": n, "mean": m, "std": s, "weight": w}
            for n, m, s, w in zip(model.features, model.mean, model.std, model.weight, strict=True)
        ],
        "sha256": model.sha256,
        "fit": dict(model.fit),
        "figures": dict(model.figures),
    }


def write_model(path: Path, model: LinearModel) -> None:
    """Write `model` to `path` (atomically), after checking it as `load_model` would read it."""
    _check(model, path, model.features)
    write_atomic(Path(path), _render(_document(model)))


def _render(doc: dict[str, Any]) -> str:
    """The document as indented JSON with one line per feature."""
    dump = lambda v, **kw: json.dumps(v, ensure_ascii=False, allow_nan=False, **kw)  # noqa: E731
    parts = []
    for key, value in doc.items():
        if key == "features":
            rows = ",\n".join(f"  {dump(r)}" for r in value)
            parts.append(f' "features": [\n{rows}\n ]')
        else:
            parts.append(f" {dump(key)}: " + dump(value, indent=1).replace("\n", "\n "))
    return "{\n" + ",\n".join(parts) + "\n}\n"


def _number(value: object, what: str, path: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ModelFileError(f"{path}: {what} is {value!r}, not a finite number")
    return float(value)


def _check(model: LinearModel, path: Path, features: Sequence[str]) -> None:
    if tuple(model.features) != tuple(features):
        raise ModelFileError(
            f"{path}: features {list(model.features)} are not the ones the code computes {list(features)}"
        )
    n = len(features)
    for name, values in (("mean", model.mean), ("std", model.std), ("weight", model.weight)):
        if len(values) != n:
            raise ModelFileError(f"{path}: {len(values)} values of {name} for {n} features")
        for f, v in zip(features, values):
            _number(v, f"{name} of {f!r}", path)
    if any(s <= 0 for s in model.std):
        raise ModelFileError(f"{path}: a standard deviation is not positive")
    for part, wanted in (("fit", FIT_FIELDS), ("figures", FIGURE_FIELDS)):
        record = getattr(model, part)
        missing = [k for k in wanted if k not in record or record[k] in (None, "", [])]
        if missing:
            raise ModelFileError(f"{path}: the {part} record lacks {', '.join(missing)}")


def load_model(path: Path, features: Sequence[str]) -> LinearModel:
    """The model in `path`, checked: its format and version, `features` in order, finite numbers, its hash
    and its record. Raises ModelFileError naming the file."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ModelFileError(f"{path}: cannot read the model file ({e})") from e
    if not isinstance(doc, dict):
        raise ModelFileError(f"{path}: not a model file (a JSON object expected)")
    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise ModelFileError(
            f"{path}: format {doc.get('format')!r} version {doc.get('version')!r}, expected {FORMAT!r} version {VERSION}"
        )
    rows = doc.get("features")
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ModelFileError(f"{path}: `features` is not a list of objects")
    try:
        names = tuple(str(r["name"]) for r in rows)
        mean, std, weight = (
            tuple(_number(r[k], f"{k} of {r['name']!r}", path) for r in rows)
            for k in ("mean", "std", "weight")
        )
    except KeyError as e:
        raise ModelFileError(f"{path}: a feature lacks {e}") from e
    fit, figures = doc.get("fit"), doc.get("figures")
    if not isinstance(fit, dict) or not isinstance(figures, dict):
        raise ModelFileError(f"{path}: the `fit` or `figures` record is missing")
    model = LinearModel(names, mean, std, weight, fit, figures)
    _check(model, path, features)
    if doc.get("sha256") != model.sha256:
        raise ModelFileError(f"{path}: the numbers do not match their recorded sha256 (edited by hand?)")
    return model
