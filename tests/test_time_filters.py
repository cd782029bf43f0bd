"""Time and property filters: after:/before:/on:, [property:value], dates on results, recency, in every entry point."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import io
import json
import os
from pathlib import Path

import pytest

from conftest import SIZE, make_app, option_text, search, wait_for, write_notes
from explorer.config import Settings
from explorer.search.core.pipeline import SearchPipeline
from explorer.search.core.query import parse_query
from explorer.text.dates import DateError, note_date, parse_period

TODAY = dt.date(2023, 5, 10)  # a Wednesday

NOTES = {
    "Trips/hike-may.md": "---\ndate: 2023-05-07\nstatus: Draft\ntags: [trip]\n---\n# Mountain hike\n\n"
    "We hiked the ridge trail to the lake and camped by the hut.\n",
    "Trips/hike-june.md": "---\ncreated: 2023-06-02T09:30:00\nstatus: [published, Reviewed]\n---\n# Coast hike\n\n"
    "A hike along the cliffs of the coast trail, windy and long.\n",
    "Journal/2023-04-30.md": "# Sunday\n\nPlanned a hike for next week and bought new boots for the trail.\n",
    "Notes/boots.md": '---\naliases: [Hiking boots]\nstatus: "\\e[2J\\e]0;pwned\\a draft"\n---\n# Boots\n\n'
    "Waterproof hiking boots need a week of wearing in before a long trail.\n",
    "Users/amy/turns/turn_000001/context.md": "# Turn 1\n\nAmy asked which hike trail suits a rainy day.\n",
    "Users/amy/turns/turn_000001/metadata.json": json.dumps(
        {"turn_id": 1, "timestamp": "2023-05-09T18:00:00Z"}
    ),
}
#: The undated note's file time: 20 May 2023, noon (local).
UNDATED_TIME = dt.datetime(2023, 5, 20, 12, 0).timestamp()


def dated_vault(root: Path) -> Path:
    vault = write_notes(root, NOTES)
    os.utime(vault / "Notes/boots.md", (UNDATED_TIME, UNDATED_TIME))
    return vault


@pytest.fixture(scope="module")
def pipe(tmp_path_factory: pytest.TempPathFactory, embedder) -> SearchPipeline:
    from explorer.index.local.vault_index import VaultIndex

    vault = dated_vault(tmp_path_factory.mktemp("dated") / "vault")
    index = VaultIndex(vault, Settings(), embedder=embedder)
    index.open()
    index.embed_pending()
    pipeline = SearchPipeline(index, Settings())
    pipeline.today = lambda: TODAY
    yield pipeline
    index.close()


def paths(res) -> set[str]:
    """The searched results' notes (always-include entries left aside)."""
    return {r.document_path for r in res.results if r.source == "search"}


# -- the parser --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, first, last",
    [
        ("2023-05-07", "2023-05-07", "2023-05-07"),
        ("7 May 2023", "2023-05-07", "2023-05-07"),
        ("May 7 2023", "2023-05-07", "2023-05-07"),
        ("May 7, 2023", "2023-05-07", "2023-05-07"),
        ("7th of May, 2023", "2023-05-07", "2023-05-07"),
        ("2023-05", "2023-05-01", "2023-05-31"),
        ("May 2023", "2023-05-01", "2023-05-31"),
        ("Feb 2024", "2024-02-01", "2024-02-29"),
        ("2023", "2023-01-01", "2023-12-31"),
        ("today", "2023-05-10", "2023-05-10"),
        ("yesterday", "2023-05-09", "2023-05-09"),
        ("this week", "2023-05-08", "2023-05-14"),
        ("last week", "2023-05-01", "2023-05-07"),
        ("last month", "2023-04-01", "2023-04-30"),
        ("this year", "2023-01-01", "2023-12-31"),
        ("last year", "2022-01-01", "2022-12-31"),
        ("3 days ago", "2023-05-07", "2023-05-07"),
        ("last 7 days", "2023-05-04", "2023-05-10"),
    ],
)
def test_date_expressions(text: str, first: str, last: str) -> None:
    p = parse_period(text, TODAY).to_dict()
    assert (p["first"], p["last"]) == (first, last)


