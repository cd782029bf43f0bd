"""The memory service's tools, declared once, through the real MCP SDK client connected in process.

One service per test on a small vault (BM25 only, no watcher): the SDK builds each tool's input
schema from the service method's signature, exactly as `explorer mcp` offers it over stdio and HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from explorer.cli.mcp import build_server
from explorer.engine.memory import MemoryService
from explorer.engine.tools import MAX_NAME_CHARS, ToolInputError, tool
from tests.conftest import quiet_settings, sync, write_notes

REPO = Path(__file__).resolve().parent.parent
#: tools/list of `explorer mcp --allow-write` as a client receives it (stdio and HTTP alike).
TOOLS_LIST = REPO / "tests/golden/mcp_tools_list.json"

NOTES = {
    "Trips/hike-may.md": "---\ndate: 2023-05-07\n---\n# Hike in May\n\nA hike on the ridge trail in spring.\n",
    "Trips/hike-2022.md": "---\ndate: 2022-08-20\n---\n# Hike in August\n\nA hike on the coast trail in summer.\n",
    "Coffee/espresso.md": "# Espresso\n\nA fine grind slows the shot.\n",
}


@pytest.fixture()
def service(tmp_path: Path) -> Iterator[MemoryService]:
    vault = write_notes(tmp_path / "vault", NOTES)
    service = MemoryService(
        vault, quiet_settings(**{"index.embeddings": False}), allow_write=True, user="amy", watch=False
    )
    try:
        yield service
    finally:
        service.close()


def _payload(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


def _error(result: Any) -> str:
    assert result.is_error, result.content
    return result.content[0].text


@sync
async def test_the_tool_list_is_the_service_methods_and_unchanged(service: MemoryService) -> None:
    async with Client(build_server(service)) as client:
        tools = [
            t.model_dump(mode="json", by_alias=True, exclude_none=True)
            for t in (await client.list_tools()).tools
        ]
    assert tools == json.loads(TOOLS_LIST.read_text(encoding="utf-8")), (
        "the tools an agent sees changed: if on purpose, write the new list to " + str(TOOLS_LIST)
    )
    read_only = MemoryService.__new__(MemoryService)
    read_only.allow_write = False
    assert [spec.name for _, spec in read_only.tools()] == [
        t["name"] for t in tools if t["name"] != "remember"
    ]


def test_a_tool_string_argument_without_a_bound_is_refused_at_declaration() -> None:
    with pytest.raises(TypeError, match="'nickname' a limit"):

        @tool()
        def greet(self: Any, nickname: str) -> dict[str, Any]:
            """Say hello."""
            return {}

    with pytest.raises(TypeError, match="docstring"):

        @tool()
        def quiet(self: Any, note: str) -> dict[str, Any]:
            return {}


@sync
async def test_search_time_arguments_are_filters_that_hold_at_the_query_bound(service: MemoryService) -> None:
    # 1,999 characters: one under the 2,000 a search reads, so no time operator written after it would be read.
    long_query = "hike trail " + "ridge coast spring summer " * 76 + "walk" * 3
    assert len(long_query) == 1_999
    async with Client(build_server(service)) as client:

        async def paths(args: dict[str, Any]) -> tuple[set[str], dict[str, Any]]:
            found = _payload(await client.call_tool("search", {"mode": "lexical", "detail": True, **args}))
            return {r["document_path"] for r in found["results"] if r["source"] == "search"}, found

        both = {"Trips/hike-may.md", "Trips/hike-2022.md"}
        assert (await paths({"query": "hike trail"}))[0] == both
        for query in (long_query, "hike trail", 'hike "trail', long_query[:-2] + ' "'):
            got, found = await paths({"query": query, "on": "May 2023"})
            assert got == {"Trips/hike-may.md"}, (len(query), got)
            assert found["filters"]["on"][0]["first"] == "2023-05-01"
            got, _ = await paths({"query": query, "before": "2023", "recent_days": 30})
            assert got == {"Trips/hike-2022.md"}, (len(query), got)
        # A query past the bound is cut, with a warning; its time arguments are not.
        got, found = await paths({"query": long_query * 2, "after": "2023-01-01"})
        assert got == {"Trips/hike-may.md"}
        assert any("cut to 2000" in w for w in found["warnings"])
        # The echo and the brief answer are as before: the query, then the time arguments as operators.
        brief = _payload(await client.call_tool("search", {"query": "hike", "on": "May 2023"}))
        assert brief["query"] == 'hike on:"May 2023"'
        assert [r["document_path"] for r in brief["results"]] == ["Trips/hike-may.md"]
        # Only time arguments: the notes of that period.
        assert (await paths({"query": " ", "on": "2022"}))[0] == {"Trips/hike-2022.md"}


@sync
async def test_find_keywords_are_bounded_in_the_service_too(service: MemoryService) -> None:
    long = "x" * (MAX_NAME_CHARS + 1)
    message = f"an item of keywords is {MAX_NAME_CHARS + 1:,} characters; the limit is {MAX_NAME_CHARS:,}"
    with pytest.raises(ToolInputError, match=message):
        service.find(["grind", long])
    with pytest.raises(ToolInputError, match=f"keywords is {MAX_NAME_CHARS + 1:,} characters"):
        service.find(long)  # type: ignore[arg-type]  # one string from a library caller: one keyword
    assert service.find("grind")["hits"][0]["path"] == "Coffee/espresso.md"  # type: ignore[arg-type]
    with pytest.raises(ToolInputError, match="target is"):
        service.get_context(long)
    async with Client(build_server(service)) as client:
        assert message in _error(await client.call_tool("find", {"keywords": ["grind", long]}))
        assert _payload(await client.call_tool("find", {"keywords": ["grind"]}))["hits"]


@sync
async def test_remember_refuses_what_it_would_drop(service: MemoryService) -> None:
    vault = service.vault
    async with Client(build_server(service)) as client:
        many = [f"word{i}" for i in range(21)]
        message = _error(
            await client.call_tool("remember", {"text": "Kept.", "title": "Keep", "keywords": many})
        )
        assert "keywords: at most 20" in message and "got 21" in message
        message = _error(await client.call_tool("remember", {"text": "Kept.", "title": "t" * 121}))
        assert "title is 121 characters" in message and "at most 120" in message
        assert not (vault / "Users").exists()  # nothing written
        done = _payload(
            await client.call_tool(
                "remember", {"text": "Kept.", "title": "t" * 120, "keywords": [*many[:20], "", "  "]}
            )
        )
        meta = json.loads((vault / done["path"]).with_name("metadata.json").read_text(encoding="utf-8"))
        assert meta["keywords"] == many[:20] and meta["topic"] == "t" * 120


@sync
async def test_an_argument_a_tool_does_not_take_is_an_error_not_dropped(service: MemoryService) -> None:
    async with Client(build_server(service)) as client:
        # A misnamed date filter used to be dropped by the SDK: the answer held both years' hikes.
        message = _error(
            await client.call_tool("search", {"query": "hike", "mode": "lexical", "date_from": "2023-01-01"})
        )
        assert "search takes no argument 'date_from'; nothing was done" in message
        assert "after, before, on, recent_days" in message
        message = _error(await client.call_tool("stats", {"x" * 5000: 1, "verbose": True}))
        assert "'xxx" in message and "'verbose'" in message and len(message) < 300
        message = _error(await client.call_tool("remember", {"text": "Kept?", "tags": ["a"]}))
        assert "'tags'" in message and "keywords" in message
        assert not (service.vault / "Users").exists()
        found = _payload(
            await client.call_tool("search", {"query": "hike", "mode": "lexical", "after": "2023-01-01"})
        )
        assert [r["document_path"] for r in found["results"]] == ["Trips/hike-may.md"]


class _WithEcho(MemoryService):
    @tool()
    def echo(self, note: str, times: int = 1) -> dict[str, Any]:
        """Say a note's name back. Use it to check the connection."""
        return {"echo": [note] * times}


