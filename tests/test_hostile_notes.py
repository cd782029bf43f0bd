"""Hostile or broken notes (alias bombs, bad YAML, 200,000 sections, huge one-liners, random bytes) never abort a
batch or exhaust memory: the note is skipped or capped with a recorded reason, every other note stays searchable."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REPO, write_notes
from explorer.config import Settings
from explorer.index.local.vault_index import VaultIndex
from explorer.search.core.pipeline import SearchPipeline

NEIGHBOURS = {
    "Pets/hamster.md": "# Hamster\n\nThe hamster sleeps in a nest of paper bedding.\n",
    "Coffee/brew.md": "# Brew\n\nPour-over coffee wants water at 94 degrees.\n",
}


def billion_laughs(levels: int = 9) -> str:
    """YAML whose expansion holds 9**levels strings (9**9 = 387 million)."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines)


def bm25_settings(**overrides) -> Settings:
    return Settings().with_overrides({"index.embeddings": False, "rerank.enabled": False, **overrides})


def paths_found(index: VaultIndex, query: str) -> set[str]:
    results = SearchPipeline(index, index.settings).search(query, dense=False, two_pass=False)
    return {r.document_path for r in results.results}


def run_cli(*args: str, vault: Path, memory_mb: int | None = None) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        if memory_mb:
            resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "explorer", *args, "--vault", str(vault), "--no-embeddings"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
        preexec_fn=limit,
    )


def test_alias_bomb_in_frontmatter_costs_a_warning_not_the_memory(tmp_path: Path) -> None:
    """A billion-laughs frontmatter under a 2 GB address-space limit: the batch completes in a real process."""
    vault = write_notes(
        tmp_path / "vault",
        {
            **NEIGHBOURS,
            "bomb.md": f"---\n{billion_laughs()}\n---\n# Bomb\n\nThe bomb note mentions a hamster too.\n",
            "loop.md": "---\nself: &s [*s, *s]\n---\nA self-referencing alias about coffee.\n",
        },
    )
    proc = run_cli("index", "--json", vault=vault, memory_mb=2048)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["notes"] == 4 and report["skipped"] == {}
    assert set(report["warnings"]) == {"bomb.md", "loop.md"}
    assert "frontmatter too large or complex" in report["warnings"]["bomb.md"][0]
    found = run_cli("search", "hamster", "--json", vault=vault)
    assert {"Pets/hamster.md", "bomb.md"} <= {r["document_path"] for r in json.loads(found.stdout)["results"]}


def test_broken_yaml_values_do_not_abort_the_batch(tmp_path: Path) -> None:
    """Frontmatter that libyaml parses but cannot build (a month 13 date, a 5,000-digit number) used to raise out
    of the batch, losing every other change in it."""
    vault = write_notes(
        tmp_path / "vault",
        {
            **NEIGHBOURS,
            "date.md": "---\ncreated: 2024-13-45\n---\nA note with an impossible date about hamster food.\n",
            "digits.md": "---\nn: " + "9" * 5000 + "\n---\nA long number.\n",
            "tab.md": "---\ntitle: [unclosed\n\t- x\n---\nMalformed.\n",
        },
    )
    index = VaultIndex(vault, bm25_settings())
    report = index.open()
    assert sorted(report.added) == sorted([*NEIGHBOURS, "date.md", "digits.md", "tab.md"])
    warnings = index.warnings()
    assert "month must be in 1..12" in warnings["date.md"][0]
    assert "digits" in warnings["digits.md"][0] and "malformed frontmatter" in warnings["tab.md"][0]
    assert {"Pets/hamster.md", "date.md"} <= paths_found(index, "hamster")
    index.close()


def test_a_note_of_200000_sections_is_capped_with_a_reason(tmp_path: Path, monkeypatch) -> None:
    big = "".join(f"## Entry {i}\nline {i}\n" for i in range(200_000))
    vault = write_notes(
        tmp_path / "vault", {**NEIGHBOURS, "log.md": big + "## Last\nzebra at the very end\n"}
    )
    monkeypatch.setattr("explorer.vault.shard.MAX_NOTE_SHARDS", 500)
    index = VaultIndex(vault, bm25_settings())
    index.open()
    assert len(index.shards_by_path["log.md"]) == 500
    (warning,) = index.warnings()["log.md"]
    assert warning.startswith("truncated: 200,001 sections") and "the limit of 500 shards per note" in warning
    assert "Pets/hamster.md" in paths_found(index, "hamster")
    assert "log.md" in paths_found(index, "entry")
    assert "log.md" not in paths_found(index, "zebra")  # past the cut: left out, as the warning says
    index.close()

    # The warning is stored with the note: another process lists it.
    stats = run_cli("stats", vault=vault)
    assert "indexed with warnings (truncated, frontmatter ignored): 1" in stats.stdout
    assert "log.md: truncated: 200,001 sections" in stats.stdout