@pytest.mark.parametrize(
    "text, says",
    [
        ("2023-02-30", "not a real date"),
        ("2023-13", "no month 13"),
        ("soonish", "not a date"),
        ("Mayo 2023", "not a month name"),
        ("", "no date given"),
        ("last 0 days", "1 or more"),
    ],
)
def test_bad_dates_say_why(text: str, says: str) -> None:
    with pytest.raises(DateError, match=says):
        parse_period(text, TODAY)


def test_query_operators_take_multi_word_dates_and_keep_the_rest() -> None:
    q = parse_query('hike on:7 May 2023 trail after:last week before:"June 2023"', TODAY)
    assert q.text == "hike trail"
    assert [p.text for p in q.on] == ["7 May 2023"]
    assert [p.to_dict()["last"] for p in q.after] == ["2023-05-07"]
    assert [p.to_dict()["first"] for p in q.before] == ["2023-06-01"]
    assert q.filters_dict()["on"] == [{"text": "7 May 2023", "first": "2023-05-07", "last": "2023-05-07"}]


def test_a_bad_date_is_a_warning_and_nothing_is_lost() -> None:
    q = parse_query("tag:trip hike on:2023-02-30", TODAY)
    assert not q.on and q.tags == ("trip",)
    assert q.text == "hike 2023-02-30"  # the words stay searched
    assert (
        len(q.warnings) == 1
        and "on:2023-02-30 not applied" in q.warnings[0]
        and "not a real date" in q.warnings[0]
    )
    assert "it needs a date" in parse_query("on: hike", TODAY).warnings[0]


def test_property_syntax() -> None:
    q = parse_query('[status:Draft OR "published"] -[archived] [aliases] plan array[0]', TODAY)
    assert q.text == "plan array[0]"
    assert [p.text for p in q.properties] == ['[status:Draft OR "published"]', "-[archived]", "[aliases]"]
    assert q.properties[0].values == (("Draft", False), ("published", True))
    assert q.properties[1].negated and not q.properties[2].values
    assert parse_query("[[Some note]] x", TODAY).properties == ()
    assert parse_query("[status: in progress ] x", TODAY).properties[0].values == (("in progress", False),)


def test_property_values_match_as_obsidian_does() -> None:
    q = parse_query("[Status:draft]", TODAY).properties[0]
    assert q.matches({"status": "Draft"}) and q.matches({"status": ["final", "DRAFT v2"]})
    assert not q.matches({"status": "final"}) and not q.matches({"state": "draft"})
    exact = parse_query('[status:"draft"]', TODAY).properties[0]
    assert exact.matches({"status": ["Draft"]}) and not exact.matches({"status": "draft v2"})
    assert parse_query("[done:true]", TODAY).properties[0].matches({"done": True})
    assert parse_query("[due:2023-05]", TODAY).properties[0].matches({"due": dt.date(2023, 5, 7)})
    assert parse_query("[priority:3]", TODAY).properties[0].matches({"priority": 3})
    assert parse_query("[aliases]", TODAY).properties[0].matches({"aliases": None})


def test_note_dates_in_order_of_trust() -> None:
    assert note_date({"date": dt.date(2023, 1, 2), "created": "2020-01-01"}, {}, "a.md", 0) == (
        dt.date(2023, 1, 2),
        "date",
    )
    assert note_date({"created": "2023-06-02T09:30:00"}, {}, "a.md", None) == (dt.date(2023, 6, 2), "created")
    assert note_date({}, {"timestamp": "2023-05-09T18:00:00Z"}, "t.md", None) == (
        dt.date(2023, 5, 9),
        "timestamp",
    )
    assert note_date({"date": "8 May, 2023"}, {}, "a.md", None) == (dt.date(2023, 5, 8), "date")
    assert note_date({}, {}, "Journal/2023-04-30.md", None) == (dt.date(2023, 4, 30), "file name")
    assert note_date({"date": "someday"}, {}, "a.md", int(UNDATED_TIME * 1e9)) == (
        dt.date(2023, 5, 20),
        "modified",
    )
    assert note_date({}, {}, "a.md", None) is None


