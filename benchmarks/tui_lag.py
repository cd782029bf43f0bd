"""Event-loop stalls of the app on a large vault: while the index opens and while a user types.

Run with ``python -m benchmarks.tui_lag [--vault DIR] [--queries N]``. The default vault is the
10,000-note one that ``python -m benchmarks.speed`` generates (its stored index and vectors make
the open a warm restart). The real app runs headless (``App.run_test``, 120x40, watcher on, the
model loaded in the background as usual). A 10 ms interval timer runs on the app's event loop; the
gap between two of its ticks is time in which the app could neither draw nor take a key. Queries
are typed key by key at a fixed cadence (80 ms apart, as a person types: the key events go to the
app's driver, as a terminal's would; `Pilot.press` is not used because it waits for the app to go
idle after each key, which hides stalls), and each waits for its final results before the next.

Reported per phase (opening, typing, idle): ticks, median / p99 / max gap and the count of gaps
over 100 ms (a visible stall); for the typing phase also the echo latency of each key (from the key
event sent to the search box holding the typed text).

With ``--writer N`` a writing phase follows: a note opens in writing mode and N words are typed
key by key at its end (the same cadence, a new paragraph every ten words), each followed by a
pause. Reported beside the phase's gaps and key echo (from the key sent to the editor holding the
text): the time from the word's last key to the link suggestions for the paragraph with that word
on screen (the writer's list updated: named notes, and the whole list), median and p95.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import (
    DEFAULT_OUT,
    log,
    machine,
    markdown_table,
    offline_environment,
    percentile,
    write_json,
)

DEFAULT_VAULT = DEFAULT_OUT / "speed-vault-10000"
STALL_MS = 100.0


class Ticker:
    """Gaps between the ticks of a 10 ms timer, filed under the current phase."""

    def __init__(self) -> None:
        self.phase = "opening"
        self.gaps: dict[str, list[float]] = {}
        self._last = time.perf_counter()

    def tick(self) -> None:
        now = time.perf_counter()
        self.gaps.setdefault(self.phase, []).append((now - self._last) * 1000)
        self._last = now

    def report(self) -> dict[str, Any]:
        out = {}
        for phase, gaps in self.gaps.items():
            out[phase] = {
                "ticks": len(gaps),
                "median_ms": round(statistics.median(gaps), 1),
                "p99_ms": round(percentile(gaps, 99), 1),
                "max_ms": round(max(gaps), 1),
                "stalls_over_100ms": sum(g > STALL_MS for g in gaps),
                "over_20ms": sum(g > 20.0 for g in gaps),
                "worst_ms": [round(g, 1) for g in sorted(gaps, reverse=True)[:5]],
            }
        return out


async def _wait(pilot: Any, predicate: Any, timeout: float) -> bool:
    deadline = time.perf_counter() + timeout
    while not predicate():
        if time.perf_counter() > deadline:
            return False
        await pilot.pause(0.05)
    return True


class Echo:
    """Echo latency of typed keys: from sending a key to the search box's (or the editor's) `Changed` with that text."""

    def __init__(self) -> None:
        self.sent: dict[str, float] = {}
        self.latencies: list[float] = []

    def expect(self, value: str) -> None:
        self.sent[value] = time.perf_counter()

    def hook(self, message: Any) -> None:
        from textual.widgets import Input, TextArea

        value = None
        if isinstance(message, Input.Changed) and message.input.id == "search":
            value = message.value
        elif isinstance(message, TextArea.Changed):
            value = message.text_area.text
        if value is not None:
            t = self.sent.pop(value, None)
            if t is not None:
                self.latencies.append((time.perf_counter() - t) * 1000)

    def report(self) -> dict[str, Any]:
        if not self.latencies:
            return {}
        return {
            "keys": len(self.latencies),
            "median_ms": round(statistics.median(self.latencies), 1),
            "p99_ms": round(percentile(self.latencies, 99), 1),
            "max_ms": round(max(self.latencies), 1),
        }


def type_key(app: Any, char: str) -> None:
    """Send one typed character to the app as its terminal driver would (no waiting)."""
    from textual import events

    key = {" ": "space", "\n": "enter"}.get(char, char)
    event = events.Key(key, "\r" if char == "\n" else char)
    event.set_sender(app)
    app._driver.send_message(event)  # noqa: SLF001 - as the terminal driver delivers a key


class Shown:
    """When the writer's list was updated, and with what (a spy on `WriterScreen.on_related_found`)."""

    def __init__(self) -> None:
        from explorer.tui.screens.writer import WriterScreen

        self.updates: list[tuple[float, str, bool]] = []
        """(time, the paragraph searched, whole list) of every list shown."""
        self._cls = WriterScreen
        self._orig = WriterScreen.on_related_found
        spy = self

        def on_related_found(screen: Any, message: Any) -> None:
            spy._orig(screen, message)
            if message.seq == screen._seq:  # noqa: SLF001 - the screen drops stale answers by it
                spy.updates.append(
                    (time.perf_counter(), message.paragraph, message.suggestions.results is not None)
                )

        WriterScreen.on_related_found = on_related_found  # type: ignore[method-assign]

    def close(self) -> None:
        self._cls.on_related_found = self._orig  # type: ignore[method-assign]

    def after(self, t: float, word: str, whole: bool) -> float | None:
        """ms from `t` to the first list shown after it for a paragraph ending in `word` (the whole list
        when `whole`), None when there was none."""
        for at, paragraph, complete in self.updates:
            if at > t and paragraph.endswith(word) and (complete or not whole):
                return (at - t) * 1000
        return None