@sync
async def test_one_method_is_a_whole_new_tool(tmp_path: Path) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)
    service = _WithEcho(vault, quiet_settings(**{"index.embeddings": False}), watch=False)
    try:
        async with Client(build_server(service)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert list(tools)[-1] == "echo" and "remember" not in tools
            echo = tools["echo"]
            assert echo.description == "Say a note's name back. Use it to check the connection."
            assert echo.input_schema["required"] == ["note"]
            assert echo.input_schema["properties"]["times"] == {
                "default": 1,
                "title": "Times",
                "type": "integer",
            }
            assert echo.annotations is not None and echo.annotations.read_only_hint is True
            assert _payload(await client.call_tool("echo", {"note": "Kyoto", "times": 2})) == {
                "echo": ["Kyoto", "Kyoto"]
            }
            assert "note is 1,001 characters" in _error(await client.call_tool("echo", {"note": "k" * 1001}))
            assert "takes no argument 'loud'" in _error(
                await client.call_tool("echo", {"note": "a", "loud": 1})
            )
    finally:
        service.close()


def test_the_stdio_command_loads_the_sdk_before_its_service_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`explorer mcp` imports the SDK (~2 s of CPU) before its service opens the index and starts the
    model: imported after, the import competes with the embedding thread and nothing reads the client
    until it ends (the first answer waits, and a client that left keeps the process embedding)."""
    from types import SimpleNamespace

    from explorer.cli import mcp as cli_mcp
    from explorer.cli.entry import main

    vault = write_notes(tmp_path / "vault", NOTES)
    events: list[str] = []

    class Opened(MemoryService):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            events.append("service")
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(cli_mcp, "load_sdk", lambda: events.append("sdk"))
    monkeypatch.setattr(cli_mcp, "MemoryService", Opened)
    monkeypatch.setattr(cli_mcp, "build_server", lambda service: SimpleNamespace(run=events.append))
    assert main(["mcp", str(vault), "--no-embeddings", "--no-watch"]) == 0
    assert events == ["sdk", "service", "stdio"]
