"""Opening a note where the person works: the Obsidian URI, the editor's argument list, `explorer open`, the app's keys."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from conftest import write_notes
from explorer.cli import main
from explorer.vault.external import (
    OpenError,
    editor_argv,
    editor_command,
    obsidian_url,
    opener_argv,
    vault_file,
    wikilink,
)
from test_tui import SIZE, make_app, search, settle, sync, wait_for

ODD_NAMES = ["Sub dir/a note.md", "C# & F#/tips #1?.md", "日記/über café.md", "-rf --help.md", "x+y=z;%20.md"]


@pytest.mark.parametrize("rel", ODD_NAMES)
def test_obsidian_url_carries_any_name_whole(rel: str, tmp_path: Path) -> None:
    """Vault name and path come back exactly from the URI; nothing in them can end a parameter or start a fragment."""
    vault = tmp_path / "My vault #2 & co"
    vault.mkdir()
    url = obsidian_url(vault, rel)
    parts = urlsplit(url)
    assert parts.scheme == "obsidian" and parts.netloc == "open" and parts.fragment == ""
    query = parse_qs(parts.query, keep_blank_values=True)
    assert query == {"vault": ["My vault #2 & co"], "file": [rel]}
    assert not set(" #&?+/") & set(parts.query.split("file=", 1)[1])


@pytest.mark.parametrize("rel", ODD_NAMES)
@pytest.mark.parametrize(
    "editor, expect",
    [
        (["vim"], lambda p: ["vim", "+7", p]),
        (["/usr/bin/nvim", "-u", "NONE"], lambda p: ["/usr/bin/nvim", "-u", "NONE", "+7", p]),
        (["nano"], lambda p: ["nano", "+7", p]),
        (["emacs", "-nw"], lambda p: ["emacs", "-nw", "+7", p]),
        (["micro"], lambda p: ["micro", "+7", p]),
        (["kak"], lambda p: ["kak", "+7", p]),
        (["code", "--wait"], lambda p: ["code", "--wait", "-g", f"{p}:7"]),
        (["gedit"], lambda p: ["gedit", p]),
    ],
)
def test_editor_argv_is_a_list_with_the_line_in_the_editors_form(
    rel: str, editor, expect, tmp_path: Path
) -> None:
    """One argument per word, the file absolute (a leading dash never reads as an option), the line as the editor takes it."""
    path = str(tmp_path / rel)
    argv = editor_argv(editor, tmp_path / rel, 7)
    assert argv == expect(path)
    assert all(not a.startswith("-") or a in editor or a == "-g" for a in argv[1:])


def test_editor_command_reads_visual_then_editor_as_words() -> None:
    """$VISUAL wins over $EDITOR; quoted words stay whole; nothing is expanded; bad quoting is a clear error."""
    assert editor_command({"EDITOR": "code --wait"}) == ["code", "--wait"]
    assert editor_command({"EDITOR": "vim", "VISUAL": "'/opt/my editor/hx'"}) == ["/opt/my editor/hx"]
    assert editor_command({"EDITOR": "vim $(touch x)"}) == ["vim", "$(touch", "x)"]
    assert editor_command({}) == []
    with pytest.raises(OpenError, match="EDITOR"):
        editor_command({"EDITOR": "vim 'unclosed"})
    with pytest.raises(OpenError, match="set \\$EDITOR"):
        editor_argv([], Path("/v/a.md"), 1)


def test_vault_file_stays_in_the_vault(tmp_path: Path) -> None:
    write_notes(tmp_path, {"a.md": "x"})
    assert vault_file(tmp_path, "a.md") == tmp_path / "a.md"
    for bad in ("../a.md", "/etc/passwd", "sub/../../a.md", ""):
        with pytest.raises(OpenError, match="not a path inside the vault"):
            vault_file(tmp_path, bad)
    with pytest.raises(OpenError, match="deleted or renamed"):
        vault_file(tmp_path, "gone.md")


def test_opener_is_the_first_found_or_none() -> None:
    found = {"xdg-open": "/usr/bin/xdg-open"}
    assert opener_argv("obsidian://open?vault=v&file=a", found.get) == [
        "/usr/bin/xdg-open",
        "obsidian://open?vault=v&file=a",
    ]
    assert opener_argv("obsidian://x", {}.get) is None


@pytest.mark.parametrize(
    "node_id, heading, link",
    [
        ("Pets/hamster.md", None, "[[Pets/hamster]]"),
        ("Pets/hamster.md#Care#Diet", "Diet", "[[Pets/hamster#Care#Diet]]"),
        ("Pets/hamster.md#Diet@2", "Diet", "[[Pets/hamster#Diet]]"),
        ("Pets/hamster.md#Notes (2)", "Notes", "[[Pets/hamster#Notes]]"),
        ("Pets/hamster.md#Version (2)", "Version (2)", "[[Pets/hamster#Version (2)]]"),
        ("Pets/hamster.md@3", None, "[[Pets/hamster]]"),
        ("Pets/hamster.md#^block-1", None, "[[Pets/hamster#^block-1]]"),
        ("Papers/scan.pdf#page=3", None, "[[Papers/scan.pdf#page=3]]"),
        ("evil\x1b]52;c;AAAA\x07.md#H", "H", "[[evil]52;c;AAAA#H]]"),
    ],
)
def test_wikilink_of_a_node_id(node_id: str, heading: str | None, link: str) -> None:
    assert wikilink(node_id, heading) == link


# -- explorer open ---------------------------------------------------------------------------------
def recorder(folder: Path, name: str, code: int = 0) -> tuple[Path, Path]:
    """An executable `folder/name` that writes its argv (after the program) as JSON to a file and exits `code`."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / f"{name}.argv.json"
    script = folder / name
    script.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(log)!r}, 'w').write(json.dumps(sys.argv[1:]))\nsys.exit({code})\n",
        encoding="utf-8",
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, log