async def write_words(
    app: Any,
    pilot: Any,
    words: Sequence[str],
    key_gap_s: float,
    echo: Echo,
    pause_s: float = 0.6,
    space_after: bool = False,
) -> dict[str, Any]:
    """Open a note in writing mode and type `words` at its end; the list's latency after each word.

    With `space_after` each word is followed by a space before the pause (as a person who has
    finished a word types it), else the pause follows the word's last letter."""
    from textual.widgets import TextArea

    from explorer.tui.messages import EditNote
    from explorer.tui.screens.writer import WriterScreen

    path = sorted(app.index.note_titles())[0]
    app.post_message(EditNote(path))
    await _wait(pilot, lambda: isinstance(app.screen, WriterScreen), 30)
    screen = app.screen
    editor = screen.query_one(TextArea)
    await pilot.pause(1.0)
    editor.move_cursor(editor.document.end)
    shown = Shown()
    named: list[float | None] = []
    whole: list[float | None] = []
    try:
        for n, word in enumerate(words):
            typed = (
                ("\n\n" if n % 10 == 0 else "" if space_after else " ") + word + (" " if space_after else "")
            )
            for ch in typed:
                echo.expect(editor.text + ch)
                type_key(app, ch)
                await asyncio.sleep(key_gap_s)
            t = time.perf_counter() - key_gap_s  # since the last key
            await _wait(pilot, lambda t=t, word=word: shown.after(t, word, True) is not None, 10)
            named.append(shown.after(t, word, False))
            whole.append(shown.after(t, word, True))
            await pilot.pause(pause_s)
    finally:
        shown.close()
    return {
        "note": path,
        "words": len(words),
        "list_after_last_key_ms": _summary(whole),
        "first_update_after_last_key_ms": _summary(named),
        "missing": sum(x is None for x in whole),
    }


def _summary(values: Sequence[float | None]) -> dict[str, Any]:
    got = [v for v in values if v is not None]
    if not got:
        return {}
    return {
        "n": len(got),
        "median": round(statistics.median(got), 1),
        "p95": round(percentile(got, 95), 1),
        "max": round(max(got), 1),
    }


