"""Every setting is checked when the config is loaded: type, allowed words, range, finiteness, with one message naming
the file, the key, the value and what is allowed; unknown keys are warned about with a "did you mean"."""

from __future__ import annotations

import os
import subprocess
import sys
import typing
from dataclasses import fields
from pathlib import Path

import pytest

from conftest import REPO, write_notes
from explorer.config import ConfigError, OneOf, Range, Settings, field_specs, load_settings


def write_config(vault: Path, text: str) -> Path:
    path = vault / ".explorer" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ("[search]\ntop_k = 0\n", "'search.top_k' must be a whole number from 1 to 1000, got 0"),
        ("[search]\ntop_k = 2.5\n", "'search.top_k' must be a whole number from 1 to 1000, got 2.5"),
        (
            "[experimental]\ndense_threshold = nan\n",
            "'experimental.dense_threshold' must be a finite number from -1 to 1, got nan",
        ),
        ("[search]\nmax_terms = 7\n", "'search.max_terms' must be a whole number from 0 to 5, got 7"),
        ("[llm]\ntimeout_s = inf\n", "'llm.timeout_s' must be a finite number from 0.1 to 3600, got inf"),
        ("[llm]\ntimeout_s = -1.0\n", "'llm.timeout_s' must be a finite number from 0.1 to 3600, got -1.0"),
        (
            "[vault]\nmax_note_bytes = -3\n",
            "'vault.max_note_bytes' must be a whole number of at least 1, got -3",
        ),
        (
            '[experimental]\nterm_retrievers = "hybrid"\n',
            "'experimental.term_retrievers' must be one of both, bm25, dense, got 'hybrid'",
        ),
        (
            '[rerank]\nbackend = "gpt"\n',
            "'rerank.backend' must be one of local, cross-encoder, llm, none, got 'gpt'",
        ),
        (
            '[experimental]\nruntime = "cuda"\n',
            "'experimental.runtime' must be one of auto, onnx, sentence-transformers",
        ),
        ('[vault]\nignore = "drafts/"\n', "'vault.ignore' must be a list of strings, got 'drafts/'"),
        ("[vault]\nignore = [1, 2]\n", "'vault.ignore' must be a list of strings, got [1, 2]"),
        (
            '[experimental]\nsource_weights = {fact = "heavy"}\n',
            "'experimental.source_weights' must be a table of names to finite numbers from 0 to 100, got {'fact': 'heavy'}",
        ),
        (
            "[experimental]\nsource_weights = {fact = -2.0}\n",
            "'experimental.source_weights' must be a table of names to finite numbers",
        ),
        ('[search]\ntop_k = "15"\n', "'search.top_k' must be a whole number from 1 to 1000, got '15'"),
        ('[index]\nembeddings = "yes"\n', "'index.embeddings' must be true or false, got 'yes'"),
        ("[ui]\ntheme = 3\n", "'ui.theme' must be a string, got 3"),
    ],
)
def test_bad_values_are_refused_with_file_key_value_and_what_is_allowed(
    tmp_path: Path, toml: str, needle: str
) -> None:
    path = write_config(tmp_path, toml)
    with pytest.raises(ConfigError) as err:
        load_settings(tmp_path, environ={}, warn=lambda m: None)
    assert str(err.value).startswith(f"{path}: ")
    assert needle in str(err.value)


def test_good_values_of_every_kind_load(tmp_path: Path) -> None:
    write_config(
        tmp_path,
        '[search]\ntop_k = 7\n[experimental]\nsource_weights = {fact = 2, belief = 0.5}\nterm_retrievers = "bm25"\n'
        'recency_weight = 1\n[vault]\nignore = ["drafts/"]\nsource_types = [["**/x/**", "fact"]]\n',
    )
    s = load_settings(tmp_path, environ={})
    x = s.experimental
    assert s.search.top_k == 7 and x.source_weights == (("fact", 2.0), ("belief", 0.5))
    assert x.recency_weight == 1.0 and isinstance(x.recency_weight, float)
    assert s.vault.ignore == ("drafts/",) and s.vault.source_types == (("**/x/**", "fact"),)


