"""Settings: defaults, config.toml, environment and flags, and clear errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.config import ConfigError, Settings, cache_dir_for, load_settings


def _write(vault: Path, text: str) -> None:
    (vault / ".explorer").mkdir(parents=True, exist_ok=True)
    (vault / ".explorer" / "config.toml").write_text(text, encoding="utf-8")


def test_defaults_follow_the_design() -> None:
    from explorer.index.local.lexical import BM25_B, BM25_EPSILON, BM25_K1
    from explorer.search.core.twopass import PASS1_ENTRIES, PASS2_ENTRIES, PASS2_SHARDS
    from explorer.search.rerank import RerankPolicy

    s = Settings()
    assert (BM25_K1, BM25_B, BM25_EPSILON) == (1.5, 0.75, 0.25)
    x = s.experimental
    assert x.rrf_k == 60 and s.search.top_k == 15 and x.dense_threshold == 0.40
    assert dict(x.source_weights)["fact"] == 1.5
    assert (PASS1_ENTRIES, x.pass1_shards, PASS2_ENTRIES, PASS2_SHARDS) == (10, 3, 5, 2)
    policy = RerankPolicy.from_settings(s)
    assert (
        policy.pass1_candidates,
        policy.pass1_timeout_ms,
        policy.pass2_candidates,
        policy.pass2_timeout_ms,
    ) == (30, 80, 100, 150)
    assert not s.llm.configured


def test_layers_override_in_order(tmp_path: Path) -> None:
    _write(
        tmp_path,
        '[search]\ntop_k = 7\n[experimental]\nrrf_k = 30\n[vault]\nignore = ["Archive/**"]\n'
        "[experimental.source_weights]\nfact = 2.0\nbelief = 1.2\n",
    )
    env = {
        "EXPLORER_EXPERIMENTAL_RRF_K": "20",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
        "EXPLORER_LLM_MODEL": "tiny",
    }
    s = load_settings(tmp_path, flags={"experimental.rrf_k": "10"}, environ=env)
    assert s.search.top_k == 7
    assert s.experimental.rrf_k == 10
    assert s.vault.ignore == ("Archive/**",)
    assert dict(s.experimental.source_weights) == {"fact": 2.0, "belief": 1.2}
    assert s.llm.configured and s.llm.model == "tiny"


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ("[search]\ntop_kk = 3\n", "search.top_kk"),
        ("[serch]\ntop_k = 3\n", "unknown section 'serch'"),
        ('[search]\ntop_k = "many"\n', "'search.top_k' must be a whole number"),
        ("[index]\nembeddings = 3\n", "'index.embeddings' must be true or false"),
        ("[search\n", "not valid TOML"),
        ("top_k = 3\n", "'top_k' must be a [section] table"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, toml: str, needle: str) -> None:
    _write(tmp_path, toml)
    with pytest.raises(ConfigError) as err:
        load_settings(tmp_path, environ={})
    assert needle in str(err.value)
    assert "config.toml" in str(err.value)


def test_bad_env_and_flag_values() -> None:
    with pytest.raises(ConfigError, match=r"environment: 'search.top_k'"):
        load_settings(None, environ={"EXPLORER_SEARCH_TOP_K": "x"})
    with pytest.raises(ConfigError, match=r"section.key"):
        Settings().with_overrides({"top_k": 3})


def test_cache_dir(tmp_path: Path) -> None:
    assert cache_dir_for(tmp_path, Settings()) == tmp_path / ".explorer"
    s = Settings().with_overrides({"index.cache_dir": str(tmp_path / "elsewhere")})
    assert cache_dir_for(tmp_path, s) == tmp_path / "elsewhere"


def test_cli_reports_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from explorer.cli import main

    (tmp_path / "a.md").write_text("x", encoding="utf-8")
    _write(tmp_path, "[search]\ntop_k = -1\n")
    assert main(["search", "x", "--vault", str(tmp_path)]) == 2
    assert "search.top_k" in capsys.readouterr().err