async def measure(
    vault: Path,
    queries: Sequence[str],
    key_gap_s: float = 0.08,
    writer_words: Sequence[str] = (),
    space_after: bool = False,
) -> dict[str, Any]:
    """Run the app on `vault`, open, type `queries`; the ticker's report plus open timings."""
    from explorer.config import load_settings
    from explorer.tui.app import ExplorerApp
    from explorer.tui.widgets.search_box import SearchBox

    ticker = Ticker()
    echo = Echo()
    out: dict[str, Any] = {"vault": str(vault)}
    with tempfile.TemporaryDirectory() as tmp:
        app = ExplorerApp(vault, load_settings(vault), state_path=Path(tmp) / "state.json", watch=True)
        t0 = time.perf_counter()
        async with app.run_test(size=(120, 40), message_hook=echo.hook) as pilot:
            app.set_interval(0.01, ticker.tick)
            ok = await _wait(pilot, lambda: app.status.index == "ready", 300)
            out["index_ready_s"] = round(time.perf_counter() - t0, 2) if ok else None
            ok = await _wait(pilot, lambda: app.status.model == "ready", 300)
            out["model_ready_s"] = round(time.perf_counter() - t0, 2) if ok else None
            await pilot.pause(1.0)
            ticker.phase = "typing"
            screen = app.main_screen
            box = screen.query_one(SearchBox)
            box.focus()
            latencies = []
            for q in queries:
                box.value = ""
                await pilot.pause(0.3)
                for i, ch in enumerate(q):
                    echo.expect(q[: i + 1])
                    type_key(app, ch)
                    await asyncio.sleep(key_gap_s)
                t = time.perf_counter() - key_gap_s  # since the last key
                done = await _wait(
                    pilot,
                    lambda q=q: (
                        screen.results is not None and screen.results.query == q and screen.stage == "full"
                    ),
                    30,
                )
                latencies.append(round((time.perf_counter() - t) * 1000, 1) if done else None)
            out["results_after_last_key_ms"] = latencies
            ticker.phase = "idle"
            await pilot.pause(2.0)
            out["mode"] = screen.results.mode.to_dict() if screen.results is not None else {}
            if writer_words:
                out["echo_search_box"] = echo.report()
                echo.latencies.clear()
                ticker.phase = "writing"
                out["writer"] = await write_words(
                    app, pilot, writer_words, key_gap_s, echo, space_after=space_after
                )
                out["writer"]["echo"] = echo.report()
    out["phases"] = ticker.report()
    out["echo"] = out.pop("echo_search_box", None) or echo.report()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vault", type=Path, default=DEFAULT_VAULT)
    parser.add_argument("--queries", type=int, default=12)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--tag", default="")
    parser.add_argument(
        "--writer",
        type=int,
        default=0,
        metavar="N",
        help="then type N words in writing mode (0: no writing phase)",
    )
    parser.add_argument("--skip-search", action="store_true", help="type no search queries (with --writer)")
    parser.add_argument(
        "--writer-delay",
        type=float,
        help="the writer's quiet time before it asks for suggestions, s (default: the shipped RELATED_DELAY)",
    )
    parser.add_argument(
        "--writer-word-end-delay",
        type=float,
        help="the writer's quiet time after a key that ends a word, s (default: the shipped WORD_END_DELAY)",
    )
    parser.add_argument(
        "--writer-space-after",
        action="store_true",
        help="in writing mode, type a space after each word before the pause (default: pause after its last letter)",
    )
    parser.add_argument(
        "--no-embedding",
        action="store_true",
        help="a vault whose embedding is unfinished: search with the vectors it has, embed nothing during the run",
    )
    args = parser.parse_args(argv)
    if not (args.vault / ".explorer").is_dir():
        print(
            f"{args.vault} has no stored index: run `python -m benchmarks.speed --sizes 10000` first",
            file=sys.stderr,
        )
        return 2
    offline_environment()
    if args.no_embedding:
        from explorer.index.local.vault_index import VaultIndex

        VaultIndex.pending = lambda self: []  # the model worker then finds nothing to embed
    from benchmarks.speed import make_queries, vocabulary

    queries = [q for q in make_queries(vocabulary(), args.queries * 3) if 2 <= len(q.split()) <= 4][
        : args.queries
    ]
    if args.skip_search:
        queries = []
    if args.writer_delay is not None:
        from explorer.tui.screens import writer

        writer.RELATED_DELAY = args.writer_delay
    if args.writer_word_end_delay is not None:
        from explorer.tui.screens import writer

        writer.WORD_END_DELAY = args.writer_word_end_delay
    import random

    rng = random.Random(3)
    writer_words = [rng.choice(vocabulary()[100:5000]) for _ in range(args.writer)]
    log(f"typing {len(queries)} queries and {len(writer_words)} words into the app on {args.vault}")
    report = asyncio.run(
        measure(args.vault, queries, writer_words=writer_words, space_after=args.writer_space_after)
    )
    report["machine"] = machine()
    from explorer.tui.screens.writer import RELATED_DELAY, WORD_END_DELAY

    report["writer_delay_s"] = RELATED_DELAY
    report["writer_word_end_delay_s"] = WORD_END_DELAY
    report["writer_space_after"] = args.writer_space_after
    report["no_embedding"] = args.no_embedding
    rows = [
        [
            phase,
            r["ticks"],
            r["median_ms"],
            r["p99_ms"],
            r["max_ms"],
            r["stalls_over_100ms"],
            " ".join(map(str, r["worst_ms"])),
        ]
        for phase, r in report["phases"].items()
    ]
    print(
        markdown_table(
            ["phase", "ticks", "gap median ms", "gap p99 ms", "gap max ms", "gaps > 100 ms", "worst gaps ms"],
            rows,
        )
    )
    print(f"key echo (ms): {report.get('echo')}")
    print(
        f"index ready {report.get('index_ready_s')} s, model ready {report.get('model_ready_s')} s; "
        f"results after the last key (ms): {report.get('results_after_last_key_ms')}"
    )
    if "writer" in report:
        w = report["writer"]
        print(
            f"writing mode, {w['words']} words: link suggestions after the word's last key (ms) "
            f"{w['list_after_last_key_ms']}, first update {w['first_update_after_last_key_ms']}, "
            f"none shown {w['missing']}; key echo in the editor (ms) {w['echo']}"
        )
    name = f"tui-lag{'-' + args.tag if args.tag else ''}.json"
    write_json(args.out / name, report)
    log(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