# -- the pipeline --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "query, expect",
    [
        (
            "hike on:2023-05",
            {"Trips/hike-may.md", "Users/amy/turns/turn_000001/context.md", "Notes/boots.md"},
        ),
        ("hike on:7 May 2023", {"Trips/hike-may.md"}),
        (
            "hike after:2023-05-07",
            {"Trips/hike-june.md", "Users/amy/turns/turn_000001/context.md", "Notes/boots.md"},
        ),
        ("hike before:May 2023", {"Journal/2023-04-30.md"}),
        ("hike after:last week before:today", {"Users/amy/turns/turn_000001/context.md"}),  # 8-9 May
        ("hike on:yesterday", {"Users/amy/turns/turn_000001/context.md"}),
        ("hike on:2022", set()),
        ("hike [status:draft]", {"Trips/hike-may.md", "Notes/boots.md"}),
        ('hike [status:"draft"]', {"Trips/hike-may.md"}),
        ("hike [status:reviewed OR draft] tag:trip", {"Trips/hike-may.md"}),
        ("hike -[status]", {"Journal/2023-04-30.md", "Users/amy/turns/turn_000001/context.md"}),
        ("hike [aliases] on:2023-05", {"Notes/boots.md"}),
    ],
)
def test_filters_in_the_pipeline(pipe: SearchPipeline, query: str, expect: set[str]) -> None:
    res = pipe.search(query, k=10, two_pass=False)
    assert {r.document_path for r in res.results if r.source == "search"} == expect


def test_results_carry_their_date(pipe: SearchPipeline) -> None:
    res = pipe.search("hike trail boots", k=10, two_pass=False)
    dates = {r.document_path: (r.date, r.date_from) for r in res.results}
    assert dates["Trips/hike-may.md"] == ("2023-05-07", "date")
    assert dates["Trips/hike-june.md"] == ("2023-06-02", "created")
    assert dates["Users/amy/turns/turn_000001/context.md"] == ("2023-05-09", "timestamp")
    assert dates["Journal/2023-04-30.md"] == ("2023-04-30", "file name")
    assert dates["Notes/boots.md"] == ("2023-05-20", "modified")
    assert res.to_dict()["results"][0]["date"] == res.results[0].date


def test_a_filter_only_date_query_lists_newest_first(pipe: SearchPipeline) -> None:
    res = pipe.search("on:2023-05", k=10)
    assert [r.document_path for r in res.results if r.source == "search"] == [
        "Notes/boots.md",
        "Users/amy/turns/turn_000001/context.md",
        "Trips/hike-may.md",
    ]
    latest = pipe.search("recent:on", k=2)
    assert [r.date for r in latest.results if r.source == "search"] == ["2023-06-02", "2023-05-20"]


def test_recency_is_off_by_default_and_gentle_when_asked(pipe: SearchPipeline) -> None:
    plain = pipe.search("hike trail", k=10, two_pass=False)
    off = pipe.search("hike trail recent:off", k=10, two_pass=False)
    assert [(r.document_path, r.score) for r in plain.results] == [
        (r.document_path, r.score) for r in off.results
    ]
    assert all(r.explanation is None or r.explanation.recency is None for r in plain.results)
    assert all("recency" not in (r["explanation"] or {}) for r in plain.to_dict()["results"])
    recent = pipe.search("hike trail recent:7d", k=10, two_pass=False)
    base = {r.document_path: r.score for r in plain.results if r.source == "search"}
    for r in recent.results:
        if r.source != "search":
            continue
        factor = r.explanation.recency
        assert 1.0 - Settings().experimental.recency_weight <= factor <= 1.0
        assert r.score == pytest.approx(base[r.document_path] * factor, rel=1e-9)
    # The April note, 10 days old at a 7-day half-life, keeps 1 - w * (1 - 0.5 ** (10 / 7)) of its score.
    w = Settings().experimental.recency_weight
    april = next(r for r in recent.results if r.document_path == "Journal/2023-04-30.md")
    assert april.explanation.recency == pytest.approx(1 - w * (1 - 0.5 ** (10 / 7)), rel=1e-9)
    strong = SearchPipeline(pipe.index, Settings().with_overrides({"experimental.recency_weight": 1.0}))
    strong.today = lambda: TODAY
    april = next(
        r
        for r in strong.search("hike trail recent:7d", k=10, two_pass=False).results
        if r.document_path == "Journal/2023-04-30.md"
    )
    assert april.explanation.recency == pytest.approx(0.5 ** (10 / 7), rel=1e-9)
    order = [r.document_path for r in recent.results if r.source == "search"]
    assert order == sorted(
        order, key=lambda p: -next(r.score for r in recent.results if r.document_path == p)
    )


