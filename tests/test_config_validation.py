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
        ("[index]\nbm25_k1 = nan\n", "'index.bm25_k1' must be a finite number from 0 to 10, got nan"),
        ("[llm]\ntimeout_s = inf\n", "'llm.timeout_s' must be a finite number from 0.1 to 3600, got inf"),
        ("[llm]\ntimeout_s = -1.0\n", "'llm.timeout_s' must be a finite number from 0.1 to 3600, got -1.0"),
        (
            "[vault]\nmax_note_shards = -3\n",
            "'vault.max_note_shards' must be a whole number of at least 1, got -3",
        ),
        (
            '[search]\nterm_retrievers = "hybrid"\n',
            "'search.term_retrievers' must be one of both, bm25, dense, got 'hybrid'",
        ),
        (
            '[rerank]\nbackend = "gpt"\n',
            "'rerank.backend' must be one of local, cross-encoder, llm, none, got 'gpt'",
        ),
        ('[index]\nruntime = "cuda"\n', "'index.runtime' must be one of auto, onnx, sentence-transformers"),
        ('[vault]\nignore = "drafts/"\n', "'vault.ignore' must be a list of strings, got 'drafts/'"),
        ("[vault]\nignore = [1, 2]\n", "'vault.ignore' must be a list of strings, got [1, 2]"),
        (
            '[search]\nsource_weights = {fact = "heavy"}\n',
            "'search.source_weights' must be a table of names to finite numbers from 0 to 100, got {'fact': 'heavy'}",
        ),
        (
            "[search]\nsource_weights = {fact = -2.0}\n",
            "'search.source_weights' must be a table of names to finite numbers",
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
        '[search]\ntop_k = 7\nsource_weights = {fact = 2, belief = 0.5}\nterm_retrievers = "bm25"\n'
        '[index]\nbm25_b = 1\n[vault]\nignore = ["drafts/"]\nsource_types = [["**/x/**", "fact"]]\n',
    )
    s = load_settings(tmp_path, environ={})
    assert s.search.top_k == 7 and s.search.source_weights == (("fact", 2.0), ("belief", 0.5))
    assert s.index.bm25_b == 1.0 and isinstance(s.index.bm25_b, float)
    assert s.vault.ignore == ("drafts/",) and s.vault.source_types == (("**/x/**", "fact"),)


def test_environment_and_flags_are_converted_then_checked() -> None:
    s = load_settings(
        None, environ={"EXPLORER_SEARCH_TOP_K": "4", "EXPLORER_SEARCH_SOURCE_WEIGHTS": "fact=2,belief=1"}
    )
    assert s.search.top_k == 4 and s.search.source_weights == (("fact", 2.0), ("belief", 1.0))
    with pytest.raises(
        ConfigError, match=r"environment: 'llm.timeout_s' must be a finite number .* got 'nan'"
    ):
        load_settings(None, environ={"EXPLORER_LLM_TIMEOUT_S": "nan"})
    with pytest.raises(
        ConfigError, match=r"flags: 'search.analyser' must be one of auto, llm, heuristic, got 'gpt'"
    ):
        Settings().with_overrides({"search.analyser": "gpt"})
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

    path = write_config(vault, "[search]\nrrf_k = nan\n")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (
        f"explorer: configuration error: {path}: 'search.rrf_k' must be a whole number "
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