def test_environment_and_flags_are_converted_then_checked() -> None:
    s = load_settings(
        None,
        environ={"EXPLORER_SEARCH_TOP_K": "4", "EXPLORER_EXPERIMENTAL_SOURCE_WEIGHTS": "fact=2,belief=1"},
    )
    assert s.search.top_k == 4 and s.experimental.source_weights == (("fact", 2.0), ("belief", 1.0))
    with pytest.raises(
        ConfigError, match=r"environment: 'llm.timeout_s' must be a finite number .* got 'nan'"
    ):
        load_settings(None, environ={"EXPLORER_LLM_TIMEOUT_S": "nan"})
    with pytest.raises(
        ConfigError, match=r"flags: 'experimental.analyser' must be one of auto, llm, heuristic, got 'gpt'"
    ):
        Settings().with_overrides({"experimental.analyser": "gpt"})
    with pytest.raises(ConfigError, match=r"flags: unknown key 'search.topk'; did you mean 'top_k'\?"):
        Settings().with_overrides({"search.topk": "3"})


def test_unknown_keys_and_sections_are_warned_with_a_suggestion(tmp_path: Path) -> None:
    path = write_config(tmp_path, "[search]\ntopk = 3\ntop_k = 4\n[serch]\nx = 1\n")
    warnings: list[str] = []
    s = load_settings(tmp_path, environ={"EXPLORER_LLM_MODLE": "x"}, warn=warnings.append)
    assert s.search.top_k == 4
    assert warnings == [
        f"{path}: unknown key 'search.topk' is ignored; did you mean 'top_k'?",
        f"{path}: unknown section 'serch' is ignored; did you mean 'search'?",
        "environment: unknown key 'llm.modle' is ignored; did you mean 'model'?",
    ]


def test_every_setting_has_a_type_the_loader_checks() -> None:
    """A setting added to any section is validated from the moment it is declared: its type is one the loader
    converts and checks, and its rule (if any) fits the type."""
    simple = {bool, int, float, str}
    for section in fields(Settings):
        for name, (kind, rule) in field_specs(
            section.type if isinstance(section.type, type) else type(getattr(Settings(), section.name))
        ).items():
            if kind in simple:
                assert not isinstance(rule, OneOf) or kind is str, name
                assert not isinstance(rule, Range) or kind in (int, float), name
                continue
            assert typing.get_origin(kind) is tuple, f"{section.name}.{name}: {kind} is not checked on load"
            args = typing.get_args(kind)
            assert args[0] is str or typing.get_args(args[0]) in ((str, str), (str, float)), name


def test_cli_refuses_a_bad_config_and_warns_about_a_typo(tmp_path: Path) -> None:
    vault = write_notes(tmp_path / "v", {"a.md": "# A\n\nkites fly in wind\n"})
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "explorer", "search", "kites", "--vault", str(vault), "--no-embeddings"]

    path = write_config(vault, "[experimental]\nrrf_k = nan\n")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (
        f"explorer: configuration error: {path}: 'experimental.rrf_k' must be a whole number "
        "from 0 to 100000, got nan"
    )

    write_config(vault, "[search]\ntop_kk = 3\n")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 0 and "a.md" in proc.stdout
    assert (
        f"explorer: warning: {path}: unknown key 'search.top_kk' is ignored; did you mean 'top_k'?"
        in proc.stderr
    )


def test_the_app_shows_settings_warnings(tmp_path: Path) -> None:
    from conftest import make_app, settle, sync
    from test_terminal_safety import shown, visible_text

    vault = write_notes(tmp_path / "v", {"a.md": "# A\n\nkites\n"})
    path = write_config(vault, "[search]\ntop_kk = 3\n")
    notices: list[str] = []
    settings = load_settings(vault, {"index.embeddings": False}, environ={}, warn=notices.append)

    @sync
    async def run() -> None:
        app = make_app(vault, None, tmp_path, settings=settings, notices=notices)
        async with app.run_test(size=(160, 50), notifications=True) as pilot:
            await settle(app, pilot)
            text = visible_text(await shown(app, pilot, "Configuration"))
            assert "Configuration" in text and "'search.top_kk'" in text  # the toast wraps the rest

    run()
    assert notices == [f"{path}: unknown key 'search.top_kk' is ignored; did you mean 'top_k'?"]


