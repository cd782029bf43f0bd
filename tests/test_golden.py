"""Golden outputs: `explorer search --json` / find / context on sample_vault stay the same.

The expected files live in tests/golden/; rewrite them on purpose with `python -m tests.golden_update`
(see that module) and explain the change in the commit message. Everything compares exactly except
floats, which compare at the tolerance stated in golden_compare.py (other CPUs run other kernels).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import seed_vectors
from golden_compare import differences
from golden_update import CASES, golden_path, prepare_vault, run_case


@pytest.fixture(scope="module")
def golden_vault(tmp_path_factory: pytest.TempPathFactory, sample_index) -> Path:
    """One indexed copy of sample_vault shared by every case (its vectors those of the shared sample
    index: the command line builds the index without embedding the vault again)."""
    return prepare_vault(
        tmp_path_factory.mktemp("golden") / "vault", seed=lambda v: seed_vectors(v, sample_index)
    )


def test_every_case_has_a_golden_file() -> None:
    missing = [name for name in CASES if not golden_path(name).is_file()]
    assert not missing, f"no golden file for {missing}: run python -m tests.golden_update"


@pytest.mark.parametrize("name", sorted(CASES))
def test_output_matches_golden(name: str, golden_vault: Path, cli_model) -> None:
    """The command's output is the golden file's (the model loaded once per process: `cli_model`)."""
    expected = golden_path(name).read_text(encoding="utf-8")
    actual = run_case(name, golden_vault)
    diff = differences(expected, actual)
    assert not diff, f"{name}: output changed (intended? run python -m tests.golden_update):\n" + "\n".join(
        diff[:20]
    )
