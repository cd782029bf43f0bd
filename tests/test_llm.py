"""The LLM paths against a real HTTP server on 127.0.0.1: client, budget, cache, terms, analysis, and every fault."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import write_notes
from explorer.config import LLMSettings, Settings, load_settings
from explorer.engine import make_pipeline
from explorer.index.local.vault_index import VaultIndex
from explorer.search.core.llm import (
    ANALYSIS_SYSTEM,
    TERMS_SYSTEM,
    Budget,
    BudgetExhausted,
    LLMClient,
    LLMError,
    LLMOutputError,
    LLMUnavailable,
    analysis_prompt,
    extract_json_object,
    llm_analyser,
    llm_term_writer,
    parse_analysis_reply,
    parse_terms_reply,
)
from explorer.search.core.pipeline import SearchPipeline
from llm_server import FakeLLMServer, Reply, closed_port_url, error, prompt_of, terms, text

TIMEOUT = 30.0
"""The client's timeout where an answer is expected: far above a local round trip on a loaded machine."""
SHORT_TIMEOUT = 0.5
"""The client's timeout in the tests of a timeout ..."""
NEVER = 60.0
"""... whose server answers this late: a timeout whatever the machine's load."""

NOTES = {
    "Knowledge/kites.md": "# Kites\n\nA kite needs steady wind between 10 and 30 km/h to fly well.",
    "Journal/beach.md": "# Beach day\n\nWe flew a kite at the beach; the wind was steady and strong.",
    "Gear/spool.md": "# Spool\n\nDacron line, wound on wooden spool; rated 50 lb test.",
    "Recipes/bread.md": "# Bread\n\nSourdough bread needs flour, water, salt and a lively starter.",
    "Recipes/pizza.md": "# Pizza\n\nPizza dough uses flour, water, salt and yeast; bake very hot.",
    "Projects/garden.md": "# Garden\n\n## Tomatoes\n\nTomatoes need sun and regular water.\n\n## Herbs\n\nBasil grows well.",
    "Music/scales.md": "# Scales\n\nA major scale has seven notes; practice slowly with a metronome.",
}

QUERY = "how strong should the wind be to fly a kite"


def is_terms(request: dict[str, Any]) -> bool:
    return request["messages"][0]["content"] == TERMS_SYSTEM


def responder(
    terms_reply: Reply | Callable[[], Reply], analysis_reply: Reply | Callable[[], Reply]
) -> Callable[[dict[str, Any]], Reply]:
    """Answer term requests and analysis requests differently."""

    def answer(request: dict[str, Any]) -> Reply:
        r = terms_reply if is_terms(request) else analysis_reply
        return r() if callable(r) else r

    return answer


@pytest.fixture()
def server():
    with FakeLLMServer() as srv:
        yield srv


@pytest.fixture()
def vault(tmp_path: Path) -> Path:
    return write_notes(tmp_path / "v", NOTES)


def llm_settings(base_url: str, **extra: Any) -> Settings:
    flags = {
        "index.embeddings": False,
        "rerank.enabled": False,
        "llm.base_url": base_url,
        "llm.model": "fake-model",
        "llm.timeout_s": TIMEOUT,
    }
    flags.update(extra)
    return Settings().with_overrides(flags)


@pytest.fixture()
def open_pipeline(vault: Path):
    opened: list[VaultIndex] = []

    def make(base_url: str, **extra: Any) -> SearchPipeline:
        settings = llm_settings(base_url, **extra)
        index = VaultIndex(vault, settings)
        index.open()
        opened.append(index)
        return make_pipeline(index, settings)

    yield make
    for index in opened:
        index.close()


def client(base_url: str, timeout_s: float = TIMEOUT, **kw: Any) -> LLMClient:
    return LLMClient(LLMSettings(base_url=base_url, model="fake-model", timeout_s=timeout_s, **kw))


MSGS = [{"role": "user", "content": "hello"}]


# -- client ------------------------------------------------------------------------------------


