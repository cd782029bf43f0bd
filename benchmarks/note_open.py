"""Time to the first screen when the app's note view opens a long note (10 KB to 400 KB).

Run with ``python -m benchmarks.note_open [--runs 3]``. A vault of generated Markdown notes
(headings, paragraphs, lists, tables, code, wikilinks) of each size is written once under
``bench-out/note-open-vault``; the real app runs headless (120x40, no watcher, embeddings off:
the view does not need them). For each note, `OpenNote` is posted and the time is taken to the
frame after the note's text is in the view (``NoteScreen.first_screen_s``), and to the moment the
whole note is in (a long Markdown note appends its rest after the first frame). With ``--deep`` each
note opens at a cursor three quarters down (a search result's passage), as the app opens a result.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import DEFAULT_OUT, log, machine, markdown_table, offline_environment, write_json

SIZES_KB = (10, 40, 60, 100, 400)
WORDS = (
    "hamster cage bedding compost garden soil water light seed harvest budget index fund coffee "
    "roast grind brew kettle train route station ticket map note memory project review plan"
).split()


def make_note(size_kb: int, seed: int = 0) -> str:
    """A Markdown note of about `size_kb` KB with the usual block kinds."""
    rng = random.Random(seed + size_kb)
    out = [
        "---",
        f"title: Long note {size_kb} KB",
        "tags: [bench, long]",
        "---",
        "",
        f"# Long note {size_kb} KB",
        "",
    ]
    section = 0
    while sum(len(x) + 1 for x in out) < size_kb * 1000:
        section += 1
        out += [f"## Section {section}", ""]
        for _ in range(3):
            words = [rng.choice(WORDS) for _ in range(rng.randint(40, 90))]
            words[rng.randrange(len(words))] = f"[[note-{rng.randint(1, 50)}]]"
            out += [" ".join(words).capitalize() + ".", ""]
        out += [f"- item {rng.choice(WORDS)} {i}" for i in range(4)] + [""]
        if section % 3 == 0:
            out += ["| a | b |", "|---|---|", f"| {rng.choice(WORDS)} | {rng.randint(1, 99)} |", ""]
        if section % 4 == 0:
            out += ["```python", "def f(x):", "    return x * 2", "```", ""]
    return "\n".join(out)


def make_vault(root: Path) -> dict[int, str]:
    """Write the notes (once); their paths by size."""
    paths = {}
    for kb in SIZES_KB:
        rel = f"long/note-{kb}kb.md"
        file = root / rel
        if not file.exists():
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(make_note(kb), encoding="utf-8")
        paths[kb] = rel
    for i in range(1, 51):
        file = root / f"note-{i}.md"
        if not file.exists():
            file.write_text(f"# Note {i}\n\nA short note about {WORDS[i % len(WORDS)]}.\n", encoding="utf-8")
    return paths


def _first_screen(app: Any, note_screen: type, rel: str) -> bool:
    """The note view shows `rel` (its first frame is drawn; older views: its Markdown is in)."""
    screen = app.screen
    if not isinstance(screen, note_screen) or screen.place.path != rel:
        return False
    if hasattr(screen, "first_screen_s"):
        return screen.first_screen_s is not None
    found = screen.query("#note-md")
    return bool(found and found.first().source)


def deep_cursor(text: str) -> int:
    """A cursor three quarters down `text`: the start of the line there."""
    return text.rfind("\n", 0, len(text) * 3 // 4) + 1


async def measure(
    vault: Path, paths: dict[int, str], runs: int, deep: bool = False
) -> dict[int, dict[str, Any]]:
    """Open each note `runs` times (at a cursor three quarters down with `deep`); first-screen and
    complete times in ms."""
    from explorer.config import Settings
    from explorer.tui.app import ExplorerApp
    from explorer.tui.messages import OpenNote
    from explorer.tui.screens.note import NoteScreen

    settings = Settings().with_overrides({"index.embeddings": False})
    out: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        app = ExplorerApp(vault, settings, state_path=Path(tmp) / "state.json", watch=False, load_model=False)
        async with app.run_test(size=(120, 40)) as pilot:
            while app.status.index != "ready":
                await pilot.pause(0.05)
            for kb, rel in paths.items():
                first, complete, views = [], [], []
                cursor = deep_cursor((vault / rel).read_text(encoding="utf-8")) if deep else None
                for _ in range(runs):
                    t0 = time.perf_counter()
                    app.post_message(OpenNote(rel, cursor))
                    while not _first_screen(app, NoteScreen, rel):
                        await asyncio.sleep(0.002)
                    if not hasattr(app.screen, "first_screen_s"):
                        drawn = asyncio.Event()  # a view without the attribute: its next frame
                        app.screen.call_after_refresh(drawn.set)
                        await drawn.wait()
                    first.append((time.perf_counter() - t0) * 1000)
                    screen = app.screen
                    views.append(getattr(screen, "view", "markdown"))
                    while getattr(screen, "view", "") == "partial":
                        await asyncio.sleep(0.002)
                    complete.append((time.perf_counter() - t0) * 1000)
                    await pilot.press("escape")
                    while isinstance(app.screen, NoteScreen):
                        await asyncio.sleep(0.01)
                out[kb] = {
                    "first_screen_ms": round(statistics.median(first), 1),
                    "first_screen_max_ms": round(max(first), 1),
                    "complete_ms": round(statistics.median(complete), 1),
                    "view": views[0],
                    "first_screen_chars": len(getattr(screen, "first_screen_source", None) or ""),
                    "chars": len((vault / rel).read_text(encoding="utf-8")),
                }
                log(f"{kb} KB: {out[kb]}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--tag", default="")
    parser.add_argument("--deep", action="store_true", help="open each note three quarters down")
    args = parser.parse_args(argv)
    offline_environment()
    vault = args.out / "note-open-vault"
    paths = make_vault(vault)
    notes = asyncio.run(measure(vault, paths, args.runs, args.deep))
    report = {"runs": args.runs, "deep": args.deep, "notes": notes, "machine": machine()}
    rows = [
        [
            f"{kb} KB",
            r["view"],
            r["first_screen_ms"],
            r["first_screen_max_ms"],
            r["complete_ms"],
            r["first_screen_chars"],
        ]
        for kb, r in report["notes"].items()
    ]
    print(
        markdown_table(
            [
                "note",
                "view",
                "first screen ms (median)",
                "first screen ms (max)",
                "whole note ms",
                "first screen chars",
            ],
            rows,
        )
    )
    name = f"note-open{'-' + args.tag if args.tag else ''}.json"
    write_json(args.out / name, report)
    log(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
