"""`explorer serve` in a real headless Chromium: the page, live search, clicks, why-ranked, writing, a second
tab on the same engine, the Host/Origin/token guards, and Ctrl-C.

One server (the real CLI, a subprocess) and one browser for the module; the tests run in file order
on one tab, as a person would use it. Screenshots of each state go to build/screens/.
"""

from __future__ import annotations

import collections
import http.client
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from benchmarks.chromium import Chromium, DevToolsError, install_chromium
from conftest import REPO, write_notes

SCREENS = REPO / "build" / "screens"

NOTES = {
    "Pets/hamster-diet.md": "# Hamster diet\n\nHamsters eat seeds, grains and fresh vegetables. "
    "Biscuit the hamster loves carrots. Her home: [[hamster-cage]].\n",
    "Pets/hamster-cage.md": "# Hamster cage\n\nA hamster cage needs deep bedding and a large wheel. "
    "What goes in the food bowl is in [[hamster-diet]].\n",
    "Coffee/cold-brew.md": "# Cold brew\n\nCold brew steeps coarse coffee grounds in cold water "
    "for sixteen hours, then the grounds are strained off.\n",
    "Garden/composting.md": "# Composting\n\nThe compost heap takes peelings, dry leaves and coffee "
    "grounds, turned every two weeks.\n",
    "Travel/lisbon.md": "# Lisbon\n\nTrams, tiles and custard tarts on a long weekend in spring.\n",
    "Music/piano.md": "# Piano practice\n\nScales first, then the slow movement, twenty minutes a day.\n",
}


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    if install_chromium() is None:
        pytest.skip(
            "no chromium: install Debian's chromium (apt-get install chromium) to run the browser tests"
        )
    try:
        chromium = Chromium()
    except DevToolsError as exc:
        pytest.skip(f"chromium does not start here: {exc}")
    yield chromium
    chromium.close()


class Served:
    """The `explorer serve` subprocess and what it printed."""

    def __init__(self, proc: subprocess.Popen, url: str, vault: Path, err: Path) -> None:
        self.proc, self.url, self.vault, self.err = proc, url, vault, err
        parts = urlsplit(url)
        self.netloc = parts.netloc
        self.base = f"{parts.scheme}://{parts.netloc}"
        self.token = dict(p.split("=", 1) for p in parts.query.split("&") if "=" in p)["token"]
        self.cookie = f"explorer-token-{parts.port}={self.token}"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("browser")
    vault = write_notes(root / "vault", NOTES)
    runtime = Path(tempfile.mkdtemp(prefix="xb"))  # short: socket paths are limited to 107 bytes
    runtime.chmod(0o700)
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        XDG_RUNTIME_DIR=str(runtime),
        XDG_STATE_HOME=str(root / "state"),
    )
    env.pop("EXPLORER_SERVE_TOKEN", None)
    err = root / "serve.err"
    with err.open("w") as err_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "explorer", "serve", str(vault), "--no-embeddings", "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=err_file,
            text=True,
            env=env,
            cwd=root,
        )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    try:
        assert url.startswith("http://127.0.0.1:"), f"no URL printed; stderr: {err.read_text()}"
        yield Served(proc, url, vault, err)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        shutil.rmtree(runtime, ignore_errors=True)


@pytest.fixture(scope="module")
def tab(browser: Chromium, served: Served):
    tab = browser.new_tab(served.url)
    tab.wait_for(lambda s: "Search" in s and "notes" in s, 120, "the app's first screen")
    tab.focus()
    return tab


def _row_of(screen: list[str], needle: str, start: int = 0) -> int:
    for y, row in enumerate(screen):
        if row.find(needle, start) >= 0:
            return y
    raise AssertionError(f"{needle!r} is not on the screen:\n" + "\n".join(screen))


def _engine_files(pid: int, vault: Path) -> tuple[int, collections.Counter[str]]:
    """(inotify instances, open files of the vault's index folder) of process `pid`."""
    inotify, files = 0, collections.Counter[str]()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target == "anon_inode:inotify":
            inotify += 1
        elif target.startswith(str(vault / ".explorer")):
            files[target] += 1
    return inotify, files