def test_chat_sends_openai_request_and_counts_usage(server: FakeLLMServer) -> None:
    server.push(text("hi there", prompt_tokens=12, completion_tokens=3))
    c = client(server.base_url, api_key="secret")
    budget = Budget(1000)
    reply = c.chat(MSGS, max_tokens=50, temperature=0.1, json=True, budget=budget)
    assert reply.text == "hi there" and reply.tokens_used == 15 and not reply.cached
    assert budget.used == 15
    req = server.requests[0]
    assert req["model"] == "fake-model" and req["messages"] == MSGS
    assert req["max_tokens"] == 50 and req["temperature"] == 0.1
    assert req["response_format"] == {"type": "json_object"}


def test_settings_from_the_environment_reach_the_endpoint(server: FakeLLMServer) -> None:
    env = {
        "OPENAI_BASE_URL": server.base_url,
        "EXPLORER_LLM_MODEL": "env-model",
        "EXPLORER_LLM_TIMEOUT_S": "30",
    }
    settings = load_settings(None, environ=env)
    assert settings.llm.configured and settings.llm.timeout_s == 30.0
    server.push(text("ok"), text("ok"))
    LLMClient(settings.llm).chat(MSGS)
    assert server.requests[0]["model"] == "env-model" and server.requests[0]["temperature"] == 0.4
    assert server.headers[0]["authorization"] == "Bearer none", "a keyless local server still gets a header"
    keyed = load_settings(None, environ=dict(env, OPENAI_API_KEY="sk-test"))
    LLMClient(keyed.llm).chat([{"role": "user", "content": "keyed"}])
    assert server.headers[1]["authorization"] == "Bearer sk-test"
    assert not load_settings(None, environ={"OPENAI_BASE_URL": server.base_url}).llm.configured, (
        "a model is needed too"
    )


def test_replies_are_cached_per_prompt_and_model(server: FakeLLMServer) -> None:
    server.push(text("one"), text("two"))
    c = client(server.base_url)
    c.cache_size = 2
    budget = Budget(10_000)
    assert c.chat(MSGS, budget=budget).text == "one"
    used = budget.used
    again = c.chat(MSGS, budget=budget)
    assert again.text == "one" and again.cached and again.tokens_used == 0 and budget.used == used
    assert len(server.requests) == 1 and c.calls == 1
    other = LLMClient(LLMSettings(base_url=server.base_url, model="other-model", timeout_s=TIMEOUT))
    assert other.chat(MSGS).text == "two", "another model is another cache entry"
    # Least recently used goes first: two other prompts push the first one out.
    server.push(text("a"), text("b"), text("fresh"))
    assert c.chat([{"role": "user", "content": "a"}]).text == "a"
    assert c.chat([{"role": "user", "content": "b"}]).text == "b"
    assert c.chat(MSGS).text == "fresh"


def test_budget_exhausted_is_a_typed_error_before_any_request(server: FakeLLMServer) -> None:
    server.push(text("first", prompt_tokens=70, completion_tokens=10))
    c = client(server.base_url)
    budget = Budget(100)
    c.chat(MSGS, max_tokens=20, budget=budget)
    assert budget.used == 80 and budget.remaining == 20
    with pytest.raises(BudgetExhausted) as info:
        c.chat([{"role": "user", "content": "again"}], max_tokens=20, budget=budget)
    assert info.value.reason == "budget exhausted"
    assert len(server.requests) == 1, "no request once the budget is spent"


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (error(500), "http 500"),
        (error(429, "rate limited"), "http 429"),
        (text("late", delay=NEVER), "timeout"),
        (Reply(200, "this is not json", content_type="text/plain"), "malformed response"),
        (Reply(200, "<html>not json</html>"), "malformed response"),
        (Reply(200, json.dumps({"object": "list", "data": []})), "malformed response"),
    ],
)
def test_client_faults_raise_llm_error(server: FakeLLMServer, reply: Reply, reason: str) -> None:
    server.push(reply)
    with pytest.raises(LLMError) as info:
        client(server.base_url, SHORT_TIMEOUT if reason == "timeout" else TIMEOUT).chat(MSGS)
    assert info.value.reason == reason


