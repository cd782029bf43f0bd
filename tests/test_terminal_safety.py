"""Hostile vault text, headings, file names and frontmatter never reach a terminal raw: CLI output (plain,
coloured in a pty, --json) and the app's rendered screen, notifications and titles included."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import REPO, make_app, quiet_settings, search, settle, sync, wait_for, write_notes
from explorer.text.safe import SafeStream, is_safe, safe_json, safe_text

ESC = "\x1b"
# What a note may try: clear the screen, retitle the window, write the clipboard (OSC 52), a C1 CSI,
# a right-to-left override, and Rich markup.
CLEAR = "\x1b[2J\x1b[H"
TITLE = "\x1b]0;pwned\x07"
CLIP = "\x1b]52;c;SGVsbG8=\x07"
C1_CSI = "\x9b31m"
RLO = "\u202e"
MARKUP = "[red]markup[/red] [link=https://x.example]click[/link]"
EVIL_NAME = f"Pets/evil{ESC}]0;pwned\x07name.md"

# Sequences that must never appear in output (Textual's own output uses CSI cursor moves and SGR).
FORBIDDEN = ("\x1b[2J", "\x1b]0;", "\x1b]52;", "\x9b", "\x07", RLO)


def hostile_vault(root: Path) -> Path:
    write_notes(
        root,
        {
            "Pets/evil.md": (
                f'---\ntitle: "Hamster {TITLE}title"\ntags: [pets]\n---\n'
                f"# Hamster {CLEAR}care\n\nHamsters eat seeds {CLIP} and hay {C1_CSI}red{RLO}txt. {MARKUP}\n"
            ),
            EVIL_NAME: f"# Quiet\n\nA hamster wheel {CLIP} note.\n",
            "Pets/plain.md": "# Plain\n\nHamsters like tunnels.\n",
        },
    )
    return root


def assert_terminal_safe(out: str) -> None:
    for seq in FORBIDDEN:
        assert seq not in out, f"{seq!r} reached the terminal"


def run_cli(*args: str, vault: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "explorer", *args, "--vault", str(vault), "--no-embeddings"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )


# -- the sanitiser -------------------------------------------------------------------------------
def test_safe_text_shows_controls_as_visible_escapes() -> None:
    assert safe_text(f"a{TITLE}b") == "a^[]0;pwned^Gb"
    assert safe_text("x\x9b31m\x7f\x00") == "x<U+009B>31m^?^@"
    assert safe_text(f"l{RLO}r") == "l<U+202E>r"
    assert safe_text("line\r\nnext\tcol\rover") == "line\r\nnext\tcol^Mover"
    assert safe_text("[red]x[/red] ü 漢字") == "[red]x[/red] ü 漢字"


@given(st.text())
def test_safe_text_output_is_always_safe_and_idempotent(text: str) -> None:
    out = safe_text(text)
    assert is_safe(out)
    assert safe_text(out) == out
    assert not any(0x80 <= ord(c) <= 0x9F or (ord(c) < 0x20 and c not in "\n\t\r") for c in out)


@given(st.text())
def test_safe_json_round_trips_and_has_no_raw_controls(text: str) -> None:
    out = safe_json({"k": text})
    assert json.loads(out) == {"k": text}
    assert not re.search(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", out.replace("\n", ""))


def test_safe_stream_keeps_colour_but_not_other_sequences() -> None:
    class Sink:
        def __init__(self) -> None:
            self.data = ""

        def write(self, s: str) -> int:
            self.data += s
            return len(s)

    sink = Sink()
    SafeStream(sink, allow_sgr=True).write(f"\x1b[1mbold\x1b[0m {CLEAR}{CLIP}")
    assert sink.data.startswith("\x1b[1mbold\x1b[0m ")
    assert "^[[2J^[[H^[]52;c;SGVsbG8=^G" in sink.data
    assert_terminal_safe(sink.data)


# -- the command line ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def evil_vault(tmp_path_factory: pytest.TempPathFactory) -> Path:
    vault = hostile_vault(tmp_path_factory.mktemp("evil") / "vault")
    assert run_cli("index", vault=vault).returncode == 0
    return vault


@pytest.mark.parametrize(
    "args",
    [
        ("search", "hamster"),
        ("search", "hamster", "--explain"),
        # The whole hit, markup and all (without --context-chars find prints a few lines around it).
        ("find", "hamster", "--context-chars", "2000"),
        ("find", "--mode", "fuzzy", "hamstr", "--context-chars", "2000"),
        ("context", "Pets/evil.md", "--highlight", "hamster"),
        ("index",),
        ("stats",),
    ],
)
def test_cli_plain_output_shows_escapes_visibly(evil_vault: Path, args: tuple[str, ...]) -> None:
    proc = run_cli(*args, vault=evil_vault)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert ESC not in out and "\x9b" not in out and RLO not in out
    if args[0] in ("search", "find", "context"):
        assert "^[]52;c;SGVsbG8=^G" in out  # shown, not lost
        assert "[red]markup[/red]" in out  # markup is text


def test_cli_json_escapes_controls_and_keeps_the_exact_text(evil_vault: Path) -> None:
    for args in (
        ("search", "hamster", "--json"),
        ("find", "hamster", "--json"),
        ("context", "Pets/evil.md", "--json"),
        ("stats", "--json"),
    ):
        proc = run_cli(*args, vault=evil_vault)
        assert proc.returncode == 0, proc.stderr
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]", proc.stdout), args
        data = json.loads(proc.stdout)
        if args[0] == "search":
            evil = next(r for r in data["results"] if r["document_path"] == "Pets/evil.md")
            assert "\\u009b" in proc.stdout and CLIP in evil["context_shards"][0]["text"]
        if args[0] == "context":
            assert CLIP in data["text"]


def test_cli_file_name_with_escape_is_shown_visibly(evil_vault: Path) -> None:
    proc = run_cli("search", "wheel", vault=evil_vault)
    assert "Pets/evil^[]0;pwned^Gname.md" in proc.stdout
    assert_terminal_safe(proc.stdout)


def test_cli_on_a_terminal_keeps_colour_and_escapes_the_rest(evil_vault: Path) -> None:
    """Run `explorer search` on a pseudo-terminal (colour on) and read what the terminal would get."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    pid, fd = pty.fork()
    if pid == 0:  # child: the CLI on the pty
        os.chdir(REPO)
        os.execve(
            sys.executable,
            [
                sys.executable,
                "-m",
                "explorer",
                "search",
                "hamster",
                "--vault",
                str(evil_vault),
                "--no-embeddings",
            ],
            env,
        )
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    _, status = os.waitpid(pid, 0)
    out = b"".join(chunks).decode("utf-8", "replace")
    assert os.WEXITSTATUS(status) == 0, out
    assert "\x1b[1m" in out  # our own bold: this really was a terminal
    assert_terminal_safe(out)
    assert "^[[2J" in out and "^[]52;" in out