def test_recency_setting(pipe: SearchPipeline) -> None:
    p2 = SearchPipeline(pipe.index, Settings().with_overrides({"search.recency_half_life_days": 7}))
    p2.today = lambda: TODAY
    a = p2.search("hike trail", k=10, two_pass=False)
    b = pipe.search("hike trail recent:7d", k=10, two_pass=False)
    assert [(r.document_path, r.score) for r in a.results] == [(r.document_path, r.score) for r in b.results]
    c = p2.search("hike trail recent:off", k=10, two_pass=False)
    assert all(r.explanation is None or r.explanation.recency is None for r in c.results)


def test_relative_dates_follow_today_and_the_cache_knows(pipe: SearchPipeline) -> None:
    assert paths(pipe.search("hike on:yesterday", two_pass=False)) == {
        "Users/amy/turns/turn_000001/context.md"
    }
    pipe.today = lambda: dt.date(2023, 5, 8)
    try:
        assert paths(pipe.search("hike on:yesterday", two_pass=False)) == {"Trips/hike-may.md"}
    finally:
        pipe.today = lambda: TODAY


def test_bad_date_still_searches_with_a_warning(pipe: SearchPipeline) -> None:
    res = pipe.search("hike [status:draft] on:2023-02-30", k=10, two_pass=False)
    assert any("on:2023-02-30 not applied" in w for w in res.warnings)
    assert paths(res) <= {"Trips/hike-may.md", "Notes/boots.md"} and res.results


# -- the CLI ---------------------------------------------------------------------------------------
def _cli(argv: list[str]) -> tuple[int, str, str]:
    from explorer.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_cli_filters_dates_and_a_hostile_property_value(tmp_path: Path) -> None:
    vault = dated_vault(tmp_path / "vault")
    code, out, _ = _cli(
        ["search", "--vault", str(vault), "--local", "--lexical", "hike [status:pwned] on:2023-05", "--json"]
    )
    assert code == 0
    data = json.loads(out)
    assert [r["document_path"] for r in data["results"] if r["source"] == "search"] == ["Notes/boots.md"]
    assert data["results"][0]["date"] == "2023-05-20" and data["results"][0]["date_from"] == "modified"
    assert data["filters"]["properties"] == ["[status:pwned]"]
    assert data["filters"]["on"][0]["first"] == "2023-05-01"
    code, text, _ = _cli(
        ["search", "--vault", str(vault), "--local", "--lexical", "hike trail [status] on:\x1b[2J2023"]
    )
    assert code == 0 and "\x1b" not in text and "\x07" not in text
    assert "· 2023-05-07" in text and "· 2023-05-20 (modified)" in text
    code, text, _ = _cli(["search", "--vault", str(vault), "--local", "--lexical", "hike on:2023-13"])
    assert code == 0 and "warning: on:2023-13 not applied: there is no month 13" in text


# -- MCP through the real SDK client ---------------------------------------------------------------
def test_mcp_search_takes_time_arguments(tmp_path: Path) -> None:
    from inproc import mcp_client
    from test_mcp import _error, _payload

    vault = dated_vault(tmp_path / "vault")

    async def session() -> None:
        async with mcp_client(vault, "--no-embeddings") as client:
            tool = next(t for t in (await client.list_tools()).tools if t.name == "search")
            assert {"after", "before", "on", "recent_days"} <= set(tool.input_schema["properties"])
            found = _payload(
                await client.call_tool("search", {"query": "hike", "on": "May 2023", "k": 10, "detail": True})
            )
            assert {r["document_path"] for r in found["results"] if r["source"] == "search"} == {
                "Trips/hike-may.md",
                "Users/amy/turns/turn_000001/context.md",
                "Notes/boots.md",
            }
            assert all(r["date"].startswith("2023-05") for r in found["results"] if r["source"] == "search")
            brief = _payload(await client.call_tool("search", {"query": "hike", "on": "May 2023", "k": 10}))
            assert all(r["date"].startswith("2023-05") for r in brief["results"] if "included" not in r)
            found = _payload(
                await client.call_tool(
                    "search",
                    {
                        "query": "hike [status:draft]",
                        "after": "2023-05-01",
                        "before": "2023-05-15",
                        "detail": True,
                    },
                )
            )
            assert [r["document_path"] for r in found["results"] if r["source"] == "search"] == [
                "Trips/hike-may.md"
            ]
            found = _payload(
                await client.call_tool("search", {"query": "hike", "recent_days": 30, "detail": True})
            )
            assert found["filters"]["recent_days"] == 30
            assert all(r["explanation"]["recency"] <= 1 for r in found["results"] if r["source"] == "search")
            assert "not a real date" in _error(
                await client.call_tool("search", {"query": "hike", "on": "2023-02-30"})
            )
            assert "recent_days" in _error(
                await client.call_tool("search", {"query": "hike", "recent_days": -1})
            )
            assert _payload(await client.call_tool("search", {"query": "hike"}))["results"]  # still serving

    asyncio.run(asyncio.wait_for(session(), timeout=120))