def test_connection_refused_and_no_endpoint() -> None:
    with pytest.raises(LLMError) as info:
        client(closed_port_url()).chat(MSGS)
    assert info.value.reason == "connection failed"
    with pytest.raises(LLMUnavailable):
        LLMClient(LLMSettings()).chat(MSGS)


def test_client_is_lazy_about_openai() -> None:
    probe = (
        "import sys\n"
        "from explorer.config import LLMSettings\n"
        "from explorer.search.core.llm import LLMClient\n"
        "LLMClient(LLMSettings(base_url='http://127.0.0.1:9/v1', model='m'))\n"
        "print('openai' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# -- parsing -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        '{"search_terms": ["kite wind", "wind speed"], "include_preferences": false, "include_n_minus_1": true}',
        (
            'Sure! Here you go:\n```json\n{"search_terms": ["kite wind", "wind speed"], "include_preferences": "false", '
            '"include_n_minus_1": "true"}\n```\nHope that helps {not json}.'
        ),
        (
            'Terms below {broken json} then {"search_terms": ["kite wind", "wind speed"], "include_n_minus_1": true, '
            '"include_preferences": false} trailing prose'
        ),
    ],
)
def test_parse_terms_reply_is_robust(reply: str) -> None:
    got, prefs, n1 = parse_terms_reply(reply)
    assert got == ["kite wind", "wind speed"] and prefs is False and n1 is True


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("kite wind, wind speed", "unparsable output"),
        ('{"search_terms": "kite wind"}', "wrong shape"),
        ('{"search_terms": [1, 2]}', "wrong shape"),
        ('["kite wind", "wind speed"]', "unparsable output"),
        ('{"keywords": ["a"]}', "wrong shape"),
    ],
)
def test_parse_terms_reply_errors(reply: str, reason: str) -> None:
    with pytest.raises(LLMOutputError) as info:
        parse_terms_reply(reply)
    assert info.value.reason == reason


def test_extract_json_object_takes_the_first_object() -> None:
    assert extract_json_object('x {"a": {"b": 1}} {"c": 2}') == {"a": {"b": 1}}
    assert extract_json_object("no braces") is None


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("SUFFICIENT", ("SUFFICIENT", "")),
        ("sufficient.", ("SUFFICIENT", "")),
        ("**SUFFICIENT**", ("SUFFICIENT", "")),
        ("REFINE: dacron kite line", ("REFINE", "dacron kite line")),
        ('Looking at these...\n**REFINE:** "dacron kite line"', ("REFINE", "dacron kite line")),
        ("refine - dacron kite line", ("REFINE", "dacron kite line")),
    ],
)
def test_parse_analysis_reply(reply: str, expected: tuple[str, str]) -> None:
    assert parse_analysis_reply(reply) == expected


@pytest.mark.parametrize(
    ("reply", "reason"),
    [("REFINE:", "empty refine query"), ("I cannot tell.", "unparsable output"), ("", "unparsable output")],
)
def test_parse_analysis_reply_errors(reply: str, reason: str) -> None:
    with pytest.raises(LLMOutputError) as info:
        parse_analysis_reply(reply)
    assert info.value.reason == reason


# -- term writer and analyser --------------------------------------------------------------------


def test_term_writer_uses_llm_terms_and_flags(server: FakeLLMServer) -> None:
    server.push(terms(["kite wind speed", "steady wind", "flying a kite"], include_preferences=True))
    writer = llm_term_writer(client(server.base_url), None, Settings())
    got = writer("how windy for kites", budget=Budget(4000))
    assert got.source == "llm" and got.terms == ("kite wind speed", "steady wind", "flying a kite")
    assert got.include_preferences is True and got.include_n_minus_1 is False
    assert got.tokens_used == 30 and got.warnings == ()
    req = server.requests[0]
    assert (
        req["response_format"] == {"type": "json_object"}
        and req["temperature"] == 0.4
        and req["max_tokens"] == 200
    )
    assert "how windy for kites" in prompt_of(req)