def test_page_loads_and_a_typed_query_shows_results_with_highlights_and_node_ids(tab, served: Served) -> None:
    tab.type("hamster")
    text = tab.wait_for(
        lambda s: "Pets/hamster-diet.md" in s and "Pets/hamster-cage.md" in s and "chars · cursor" in s,
        60,
        "results, and the first one's passage in the context pane",
    )
    assert "quality" in text
    screen = tab.screen()
    # The context pane shows the passage around the first match, its words highlighted.
    cx = screen[_row_of(screen, "Why ranked")].find("Context")
    checked = 0
    for y, line in enumerate(screen):
        row = line[cx:]
        match = re.search(r"[Hh]amsters?\b", row)
        plain = next((w for w in re.finditer(r"[a-z]{4,}", row) if "amster" not in w.group()), None)
        if y < 6 or match is None or plain is None or "/" in row:
            continue
        styles = tab.styles(y)
        assert styles[cx + match.start()] != styles[cx + plain.start()], (
            f"the match is drawn as plain text: {row!r}"
        )
        checked += 1
    assert checked, "no passage with a match in the context pane:\n" + "\n".join(screen)
    tab.screenshot(SCREENS / "results.png")


def test_clicking_a_result_shows_it_in_the_context_pane_and_a_double_click_opens_it(tab) -> None:
    screen = tab.screen()
    context_x = screen[_row_of(screen, "Why ranked")].find("Context")
    y1 = _row_of(screen, " 1 █")
    first = "Pets/hamster-cage.md" if "Pets/hamster-cage.md" in screen[y1 + 1] else "Pets/hamster-diet.md"
    other = "Pets/hamster-diet.md" if first == "Pets/hamster-cage.md" else "Pets/hamster-cage.md"
    y2 = _row_of(screen, " 2 █")
    tab.click_cell(screen[y2].find(" 2 ") + 8, y2)
    tab.wait_for(
        lambda s: any(row.find(other, context_x - 1) >= context_x - 1 for row in s.splitlines()),
        30,
        "the clicked result in the context pane",
    )
    tab.click_cell(screen[y2].find(" 2 ") + 8, y2, count=2)
    tab.wait_for(lambda s: "Backlinks" in s or "Links" in s, 30, "the note view")
    tab.wait_for(lambda s: other in s.splitlines()[0], 30, "the note view of the clicked result")
    tab.screenshot(SCREENS / "note.png")
    # A link in the note's text opens its note with a click.
    screen = tab.screen()
    stem = Path(first).stem
    y = next(i for i, row in enumerate(screen) if i > 1 and 0 <= row.find(stem) < 100)
    tab.click_cell(screen[y].find(stem) + 2, y)
    tab.wait_for(lambda s: first in s.splitlines()[0], 30, "the linked note")
    tab.press("escape")
    tab.wait_for(lambda s: "Results (" in s and "Why ranked" in s, 30, "the search screen")


def test_why_ranked_shows_with_the_browser_key(tab) -> None:
    tab.press("alt+y")  # F6's twin: the F-keys are the browser's on some systems
    text = tab.wait_for(lambda s: "RRF contrib" in s, 30, "the why-ranked pane")
    assert "bm25" in text
    tab.screenshot(SCREENS / "why.png")
    tab.press("alt+c")
    tab.wait_for(lambda s: "RRF contrib" not in s, 30, "the context pane again")


def test_writing_mode_inserts_a_link(tab, served: Served) -> None:
    tab.press("escape")
    tab.type("compost heap")
    tab.wait_for(lambda s: "Garden/composting.md" in s and " 1 " in s, 60, "the compost note first")
    tab.press("alt+w")
    # The list's title is set once the note is read, the cursor placed and the editor focused.
    tab.wait_for(lambda s: "turned every two weeks" in s and "─ Related ─" in s, 30, "writing mode")
    tab.press("ctrl+end")
    tab.type(" The grounds from my cold brew go on the heap too.")
    tab.wait_for(lambda s: "named here" in s, 60, "the cold brew note offered")
    tab.press("ctrl+g")
    tab.wait_for(lambda s: "[[cold-brew|cold brew]]" in s, 30, "the inserted link")
    tab.screenshot(SCREENS / "writer.png")
    tab.press("ctrl+s")
    path = served.vault / "Garden/composting.md"
    end = time.monotonic() + 30
    while "[[cold-brew|cold brew]]" not in path.read_text() and time.monotonic() < end:
        time.sleep(0.1)
    assert "my [[cold-brew|cold brew]] go on the heap" in path.read_text()
    tab.press("escape")
    tab.wait_for(lambda s: "Results (" in s, 30, "the search screen")