# -- the app ------------------------------------------------------------------------------------
def screen_output(app) -> str:
    """What the app writes to the terminal for a full redraw of the current screen (toasts included)."""
    update = app.screen._compositor.render_update(full=True)  # noqa: SLF001 - the terminal's bytes
    return update.render_segments(app.console)


async def shown(app, pilot, needle: str, timeout: float = 60.0) -> str:
    """The app's terminal output once `needle` is visible in it (a toast mounts a little after its notify)."""
    out = ""

    def seen() -> bool:
        nonlocal out
        out = screen_output(app)
        return needle in visible_text(out)

    await wait_for(pilot, seen, timeout)
    return out


def visible_text(output: str) -> str:
    """The output without Textual's own CSI (cursor, colour) and OSC 8 link sequences."""
    output = re.sub(r"\x1b\]8;[^\x1b]*\x1b\\", "", output)
    output = re.sub(r"\x1b\[[0-9;:]*m", "", output)  # colour: text runs on
    return re.sub(r"\x1b\[[0-9;?<>]*[A-Za-z]", "\n", output)  # cursor moves: a new line


@sync
async def test_app_shows_hostile_notes_safely(tmp_path: Path) -> None:
    """Results, context, why-ranked, tree, note view and notifications of a hostile vault: no raw sequence
    reaches the terminal, markup in a note is shown as text."""
    from explorer.tui.messages import EditNote, OpenNote
    from explorer.tui.widgets.vault_tree import VaultTree

    vault = hostile_vault(tmp_path / "vault")
    app = make_app(vault, None, tmp_path, settings=quiet_settings(**{"index.embeddings": False}))
    async with app.run_test(size=(160, 50), notifications=True) as pilot:
        await settle(app, pilot)
        app.main_screen.query_one(VaultTree).display = True
        results = await search(app, pilot, "hamster")
        assert any(r.document_path == "Pets/evil.md" for r in results.results)
        app.notify(f"file {EVIL_NAME} says {MARKUP}", title=f"T{TITLE}")
        await settle(app, pilot)
        out = await shown(app, pilot, "T^[]0;pwned^G")
        assert_terminal_safe(out)
        text = visible_text(out)
        assert "^[]52;c;SGVsbG8=^G" in text and "<U+009B>31m" in text
        assert "[red]markup[/red]" in text  # in the result snippet, not interpreted
        assert "▌ T^[]0;pwned^G" in text  # the notification's title
        assert "pwned^Gname.md says [red]markup[/red]" in text  # and its message, as plain text
        assert "evil^[]0;pwned^Gname" in text  # tree label and result path

        await pilot.press("f6")  # the why-ranked tab
        await settle(app, pilot)
        out = screen_output(app)
        assert_terminal_safe(out)
        assert "fused" in visible_text(out)  # the tab really is shown

        app.post_message(OpenNote("Pets/evil.md"))
        await settle(app, pilot)
        out = screen_output(app)
        assert_terminal_safe(out)
        assert "^[[2J" in visible_text(out)

        # Writing in it: refused (the editor would show the raw text), the file untouched.
        app.post_message(EditNote("Pets/evil.md", 0))
        await settle(app, pilot)
        out = screen_output(app)
        assert_terminal_safe(out)
        assert "contains control characters" in visible_text(out)
        assert (vault / "Pets/evil.md").read_text(encoding="utf-8").count(CLIP) == 1


