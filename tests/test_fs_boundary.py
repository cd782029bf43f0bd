"""The file system boundary: nothing outside the vault is read unless the user turns on following symlinks that
leave it, and a system folder or the home folder itself is never opened as a vault without --force."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, write_notes
from explorer.config import Settings
from explorer.index.local.vault_index import VaultIndex
from explorer.vault.scan import system_root_reason


@pytest.fixture()
def linked_vault(tmp_path: Path) -> Path:
    """A vault whose symlinks point inside it, outside it (a file and a folder), and in a loop."""
    outside = write_notes(
        tmp_path / "outside",
        {
            "id_rsa.md": "PRIVATE KEY zebracorn secret\n",
            "docs/leak.md": "# Leak\n\nzebracorn folder secret\n",
        },
    )
    vault = write_notes(
        tmp_path / "vault",
        {
            "real/inner.md": "# Inner\n\nquokka lives inside\n",
            "plain.md": "# Plain\n\nan ordinary quokka note\n",
        },
    )
    (vault / "notes.md").symlink_to(outside / "id_rsa.md")
    (vault / "ext").symlink_to(outside / "docs", target_is_directory=True)
    (vault / "alias.md").symlink_to(vault / "real" / "inner.md")
    (vault / "mirror").symlink_to(vault / "real", target_is_directory=True)
    (vault / "loop").symlink_to(vault, target_is_directory=True)
    return vault


def open_index(vault: Path, **flags) -> VaultIndex:
    index = VaultIndex(vault, Settings().with_overrides({"index.embeddings": False, **flags}))
    index.open()
    return index


def test_symlinks_leaving_the_vault_are_not_followed_by_default(linked_vault: Path) -> None:
    index = open_index(linked_vault)
    assert set(index.notes) == {"plain.md", "real/inner.md", "alias.md"}
    assert "already visited" in index.skipped["mirror"]  # the real folder's own path wins
    reason = "symlink to outside the vault not followed (setting vault.follow_external_symlinks)"
    assert index.skipped["notes.md"] == reason and index.skipped["ext"] == reason
    assert not any("zebracorn" in n.text for n in index.notes.values())
    # A watcher event naming the link is refused the same way.
    report = index.refresh(paths=["notes.md", "ext/leak.md"], reread=True)
    assert "notes.md" not in index.notes and "ext/leak.md" not in index.notes and not report.added
    index.close()


def test_following_external_symlinks_is_the_users_choice(linked_vault: Path) -> None:
    index = open_index(linked_vault, **{"vault.follow_external_symlinks": True})
    assert {"notes.md", "ext/leak.md"} <= set(index.notes)
    index.close()


def test_no_symlink_at_all_when_following_is_off(linked_vault: Path) -> None:
    index = open_index(linked_vault, **{"vault.follow_symlinks": False})
    assert set(index.notes) == {"plain.md", "real/inner.md"}
    assert index.skipped["alias.md"] == "symlink not followed (setting vault.follow_symlinks)"
    index.close()


def test_a_symlinked_turn_sidecar_is_not_read(tmp_path: Path) -> None:
    outside = write_notes(tmp_path / "outside", {"metadata.json": json.dumps({"topic": "zebracorn"})})
    vault = write_notes(tmp_path / "vault", {"agent/turns/turn_000001/context.md": "# Turn\n\nhello\n"})
    (vault / "agent/turns/turn_000001/metadata.json").symlink_to(outside / "metadata.json")
    index = open_index(vault)
    assert index.notes["agent/turns/turn_000001/context.md"].metadata == {}
    index.close()


@pytest.mark.parametrize("folder", ["/", "/etc", "/usr", "/home", "/tmp"])
def test_system_folders_are_named(folder: str) -> None:
    assert system_root_reason(Path(folder)).endswith("is a system folder")


def run_cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "explorer", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )


def test_the_home_folder_is_refused_without_force_and_nothing_is_written(tmp_path: Path) -> None:
    home = write_notes(tmp_path / "home", {"notes/a.md": "# A\n\nquokka\n"})
    before = sorted(p.relative_to(home) for p in home.rglob("*"))
    for args in (
        ("index", str(home), "--no-embeddings"),
        ("search", "quokka", "--vault", str(home)),
        (str(home),),
    ):
        proc = run_cli(*args, home=home)
        assert proc.returncode == 2, args
        assert proc.stderr.strip() == (
            f"explorer: not opening {home} as a vault: {home} is your home folder; "
            "pass --force if you mean it"
        )
    assert sorted(p.relative_to(home) for p in home.rglob("*")) == before  # no .explorer, nothing at all

    proc = run_cli("index", str(home), "--no-embeddings", "--force", "--json", home=home)
    assert proc.returncode == 0 and json.loads(proc.stdout)["notes"] == 1
    # A vault inside the home folder needs no --force.
    assert run_cli("stats", str(home / "notes"), "--no-embeddings", home=home).returncode == 0