def test_term_writer_missing_flags_come_from_cue_words(server: FakeLLMServer) -> None:
    server.push(text('{"search_terms": ["hamster for sale", "syrian hamster"]}'))
    got = llm_term_writer(client(server.base_url), None, Settings())("find syrian hamsters for sale online")
    assert got.source == "llm" and got.include_preferences is True


def test_analysis_prompt_shows_ke_entries_and_kc_passages(tmp_path: Path) -> None:
    root = tmp_path / "v"
    root.mkdir()
    for i in range(12):
        sections = "\n\n".join(f"## Part {j}\n\nkite number {i} part {j} flies in wind" for j in range(4))
        (root / f"k{i:02d}.md").write_text(f"# Kite {i}\n\n{sections}", encoding="utf-8")
    settings = Settings().with_overrides({"index.embeddings": False})
    index = VaultIndex(root, settings)
    index.open()
    res = SearchPipeline(index, settings).search("kite wind", two_pass=False)
    prompt = analysis_prompt("kite wind", res, 10, 3)
    index.close()
    assert "[10]" in prompt and "[11]" not in prompt
    block = prompt.split("[1] ", 1)[1].split("[2] ", 1)[0]
    assert block.count("\n    - ") == 3


# -- the pipeline with an LLM: happy path ---------------------------------------------------------


def test_happy_path_llm_terms_and_refine_runs_pass_2(server: FakeLLMServer, open_pipeline) -> None:
    server.responder = responder(
        lambda: (
            terms(["kite wind speed", "steady wind"])
            if len(server.requests) == 1
            else terms(["dacron line", "spool"])
        ),
        text("REFINE: dacron line spool"),
    )
    pipe = open_pipeline(server.base_url)
    res = pipe.search(QUERY)
    assert res.mode.terms == "llm" and res.mode.analyser == "llm"
    assert res.search_terms_used == [QUERY, "kite wind speed", "steady wind"]
    assert res.analysis.decision == "REFINE" and res.analysis.refined_query == "dacron line spool"
    assert [p.number for p in res.passes] == [1, 2]
    assert res.passes[1].query == "dacron line spool" and "spool" in res.passes[1].terms
    by_path = {r.document_path: r for r in res.results}
    assert by_path["Gear/spool.md"].pass_ == 2
    assert all(c.pass_ == 2 for c in by_path["Gear/spool.md"].context_shards)
    assert by_path["Knowledge/kites.md"].pass_ == 1
    assert len(by_path) == len(res.results)
    assert res.mode.llm_tokens == 90 and res.analysis.tokens_used == 30
    # The analysis saw pass 1 (the kite notes), not pass 2.
    analysis_req = next(r for r in server.requests if not is_terms(r))
    assert analysis_req["messages"][0]["content"] == ANALYSIS_SYSTEM
    assert "Knowledge/kites.md" in prompt_of(analysis_req) and "Gear/spool.md" not in prompt_of(analysis_req)
    assert analysis_req["temperature"] == 0.0 and "response_format" not in analysis_req
    data = json.loads(json.dumps(res.to_dict()))
    assert data["mode"]["terms"] == "llm" and data["analysis"]["analyser"] == "llm"
    assert [p["number"] for p in data["passes"]] == [1, 2]
    assert {r["pass"] for r in data["results"]} == {1, 2}


def test_happy_path_with_vectors(server: FakeLLMServer, vault: Path, embedder) -> None:
    server.responder = responder(
        lambda: (
            terms(["kite wind speed"]) if len(server.requests) == 1 else terms(["kite line", "dacron spool"])
        ),
        text("REFINE: dacron line spool"),
    )
    settings = llm_settings(server.base_url, **{"index.embeddings": True})
    index = VaultIndex(vault, settings, embedder=embedder)
    index.open()
    index.embed_pending()
    res = make_pipeline(index, settings).search(QUERY)
    index.close()
    assert res.mode.dense is True and res.mode.terms == "llm" and res.mode.analyser == "llm"
    assert [p.number for p in res.passes] == [1, 2]
    first = res.results[0]
    assert (
        first.document_path in ("Knowledge/kites.md", "Journal/beach.md") and first.embedding_rank is not None
    )
    spool = {r.document_path: r for r in res.results}["Gear/spool.md"]
    assert spool.pass_ == 2
    assert spool.relevance < first.relevance, "relevance is judged against the original query"
    assert res.quality.factors["dense"] is True


