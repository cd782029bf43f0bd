"""Compare a recorded output with a new one: everything exact except floats, which compare at a stated tolerance.

Vector maths runs different CPU kernels on different machines (AVX-512 or AVX2, another BLAS
kernel, another ONNX runtime build), so a cosine or a fused score can differ in its 7th or 8th
significant digit while every ranking, node_id, path, text, count and exit code is the same. The
goldens test that behaviour, not the CPU:

- JSON (a section that parses as JSON on both sides) is compared as a tree: the same keys, the
  same list lengths and order, strings, integers, booleans and null exactly, and every float
  within `REL_TOL` of the larger magnitude, or within `ABS_TOL` near zero, or, for a value the
  code stores rounded (`0.7234`, at most 6 decimals), within one unit of its last digit.
- Text is compared token by token: a number printed with decimals (`0.016`, `-1.25`, `3.5e-04`)
  may differ by one unit of its last printed digit (a float rounded by the printer can land on
  either side of a boundary), everything else (words, integers, spaces, punctuation) exactly.

`differences(expected, actual)` lists what differs (empty: the same). Used by test_golden.py for
the CLI goldens and by conftest.py for SVG snapshots of the app.
"""

from __future__ import annotations

import html
import json
import math
import re
from typing import Any

REL_TOL = 1e-5
"""Largest relative difference of two floats in JSON (1e-5: ten times the float32 noise seen across CPUs)."""
ABS_TOL = 1e-9
"""Floats nearer than this to each other count as equal whatever their size (values near zero)."""
ROUNDED_DECIMALS = 6
"""A JSON float written with this many decimals or fewer is taken as rounded by the code (see `_recorded_unit`)."""
MIN_DECIMALS = 4

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_SECTION = re.compile(r"^(--- \w+)\n", re.M)
_TAG = re.compile(r"<[^>]*>")


class _Float(float):
    """A float parsed from JSON that remembers how it was written (for the unit of its last digit)."""

    text: str

    def __new__(cls, text: str) -> _Float:
        value = super().__new__(cls, text)
        value.text = text
        return value


def _last_digit_unit(text: str) -> float:
    """One unit of the last digit a number was written with: '0.016' -> 0.001, '3.5e-04' -> 1e-05, '12' -> 0."""
    mantissa, _, exponent = text.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    if not decimals and not exponent:
        return 0.0
    return 10.0 ** (int(exponent or 0) - decimals)


def _recorded_unit(text: str) -> float:
    """How far a JSON float may move given how it was recorded.

    Python writes a float with the fewest digits that read back exactly, so a value written with
    at most `ROUNDED_DECIMALS` decimals is one the code rounded (`round(x, 4)`) or an exact one
    (1.5): it may differ by one unit of its last digit, counting at least `MIN_DECIMALS` decimals
    (a value rounded to 4 decimals that ends in zeros is written shorter). Longer ones get 0.
    """
    mantissa, _, exponent = text.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    if exponent or decimals > ROUNDED_DECIMALS:
        return 0.0
    return 10.0 ** -max(decimals, MIN_DECIMALS) if decimals < 3 else 10.0**-decimals


def floats_close(expected: float, actual: float, unit: float = 0.0) -> bool:
    """True when two floats are equal at the stated tolerance (`unit`: the recorded last digit's unit)."""
    if math.isnan(expected) or math.isnan(actual):
        return math.isnan(expected) and math.isnan(actual)
    if math.isinf(expected) or math.isinf(actual):
        return expected == actual
    diff = abs(expected - actual)
    # The small factor on `unit` absorbs the binary error of the decimal printing itself.
    return diff <= max(ABS_TOL, REL_TOL * max(abs(expected), abs(actual)), unit * (1 + 1e-9))


def _json(text: str) -> Any:
    try:
        return json.loads(text, parse_float=_Float)
    except ValueError:
        return _NOT_JSON


_NOT_JSON = object()