@sync
async def test_pasted_or_restored_search_text_loses_its_control_characters(tmp_path: Path) -> None:
    from textual import events

    from explorer.tui.widgets.search_box import SearchBox

    vault = hostile_vault(tmp_path / "vault")
    app = make_app(vault, None, tmp_path, settings=quiet_settings(**{"index.embeddings": False}))
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(app, pilot)
        box = app.main_screen.query_one(SearchBox)
        box.focus()
        box.post_message(events.Paste(f"hamster{CLIP} care{RLO}"))
        await settle(app, pilot)
        assert box.value == "hamster]52;c;SGVsbG8= care"
        box.value = f"seeds{TITLE}"
        await settle(app, pilot)
        assert box.value == "seeds]0;pwned"
        assert_terminal_safe(screen_output(app))


def test_safe_content_moves_styles_with_the_text() -> None:
    from textual.content import Content, Span

    from explorer.tui.safe import safe_content

    content = Content.assemble(("a\x1bb", "bold"), "x\x9by", ("z", "red"))
    safe = safe_content(content)
    assert safe.plain == "a^[bx<U+009B>yz"
    assert [(s.start, s.end, s.style) for s in safe.spans] == [(0, 4, "bold"), (14, 15, "red")]
    # A span running past the end of the text (Textual allows it) is clamped, not an IndexError.
    assert safe_content(Content("\x1bab", [Span(0, 9, "bold")])).spans == [Span(0, 4, "bold")]