def test_llm_sufficient_stops_after_pass_1(server: FakeLLMServer, open_pipeline) -> None:
    server.responder = responder(terms(["kite wind"]), text("SUFFICIENT"))
    res = open_pipeline(server.base_url).search(QUERY)
    assert res.analysis.decision == "SUFFICIENT" and res.analysis.analyser == "llm"
    assert [p.number for p in res.passes] == [1]
    assert all(r.pass_ == 1 for r in res.results)


def test_refine_identical_to_the_original_skips_pass_2(server: FakeLLMServer, open_pipeline) -> None:
    server.responder = responder(
        terms(["kite wind"]), text("REFINE: Kite, WIND strong fly should... how the be to")
    )
    res = open_pipeline(server.base_url).search(QUERY)
    assert res.analysis.decision == "REFINE"
    assert "repeats the original" in res.analysis.skipped
    assert [p.number for p in res.passes] == [1]
    assert sum(1 for r in server.requests if is_terms(r)) == 1, "no terms were written for a pass 2"


def test_fifty_terms_keep_the_first_five_with_a_warning(server: FakeLLMServer, open_pipeline) -> None:
    server.responder = responder(terms([f"kite term {i}" for i in range(50)]), text("SUFFICIENT"))
    res = open_pipeline(server.base_url).search(QUERY)
    assert res.mode.terms == "llm"
    assert res.search_terms_used == [QUERY] + [f"kite term {i}" for i in range(5)]
    assert any("50 search terms" in w and "first 5" in w for w in res.warnings)
    assert res.results


# -- the pipeline with an LLM: every fault falls back and says so -----------------------------------