# -- the app ---------------------------------------------------------------------------------------
def test_app_rows_show_the_notes_date(tui_vault: Path, embedder, tmp_path: Path) -> None:
    app = make_app(tui_vault, embedder, tmp_path)

    async def run() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.status.index == "ready", timeout=60.0)
            res = await search(app, pilot, "hamster cage on:2026-11-19")
            rows = app.main_screen.query_one("#results")
            assert {r.document_path for r in res.results if r.source == "search"} == {
                "Users/alice/turns/turn_000106/context.md",
                "Journal/2026-11-19.md",
            }
            assert all("2026-11-19" in option_text(rows, i) for i in range(2))
            res = await search(app, pilot, "hamster knowledge")
            undated = [i for i, r in enumerate(res.results) if r.date_from == "modified"]
            assert undated and res.results[undated[0]].date not in option_text(rows, undated[0])

    asyncio.run(run())


def test_an_edited_property_or_date_is_searched_at_once(tmp_path: Path, embedder) -> None:
    from explorer.index.local.vault_index import VaultIndex

    vault = dated_vault(tmp_path / "vault")
    index = VaultIndex(vault, Settings(), embedder=embedder)
    index.open()
    try:
        pipeline = SearchPipeline(index, Settings())
        pipeline.today = lambda: TODAY
        assert paths(pipeline.search("hike [status:final]", two_pass=False)) == set()
        note = vault / "Trips/hike-may.md"
        note.write_text(
            note.read_text(encoding="utf-8")
            .replace("status: Draft", "status: Final")
            .replace("date: 2023-05-07", "date: 2021-01-01"),
            encoding="utf-8",
        )
        index.refresh()
        assert paths(pipeline.search("hike [status:final]", two_pass=False)) == {"Trips/hike-may.md"}
        assert paths(pipeline.search("hike on:2021", two_pass=False)) == {"Trips/hike-may.md"}
        assert "Trips/hike-may.md" not in paths(pipeline.search("hike on:2023-05", two_pass=False))
    finally:
        index.close()


def test_a_pdf_is_dated_by_its_file_time_and_filtered_like_a_note(tmp_path: Path, embedder) -> None:
    from explorer.index.local.vault_index import VaultIndex
    from pdfs import text_pdf

    vault = dated_vault(tmp_path / "vault")
    pdf = vault / "Papers/trail-guide.pdf"
    pdf.parent.mkdir(parents=True)
    pdf.write_bytes(text_pdf(["A guide to the ridge trail hike.", "Boots and maps for the hike."]))
    os.utime(pdf, (UNDATED_TIME, UNDATED_TIME))
    index = VaultIndex(vault, Settings(), embedder=embedder)
    index.open()
    try:
        pipeline = SearchPipeline(index, Settings())
        pipeline.today = lambda: TODAY
        res = pipeline.search("ridge trail guide on:2023-05-20", two_pass=False)
        # The only notes dated 20 May 2023: the PDF and the undated boots note (both by file time).
        assert "Papers/trail-guide.pdf" in paths(res) and paths(res) <= {
            "Papers/trail-guide.pdf",
            "Notes/boots.md",
        }
        page = next(r for r in res.results if r.document_path == "Papers/trail-guide.pdf")
        assert (page.date, page.date_from) == ("2023-05-20", "modified")
        assert "Papers/trail-guide.pdf" not in paths(
            pipeline.search("ridge trail guide on:2022", two_pass=False)
        )
    finally:
        index.close()
