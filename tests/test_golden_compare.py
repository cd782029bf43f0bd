"""The golden comparator: a 1-ulp change of every float passes, a changed order, id or count fails.

Runs on the stored goldens and snapshots themselves (no search): what another CPU can change must
pass, what a behaviour change looks like must not.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from golden_compare import differences, floats_close, svg_differences
from golden_update import GOLDEN_DIR

SNAPSHOTS = Path(__file__).resolve().parent / "__snapshots__"
JSON_GOLDENS = sorted(
    p for p in GOLDEN_DIR.glob("*.txt") if "\n--- stdout\n{" in p.read_text(encoding="utf-8")
)
TEXT_GOLDENS = sorted(
    p for p in GOLDEN_DIR.glob("*.txt") if re.search(r"\n--- stdout\n[^{]", p.read_text(encoding="utf-8"))
)
SVGS = sorted(SNAPSHOTS.rglob("*.svg"))
_DECIMAL = re.compile(r"(?<![\w.])(-?)(\d+)\.(\d+)(?![\w.])")


def _split(text: str) -> tuple[str, str, str]:
    head, _, rest = text.partition("--- stdout\n")
    out, _, err = rest.partition("--- stderr\n")
    return head, out, err


def _join(head: str, out: str, err: str) -> str:
    return f"{head}--- stdout\n{out}--- stderr\n{err}"


def _map_floats(data, change):
    if isinstance(data, dict):
        return {k: _map_floats(v, change) for k, v in data.items()}
    if isinstance(data, list):
        return [_map_floats(v, change) for v in data]
    if isinstance(data, float):
        return change(data)
    return data


def _with_json(text: str, change) -> tuple[str, int]:
    """The golden with `change` applied to every float of its JSON stdout, and how many floats there are."""
    head, out, err = _split(text)
    data = json.loads(out)
    seen: list[float] = []
    changed = _map_floats(data, lambda v: (seen.append(v), change(v))[1])
    return _join(head, json.dumps(changed, ensure_ascii=False, indent=2) + "\n", err), len(seen)


def _bump_decimals(text: str, units: int) -> tuple[str, int]:
    """Every decimal number in `text` moved up by `units` of its last printed digit (same width)."""
    count = 0

    def bump(m: re.Match[str]) -> str:
        nonlocal count
        sign, whole, frac = m.groups()
        scaled = int(whole + frac) + (units if not sign else -units)
        digits = str(scaled).rjust(len(whole + frac), "0")
        if len(digits) > len(whole + frac):
            return m.group(0)  # a carry into a new digit changes the layout: not what this test varies
        count += 1
        return f"{sign}{digits[: len(whole)]}.{digits[len(whole) :]}"

    return _DECIMAL.sub(bump, text), count


def test_there_are_goldens_of_each_kind() -> None:
    assert len(JSON_GOLDENS) >= 20 and len(TEXT_GOLDENS) >= 4 and len(SVGS) >= 5


@pytest.mark.parametrize("path", JSON_GOLDENS, ids=lambda p: p.stem)
def test_json_golden_passes_with_every_float_one_ulp_off(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    for direction in (np.inf, -np.inf):
        changed, n = _with_json(text, lambda v, to=direction: float(np.nextafter(v, to)))
        assert differences(text, changed) == []
    # ... and a float changed beyond the tolerance is caught (when the output has one worth changing).
    if n:
        wrong, _ = _with_json(text, lambda v: v * 1.001 + 1e-6)
        assert differences(text, wrong)


@pytest.mark.parametrize("path", TEXT_GOLDENS, ids=lambda p: p.stem)
def test_text_golden_passes_one_unit_of_the_last_digit_and_fails_two(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    head, out, err = _split(text)
    one, n = _bump_decimals(out, 1)
    assert differences(text, _join(head, one, err)) == []
    if n:
        two, _ = _bump_decimals(out, 2)
        assert differences(text, _join(head, two, err))


def test_two_swapped_results_fail_in_json() -> None:
    swapped = 0
    for path in JSON_GOLDENS:
        text = path.read_text(encoding="utf-8")
        head, out, err = _split(text)
        data = json.loads(out)
        results = data.get("results") if isinstance(data, dict) else None
        if not results or len(results) < 2:
            continue
        results[0], results[1] = results[1], results[0]
        assert differences(text, _join(head, json.dumps(data, ensure_ascii=False, indent=2) + "\n", err)), (
            path.name
        )
        swapped += 1
    assert swapped >= 10


def test_two_swapped_result_blocks_fail_in_text() -> None:
    text = (GOLDEN_DIR / "search_text.txt").read_text(encoding="utf-8")
    blocks = text.split("\n\n")
    blocks[1], blocks[2] = blocks[2], blocks[1]
    assert differences(text, "\n\n".join(blocks))


def test_what_is_exact_stays_exact() -> None:
    text = (GOLDEN_DIR / "search_plain_hamster.txt").read_text(encoding="utf-8")
    head, out, err = _split(text)
    data = json.loads(out)
    first = data["results"][0]
    for key in ("node_id", "document_path"):
        if key in first:
            changed = json.loads(out)
            changed["results"][0][key] = first[key] + "x"
            assert differences(
                text, _join(head, json.dumps(changed, ensure_ascii=False, indent=2) + "\n", err)
            )
    assert differences(text, text.replace("exit: 0", "exit: 1", 1))
    assert differences(text, _join(head, out, err + "explorer: warning\n"))
    fewer = json.loads(out)
    fewer["results"].pop()
    assert differences(text, _join(head, json.dumps(fewer, ensure_ascii=False, indent=2) + "\n", err))


def test_tolerance_as_stated() -> None:
    assert floats_close(0.8528868556022644, 0.8528867959976196)  # the difference seen between two CPUs
    assert not floats_close(0.85288, 0.85290)
    assert floats_close(0.0, 5e-10) and not floats_close(0.0, 1e-8)
    assert floats_close(0.7234, 0.72345, unit=1e-4) and not floats_close(0.7234, 0.7236, unit=1e-4)
    assert differences('{"a": 1}', '{"a": 1.0}') == [] and differences('{"a": 1}', '{"a": 2}')
    # A value the code rounds (4 decimals) may land one unit of its last digit away; a full-precision one may not.
    assert differences('{"a": 0.7234}', '{"a": 0.7235}') == [] and differences(
        '{"a": 0.7234}', '{"a": 0.7236}'
    )
    assert differences('{"a": 0.72}', '{"a": 0.7201}') == [] and differences('{"a": 0.72}', '{"a": 0.7202}')
    assert differences('{"a": 0.7234567891234}', '{"a": 0.7234667891234}')
    assert differences('{"a": true}', '{"a": 1}') and differences('{"a": null}', '{"a": 0.0}')
    assert differences("score 0.016 cursor 400", "score 0.017 cursor 400") == []
    assert differences("score 0.016 cursor 400", "score 0.016 cursor 401")
    assert differences("score 0.016", "score 0.0160") and differences("score 0.016", "score 0.018")


@pytest.mark.parametrize("path", SVGS, ids=lambda p: p.stem)
def test_snapshot_passes_with_printed_numbers_one_unit_off(path: Path) -> None:
    svg = path.read_text(encoding="utf-8")
    parts = re.split(r"(<[^>]*>)", svg)
    bumped = 0
    for i in range(0, len(parts), 2):  # text between tags only
        parts[i], n = _bump_decimals(parts[i], 1)
        bumped += n
    assert svg_differences(svg, "".join(parts)) == []
    if bumped:
        for i in range(0, len(parts), 2):
            parts[i], _ = _bump_decimals(parts[i], 1)
        assert svg_differences(svg, "".join(parts))


def test_snapshot_fails_on_swapped_text_or_a_moved_tag() -> None:
    svg = (SNAPSHOTS / "test_tui_snapshots" / "test_snapshot_main_results.svg").read_text(encoding="utf-8")
    texts = [
        t for t in dict.fromkeys(re.findall(r">([^<>]*[A-Za-z][^<>]*)<", svg)) if svg.count(f">{t}<") == 1
    ]
    a, b = texts[5], texts[6]
    swapped = svg.replace(f">{a}<", ">\0<", 1).replace(f">{b}<", f">{a}<", 1).replace(">\0<", f">{b}<", 1)
    assert svg_differences(svg, swapped)
    moved = re.sub(r'x="(\d+)"', lambda m: f'x="{int(m.group(1)) + 1}"', svg, count=1)
    assert svg_differences(svg, moved)