FAULTS = {
    "http 500": (error(500), error(500), "http 500", "http 500"),
    "http 429": (error(429), error(429), "http 429", "http 429"),
    "timeout": (text("late", delay=NEVER), text("late", delay=NEVER), "timeout", "timeout"),
    "non-json body": (
        Reply(200, "not json at all", content_type="text/plain"),
        Reply(200, "<html>"),
        "malformed response",
        "malformed response",
    ),
    "unparsable output": (
        text("Here are some terms: kite, wind"),
        text("Looks fine to me."),
        "unparsable output",
        "unparsable output",
    ),
    "wrong shape": (
        text('{"search_terms": "kite wind"}'),
        text('{"decision": "REFINE"}'),
        "wrong shape",
        "unparsable output",
    ),
    "empty terms": (terms([]), text("REFINE:"), "empty terms", "empty refine query"),
    "blank terms": (terms(["", "   "]), text("REFINE:   "), "empty terms", "empty refine query"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_faults_fall_back_and_the_search_still_answers(
    server: FakeLLMServer, open_pipeline, fault: str
) -> None:
    terms_reply, analysis_reply, terms_reason, analysis_reason = FAULTS[fault]
    server.responder = responder(terms_reply, analysis_reply)
    res = open_pipeline(
        server.base_url, **({"llm.timeout_s": SHORT_TIMEOUT} if fault == "timeout" else {})
    ).search(QUERY)
    _assert_fallback(res, terms_reason, analysis_reason)


def test_a_fallback_is_not_cached(server: FakeLLMServer, open_pipeline) -> None:
    state = {"down": True}
    server.responder = responder(
        lambda: error(503) if state["down"] else terms(["kite wind"]),
        lambda: error(503) if state["down"] else text("SUFFICIENT"),
    )
    pipe = open_pipeline(server.base_url)
    assert pipe.search(QUERY).mode.terms == "llm->keywords"
    state["down"] = False
    again = pipe.search(QUERY)
    assert again.mode.terms == "llm" and again.mode.analyser == "llm" and not again.mode.cached
    assert pipe.search(QUERY).mode.cached is True


def test_connection_refused_falls_back(open_pipeline) -> None:
    res = open_pipeline(closed_port_url()).search(QUERY)
    _assert_fallback(res, "connection failed", "connection failed")


def test_budget_exhausted_falls_back(server: FakeLLMServer, open_pipeline) -> None:
    server.responder = responder(terms(["kite wind"]), text("SUFFICIENT"))
    res = open_pipeline(server.base_url, **{"llm.token_budget": 10}).search(QUERY)
    _assert_fallback(res, "budget exhausted", "budget exhausted")
    assert server.requests == [], "nothing was sent"


def test_budget_spent_by_terms_leaves_the_analysis_to_the_heuristic(
    server: FakeLLMServer, open_pipeline
) -> None:
    server.responder = responder(
        terms(["kite wind"], prompt_tokens=300, completion_tokens=50), text("SUFFICIENT")
    )
    res = open_pipeline(server.base_url, **{"llm.token_budget": 600}).search(QUERY)
    assert res.mode.terms == "llm" and res.search_terms_used[1] == "kite wind"
    assert res.analysis.analyser == "llm->heuristic" and "budget exhausted" in res.analysis.reason
    assert res.mode.llm_tokens == 350
    assert len(server.requests) == 1


def test_no_endpoint_names_the_fallback(vault: Path) -> None:
    settings = Settings().with_overrides({"index.embeddings": False, "rerank.enabled": False})
    index = VaultIndex(vault, settings)
    index.open()
    llm = LLMClient(settings.llm)
    pipe = SearchPipeline(
        index,
        settings,
        term_writer=llm_term_writer(llm, index, settings),
        analyser=llm_analyser(llm, index, settings),
    )
    res = pipe.search(QUERY)
    index.close()
    _assert_fallback(res, "no LLM endpoint configured", "no LLM endpoint configured")


def test_analyser_llm_requested_without_endpoint_is_named(vault: Path) -> None:
    settings = Settings().with_overrides(
        {"index.embeddings": False, "rerank.enabled": False, "experimental.analyser": "llm"}
    )
    index = VaultIndex(vault, settings)
    index.open()
    res = make_pipeline(index, settings).search(QUERY)
    index.close()
    assert res.mode.terms == "keywords"
    assert res.mode.analyser == "llm->heuristic" and "no LLM endpoint" in res.analysis.reason


def _assert_fallback(res, terms_reason: str, analysis_reason: str) -> None:
    searched = [r for r in res.results if r.source == "search"]
    assert searched and searched[0].document_path in ("Knowledge/kites.md", "Journal/beach.md")
    assert res.mode.terms == "llm->keywords"
    assert any(f"LLM search terms unavailable ({terms_reason})" in w for w in res.warnings), res.warnings
    assert res.search_terms_used == [res.query], "the query alone is searched instead"
    assert res.analysis.analyser == "llm->heuristic" and res.mode.analyser == "llm->heuristic"
    assert f"LLM analysis unavailable ({analysis_reason})" in res.analysis.reason
    assert res.quality is not None and res.passes and res.passes[0].number == 1
    data = res.to_dict()
    assert data["mode"]["terms"] == "llm->keywords" and data["analysis"]["analyser"] == "llm->heuristic"


# -- the CLI with an LLM --------------------------------------------------------------------------


def test_cli_search_json_names_the_llm_modes(server: FakeLLMServer, vault: Path) -> None:
    server.responder = responder(terms(["kite wind", "steady wind"]), text("SUFFICIENT"))
    cmd = [
        sys.executable,
        "-m",
        "explorer",
        "search",
        QUERY,
        "--vault",
        str(vault),
        "--json",
        "--no-embeddings",
        "--set",
        f"llm.base_url={server.base_url}",
        "--set",
        "llm.model=fake-model",
        "--set",
        "rerank.enabled=false",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["mode"]["terms"] == "llm" and data["mode"]["analyser"] == "llm"
    assert data["analysis"]["decision"] == "SUFFICIENT"
    assert data["search_terms_used"][1:] == ["kite wind", "steady wind"]
    assert data["quality"]["level"] in ("high", "medium", "low") and data["passes"][0]["number"] == 1