def test_a_removed_key_warns_once_naming_it_and_what_to_do(tmp_path: Path) -> None:
    """Keys that are no longer settings (tuning values, fixed constants, alternatives that lost on the
    benchmarks, `llm.rerank`) never crash a config: each gets one warning naming it and what to do,
    and the search answers as with the defaults."""
    vault = write_notes(tmp_path / "v", {"a.md": "# A\n\nkites fly in wind\n"})
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable,
        "-m",
        "explorer",
        "search",
        "kites",
        "--vault",
        str(vault),
        "--no-embeddings",
        "--json",
    ]
    plain = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert plain.returncode == 0 and plain.stderr == ""

    path = write_config(
        vault,
        "[search]\nneighbour_weight = 0.2\nrrf_k = 20\nkeyword_terms = 3\n"
        "[index]\nbm25_k1 = 2.0\n[llm]\nrerank = true\n",
    )
    env_removed = {**env, "EXPLORER_SEARCH_FEEDBACK_LIST": "new"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env_removed, cwd=REPO, timeout=120)
    assert proc.returncode == 0
    assert _without_timings(proc.stdout) == _without_timings(plain.stdout)  # the values were ignored
    lines = proc.stderr.strip().splitlines()
    expected = {
        "search.neighbour_weight": "the alternative is gone",
        "search.rrf_k": "or set rrf_k under [experimental]",
        "search.keyword_terms": "the alternative is gone",
        "index.bm25_k1": "it is fixed at 1.5",
        "llm.rerank": 'set rerank.backend = "llm" with rerank.enabled = true instead',
    }
    for key, advice in expected.items():
        [line] = [ln for ln in lines if f"'{key}'" in ln]
        assert line.startswith(f"explorer: warning: {path}: '{key}' is no longer a setting and is ignored; ")
        assert advice in line and "remove it" in line
    [line] = [ln for ln in lines if "'search.feedback_list'" in ln]
    assert line.startswith("explorer: warning: environment: 'search.feedback_list' is no longer a setting")
    assert "unset EXPLORER_SEARCH_FEEDBACK_LIST" in line
    assert len(lines) == len(expected) + 1

    # A flag is typed for this command: a removed key there is an error with the same advice.
    flag = subprocess.run(
        [*cmd, "--set", "search.rrf_k=20"], capture_output=True, text=True, env=env, cwd=REPO, timeout=120
    )
    assert flag.returncode == 2 and flag.stdout == ""
    assert "flags: 'search.rrf_k' is no longer a setting" in flag.stderr
    # It stopped the command, so it does not say "ignored": it says what to type instead.
    [flag_line] = [ln for ln in flag.stderr.splitlines() if "flags:" in ln]
    assert "ignored" not in flag_line and "--set experimental.rrf_k=20" in flag_line


def test_experimental_values_apply_and_warn_once(tmp_path: Path) -> None:
    path = write_config(tmp_path, "[experimental]\nrrf_k = 20\ncandidates = 50\n")
    warnings: list[str] = []
    s = load_settings(
        tmp_path,
        {"experimental.name_weight": "0"},
        environ={"EXPLORER_EXPERIMENTAL_RRF_K": "30"},
        warn=warnings.append,
    )
    assert (s.experimental.rrf_k, s.experimental.candidates, s.experimental.name_weight) == (30, 50, 0.0)
    assert len(warnings) == 1 and str(path) not in warnings[0]
    assert warnings[0].startswith("experimental.candidates, experimental.rrf_k: experimental tuning")
    quiet: list[str] = []
    load_settings(tmp_path / "none", environ={}, warn=quiet.append)
    assert quiet == []


def test_at_most_30_user_settings_and_the_configuration_page_lists_exactly_them() -> None:
    import re

    user = {
        f"{section.name}.{name}"
        for section in fields(Settings)
        if section.name != "experimental"
        for name in field_specs(type(getattr(Settings(), section.name)))
    }
    assert len(user) <= 30
    page = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    table = page.split("| Setting |", 1)[1].split("\n\n", 1)[0]
    listed = set(re.findall(r"^\| `([a-z_]+\.[a-z_]+)` \|", table, re.MULTILINE))
    assert listed == user


def _without_timings(text: str) -> list[tuple[str, float]]:
    import json

    return [(r["document_path"], r["score"]) for r in json.loads(text)["results"]]