def test_one_long_line_is_capped_and_a_huge_one_skipped(tmp_path: Path, monkeypatch) -> None:
    vault = write_notes(tmp_path / "vault", NEIGHBOURS)
    (vault / "huge.md").write_text("word " * 6_000_000, encoding="utf-8")  # 30 MB on one line
    (vault / "long.md").write_text("lorem ipsum dolor " * 200_000, encoding="utf-8")  # 3.6 MB on one line
    monkeypatch.setattr("explorer.vault.shard.MAX_NOTE_SHARDS", 300)
    index = VaultIndex(vault, bm25_settings())
    index.open()
    assert index.skipped["huge.md"].startswith("too large: 30.0 MB")
    assert len(index.shards_by_path["long.md"]) == 300
    assert index.warnings()["long.md"][0].startswith("truncated: only the first 300 of")
    assert "Coffee/brew.md" in paths_found(index, "coffee")
    index.close()


yaml_scalars = st.one_of(
    st.text(max_size=20), st.integers(), st.floats(allow_nan=True), st.booleans(), st.none()
)
yaml_docs = st.recursive(
    yaml_scalars,
    lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=20,
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    raw=st.lists(st.binary(max_size=300), min_size=1, max_size=3),
    docs=st.lists(yaml_docs, max_size=3),
    yaml_text=st.text(alphabet=st.sampled_from(list("&*!|>-:[]{},'\"#%@` \n\tab1")), max_size=120),
)
def test_random_bytes_and_yaml_never_abort_a_batch(tmp_path_factory, raw, docs, yaml_text) -> None:
    """Random bytes and random (valid and invalid) YAML frontmatter as notes: the batch completes, each file is
    indexed or skipped with a reason, and the neighbours stay searchable."""
    import yaml

    vault = write_notes(tmp_path_factory.mktemp("prop") / "vault", NEIGHBOURS)
    for i, data in enumerate(raw):
        (vault / f"bytes{i}.md").write_bytes(data)
    for i, doc in enumerate(docs):
        dumped = yaml.safe_dump(doc, allow_unicode=True)
        (vault / f"yaml{i}.md").write_text(
            f"---\n{dumped}---\nbody {i}\n", encoding="utf-8", errors="surrogatepass"
        )
    (vault / "free.md").write_text(f"---\n{yaml_text}\n---\nfree text\n", encoding="utf-8")
    index = VaultIndex(vault, bm25_settings())
    report = index.open()
    files = {p.relative_to(vault).as_posix() for p in vault.rglob("*.md")}
    assert set(report.added) | set(report.skipped) == files
    assert all(reason for reason in report.skipped.values())
    assert "Pets/hamster.md" in paths_found(index, "hamster nest")
    assert "Coffee/brew.md" in paths_found(index, "coffee water")
    index.close()


def test_app_lists_skipped_and_warned_files(tmp_path: Path) -> None:
    """The app says, once the index is open, which files were left out or only partly read, and why."""
    from conftest import make_app, quiet_settings, settle, sync
    from test_terminal_safety import shown, visible_text

    vault = write_notes(
        tmp_path / "vault", {**NEIGHBOURS, "date.md": "---\ncreated: 2024-13-45\n---\nbody\n"}
    )
    (vault / "blob.md").write_bytes(b"\x00\x01\x02 binary")

    @sync
    async def run() -> None:
        app = make_app(vault, None, tmp_path, settings=quiet_settings(**{"index.embeddings": False}))
        async with app.run_test(size=(160, 50), notifications=True) as pilot:
            await settle(app, pilot)
            text = visible_text(await shown(app, pilot, "skipped"))
            assert "1 file skipped, 1 indexed with warnings" in text
            assert "blob.md: binary file" in text and "date.md: malformed frontmatter" in text

    run()