def _tree(expected: Any, actual: Any, where: str, out: list[str]) -> None:
    """Append a line to `out` for every place where two JSON trees differ beyond the tolerance."""
    if isinstance(expected, bool) or isinstance(actual, bool) or expected is None or actual is None:
        if type(expected) is not type(actual) or expected != actual:
            out.append(f"{where}: {expected!r} != {actual!r}")
        return
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        if isinstance(expected, float) or isinstance(actual, float):
            unit = _recorded_unit(expected.text) if isinstance(expected, _Float) else 0.0
            if not floats_close(float(expected), float(actual), unit):
                out.append(f"{where}: {float(expected)!r} != {float(actual)!r}")
        elif expected != actual:
            out.append(f"{where}: {expected} != {actual}")
        return
    if isinstance(expected, str) and isinstance(actual, str):
        if not text_close(expected, actual):
            out.append(f"{where}: {expected!r} != {actual!r}")
        return
    if isinstance(expected, dict) and isinstance(actual, dict):
        if list(expected) != list(actual):
            out.append(f"{where}: keys {list(expected)} != {list(actual)}")
            return
        for key in expected:
            _tree(expected[key], actual[key], f"{where}.{key}", out)
        return
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            out.append(f"{where}: {len(expected)} items != {len(actual)} items")
        for i, (e, a) in enumerate(zip(expected, actual)):
            _tree(e, a, f"{where}[{i}]", out)
        return
    out.append(f"{where}: {expected!r} != {actual!r}")


def text_close(expected: str, actual: str) -> bool:
    """True when two texts are the same except decimal numbers within one unit of their last printed digit."""
    if expected == actual:
        return True
    e_parts, a_parts = _NUMBER.split(expected), _NUMBER.split(actual)
    if e_parts != a_parts:
        return False
    for e, a in zip(_NUMBER.findall(expected), _NUMBER.findall(actual)):
        if e == a:
            continue
        # A decimal number keeps its form (decimals, width up to a carried digit); integers compare exactly.
        unit = _last_digit_unit(e)
        if not unit or _last_digit_unit(a) != unit or not floats_close(float(e), float(a), unit):
            return False
    return True


def _text_lines(expected: str, actual: str, where: str, out: list[str]) -> None:
    e_lines, a_lines = expected.split("\n"), actual.split("\n")
    if len(e_lines) != len(a_lines):
        out.append(f"{where}: {len(e_lines)} lines != {len(a_lines)} lines")
    for i, (e, a) in enumerate(zip(e_lines, a_lines), 1):
        if not text_close(e, a):
            out.append(f"{where} line {i}:\n  expected {e!r}\n  actual   {a!r}")


def _sections(text: str) -> list[tuple[str, str]]:
    """A golden's parts: the text before the first `--- name` line, then each named section."""
    pieces = _SECTION.split(text)
    parts = [("head", pieces[0])]
    parts += [(pieces[i][4:], pieces[i + 1]) for i in range(1, len(pieces) - 1, 2)]
    return parts


def differences(expected: str, actual: str) -> list[str]:
    """What differs between a recorded output and a new one beyond the float tolerance (empty: the same).

    The output may be split into sections by `--- name` lines (as the CLI goldens are); a section
    that parses as JSON on both sides is compared as JSON, any other as text.
    """
    if expected == actual:
        return []
    e_parts, a_parts = _sections(expected), _sections(actual)
    if [n for n, _ in e_parts] != [n for n, _ in a_parts]:
        return [f"sections {[n for n, _ in e_parts]} != {[n for n, _ in a_parts]}"]
    out: list[str] = []
    for (name, e), (_, a) in zip(e_parts, a_parts):
        if e == a:
            continue
        e_json, a_json = _json(e), _json(a)
        if e_json is not _NOT_JSON and a_json is not _NOT_JSON:
            _tree(e_json, a_json, name, out)
        else:
            _text_lines(e, a, name, out)
    return out


def svg_differences(expected: str, actual: str) -> list[str]:
    """What differs between two SVG screenshots beyond the tolerance of printed numbers.

    Every tag (positions, sizes, colours, classes) compares exactly; the text between tags
    compares as text (a printed score may differ by one unit of its last digit).
    """
    if expected == actual:
        return []
    e_tags, a_tags = _TAG.findall(expected), _TAG.findall(actual)
    if e_tags != a_tags:
        return [
            next(
                (f"tag {i}: {e!r} != {a!r}" for i, (e, a) in enumerate(zip(e_tags, a_tags)) if e != a),
                f"{len(e_tags)} tags != {len(a_tags)} tags",
            )
        ]
    out: list[str] = []
    for i, (e, a) in enumerate(zip(_TAG.split(expected), _TAG.split(actual))):
        e_text, a_text = html.unescape(e), html.unescape(a)
        if not text_close(e_text, a_text):
            out.append(f"text {i}: {e_text!r} != {a_text!r}")
    return out