@pytest.fixture()
def odd_vault(tmp_path: Path) -> Path:
    return write_notes(
        tmp_path / "Odd vault",
        {
            "-dash #1/ü note.md": "# ü note\n\nIntro line.\n\n## Diet & care\n\nHay, seeds.\n",
            "plain.md": "Nothing here.\n",
        },
    )


def run_open(vault: Path, *args: str) -> int:
    return main(["open", *args, "--vault", str(vault), "--no-embeddings"])


def test_open_prints_the_uri_and_the_editor_command(
    odd_vault: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    """--print shows what would run: the URI (also the answer with no opener on PATH) or the editor's argv."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    node = "-dash #1/ü note.md#Diet & care"
    assert run_open(odd_vault, node, "--print") == 0
    url = capsys.readouterr().out.strip()
    assert parse_qs(urlsplit(url).query) == {"vault": ["Odd vault"], "file": ["-dash #1/ü note.md"]}
    assert run_open(odd_vault, node, "--obsidian") == 0, "no opener: the URI is printed"
    assert capsys.readouterr().out.strip() == url
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", "nvim -u NONE")
    assert run_open(odd_vault, node, "--editor", "--print") == 0
    out = capsys.readouterr().out.strip()
    assert out == f"nvim -u NONE +5 '{odd_vault}/-dash #1/ü note.md'"


def test_open_runs_the_editor_and_the_opener_without_a_shell(
    odd_vault: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    """The editor gets `+LINE /abs/file`; xdg-open gets the URI as one argument."""
    bin_dir = tmp_path / "bin"
    editor, editor_log = recorder(bin_dir, "vim")
    _opener, opener_log = recorder(bin_dir, "xdg-open")
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", str(editor))
    assert run_open(odd_vault, "-dash #1/ü note.md#Diet & care", "--editor") == 0
    assert json.loads(editor_log.read_text()) == ["+5", f"{odd_vault}/-dash #1/ü note.md"]
    assert run_open(odd_vault, "plain", "--editor") == 0
    assert json.loads(editor_log.read_text()) == [f"{odd_vault}/plain.md"], "a whole note opens at its top"
    assert run_open(odd_vault, "-dash #1/ü note.md") == 0
    for _ in range(200):
        if opener_log.exists():
            break
        import time

        time.sleep(0.05)
    assert json.loads(opener_log.read_text()) == [obsidian_url(odd_vault, "-dash #1/ü note.md")]


def test_open_exit_codes(odd_vault: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    """2: nothing by that name, or no editor set; 1: the editor fails or cannot start; each with a message."""
    monkeypatch.delenv("VISUAL", raising=False)
    assert run_open(odd_vault, "no such note", "--print") == 2
    assert "no such note" in capsys.readouterr().err
    assert run_open(odd_vault, "plain.md#No heading", "--print") == 2
    assert "No heading" in capsys.readouterr().err
    monkeypatch.delenv("EDITOR", raising=False)
    assert run_open(odd_vault, "plain.md", "--editor") == 2
    assert "set $EDITOR" in capsys.readouterr().err
    failing, _ = recorder(tmp_path / "bin", "nano", code=3)
    monkeypatch.setenv("EDITOR", str(failing))
    assert run_open(odd_vault, "plain.md", "--editor") == 1
    assert "exited with code 3" in capsys.readouterr().err
    monkeypatch.setenv("EDITOR", str(tmp_path / "missing-editor"))
    assert run_open(odd_vault, "plain.md", "--editor") == 1
    assert "cannot start the editor" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        run_open(odd_vault, "plain.md", "--editor", "--obsidian")
    assert exc.value.code == 2


# -- the app ---------------------------------------------------------------------------------------
@sync
async def test_app_keys_open_in_the_editor_and_obsidian_and_copy_a_link(
    tui_vault: Path, embedder, tmp_path: Path, monkeypatch
) -> None:
    """ctrl+g runs $EDITOR on the selected result at the context cursor's line, ctrl+o hands the URI to
    xdg-open, ctrl+l copies the node_id as a [[link]]; the same keys work in the note view."""
    from explorer.tui.messages import OpenNote
    from explorer.tui.screens.note import NoteScreen
    from explorer.tui.widgets.context_pane import ContextPane
    from explorer.tui.widgets.results import ResultsList

    bin_dir = tmp_path / "bin"
    editor, editor_log = recorder(bin_dir, "nvim")
    _, opener_log = recorder(bin_dir, "xdg-open")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", str(editor))
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await search(app, pilot, "hamster cage")
        screen = app.main_screen
        screen.query_one(ResultsList).focus()
        pane = screen.query_one(ContextPane)
        path, cursor, node_id = pane.state.path, pane.state.cursor, pane.node_id
        line = app.index.note(path).text.count("\n", 0, cursor) + 1
        await pilot.press("ctrl+g")
        await settle(app, pilot)
        assert json.loads(editor_log.read_text()) == [f"+{line}", str(tui_vault / path)]
        await pilot.press("ctrl+l")
        assert app.clipboard == wikilink(
            node_id,
            app.index.shards[node_id].heading_path[-1] if app.index.shards[node_id].heading_path else None,
        )
        assert app.clipboard.startswith("[[") and ".md" not in app.clipboard
        await pilot.press("ctrl+o")
        await wait_for(pilot, opener_log.exists)
        assert json.loads(opener_log.read_text()) == [obsidian_url(tui_vault, path)]

        editor_log.unlink()
        opener_log.unlink()
        app.post_message(OpenNote("Pets/hamster-cages-and-bedding.md", 0))
        await settle(app, pilot)
        assert isinstance(app.screen, NoteScreen)
        await pilot.press("ctrl+g")
        await settle(app, pilot)
        assert json.loads(editor_log.read_text()) == [str(tui_vault / "Pets/hamster-cages-and-bedding.md")]
        await pilot.press("ctrl+l")
        assert app.clipboard == "[[Pets/hamster-cages-and-bedding]]"
        await pilot.press("ctrl+o")
        await wait_for(pilot, opener_log.exists)
        assert json.loads(opener_log.read_text()) == [
            obsidian_url(tui_vault, "Pets/hamster-cages-and-bedding.md")
        ]


@sync
async def test_app_says_when_no_editor_is_set(tui_vault: Path, embedder, tmp_path: Path, monkeypatch) -> None:
    """Without $EDITOR the key explains what to set; nothing runs, the app stays."""
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.delenv("EDITOR", raising=False)
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await search(app, pilot, "hamster cage")
        await pilot.press("ctrl+g")
        await settle(app, pilot)
        assert any("set $EDITOR" in n.message for n in app._notifications)  # noqa: SLF001 - Textual keeps toasts private


def test_a_pdf_or_canvas_opens_at_its_start_in_the_editor(tmp_path: Path) -> None:
    """Their indexed text is read out of the file: its lines are not the file's."""
    from explorer.vault.external import editor_launch

    write_notes(tmp_path, {"scan.pdf": "%PDF-1.4", "board.canvas": "{}", "a.md": "x\ny\n"})
    env = {"EDITOR": "vim"}
    assert editor_launch(tmp_path, "scan.pdf", 12, env).argv == ("vim", str(tmp_path / "scan.pdf"))
    assert editor_launch(tmp_path, "board.canvas", 3, env).argv == ("vim", str(tmp_path / "board.canvas"))
    assert editor_launch(tmp_path, "a.md", 2, env).argv == ("vim", "+2", str(tmp_path / "a.md"))