def test_a_second_tab_reuses_the_engine(browser: Chromium, tab, served: Served) -> None:
    watchers, files = _engine_files(served.proc.pid, served.vault)
    assert watchers == 1 and files, (watchers, files)
    second = browser.new_tab(served.base + "/")  # the cookie of the first tab lets it in
    second.wait_for(lambda s: "Search" in s and "notes" in s, 120, "the second tab's first screen")
    second.focus()
    second.type("lisbon trams")
    second.wait_for(lambda s: "Travel/lisbon.md" in s, 60, "the second tab's results")
    second.screenshot(SCREENS / "second-tab.png")
    # One watcher and the index's files open once, whatever the number of tabs.
    assert _engine_files(served.proc.pid, served.vault) == (watchers, files)
    # The first tab still answers.
    tab.press("escape")
    tab.type("piano scales")
    tab.wait_for(lambda s: "Music/piano.md" in s, 60, "the first tab's results")
    second.close()


def _get(served: Served, host: str | None = None, headers: dict[str, str] | None = None, path: str = "/"):
    conn = http.client.HTTPConnection(served.netloc, timeout=30)
    conn.putrequest("GET", path, skip_host=True)
    conn.putheader("Host", host or served.netloc)
    for name, value in (headers or {}).items():
        conn.putheader(name, value)
    conn.endheaders()
    response = conn.getresponse()
    body = response.read().decode()
    conn.close()
    return response.status, body


def test_a_foreign_host_or_origin_or_no_token_is_refused(browser: Chromium, served: Served) -> None:
    cookie = {"Cookie": served.cookie}
    assert _get(served, headers=cookie)[0] == 200
    port = served.netloc.rsplit(":", 1)[1]
    # DNS rebinding: a page of another name that resolves here sends that name as Host.
    assert _get(served, host=f"attacker.example:{port}", headers=cookie)[0] == 421
    assert _get(served, host=f"localhost:{port}", headers=cookie)[0] == 421
    # Another site's script (its Origin) is refused, the websocket of the tabs included.
    assert _get(served, headers={**cookie, "Origin": "http://attacker.example"})[0] == 403
    ws_headers = {
        **cookie,
        "Origin": "http://attacker.example",
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version": "13",
    }
    assert _get(served, headers=ws_headers, path="/ws")[0] == 403
    # Without the token: the page, the script and the websocket are all refused.
    assert _get(served)[0] == 401
    assert _get(served, path="/static/js/textual.js")[0] == 401
    assert _get(served, headers={**cookie, "Cookie": "explorer-token-1=x"}, path="/ws")[0] == 401
    assert _get(served, path="/?token=wrong")[0] == 401
    # In the browser, the page under another name shows the refusal, not the app.
    other = browser.new_tab(f"http://localhost:{port}/")
    end = time.monotonic() + 30
    body = ""
    while "explorer serve" not in body and time.monotonic() < end:
        time.sleep(0.1)
        body = other.evaluate("document.body ? document.body.innerText : ''") or ""
    assert "open the address" in body
    other.close()


def test_ctrl_c_exits_0_and_leaves_no_child_process(served: Served) -> None:
    pid = served.proc.pid
    children = [
        p.name for p in Path("/proc").iterdir() if p.name.isdigit() and _ppid(p) == pid
    ]  # the tabs run in the server's own process
    assert children == []
    served.proc.send_signal(signal.SIGINT)
    assert served.proc.wait(60) == 0, served.err.read_text()
    rest = served.proc.stdout.read() if served.proc.stdout else ""
    assert rest == "", "the server printed more than its URL"


def _ppid(proc: Path) -> int:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--host", "192.0.2.7"], "without a token"),
        (["--host", "example.org"], "not an IP address"),
    ],
)
def test_beyond_loopback_without_a_token_it_refuses_to_start(
    tmp_path: Path, args: list[str], said: str
) -> None:
    vault = write_notes(tmp_path / "v", {"a.md": "# A\n\ntext\n"})
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("EXPLORER_SERVE_TOKEN", None)
    run = subprocess.run(
        [sys.executable, "-m", "explorer", "serve", str(vault), "--no-embeddings", "--port", "0", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode == 2 and said in run.stderr and run.stdout == ""
    assert not (vault / ".explorer").exists()  # refused before anything read the vault
