"""The optional LLM (OpenAI-compatible, per-search token budget): search terms and pass-1 analysis, with named fallbacks."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from explorer.config import LLMSettings, Settings
from explorer.search.core.terms import (
    SearchTerms,
    clamp_terms,
    clean_term,
    offline_terms,
    plausible_term,
)
from explorer.search.core.twopass import PASS1_ENTRIES, Analysis
from explorer.search.prompt import DATA_RULE, quote_note
from explorer.search.schema import SearchResults
from explorer.text.lru import LRUCache
from explorer.vault.windows import snippet

if TYPE_CHECKING:
    from explorer.index.backend import IndexBackend, Snapshot

#: Completion tokens of a call that names none (the search terms).
MAX_TOKENS = 200
#: Sampling temperature of a call that names none (the search terms).
TEMPERATURE = 0.4
#: Completion tokens of the analysis (a verdict and one query).
ANALYSIS_MAX_TOKENS = 100
#: Characters of each passage shown to the analysis.
ANALYSIS_SNIPPET_CHARS = 240
#: Prompt tokens are estimated as characters / this, to check the budget before a call.
CHARS_PER_TOKEN = 4
#: Seconds past `timeout_s` a call may take before it is abandoned (the wall-clock deadline).
DEADLINE_SLACK_S = 0.5
#: A refined query longer than this (characters) is cut.
MAX_REFINED_CHARS = 200


class LLMError(RuntimeError):
    """The LLM could not answer; `reason` is a short phrase for warnings (`http 500`, `timeout`...)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class LLMUnavailable(LLMError):
    """No endpoint is configured."""


class BudgetExhausted(LLMError):
    """The search's token budget does not allow another call."""


class LLMOutputError(LLMError):
    """The LLM answered, but not in the form asked for."""


@dataclass(frozen=True, slots=True)
class LLMReply:
    """What one chat call returned."""

    text: str
    """The assistant message."""
    tokens_used: int
    """Tokens charged for it (0 when it came from the cache)."""
    cached: bool = False
    """True when the reply was served from the in-memory cache."""


class Budget:
    """Tokens one search may spend on the LLM; shared by every call of that search (thread-safe)."""

    def __init__(self, limit: int) -> None:
        self.limit = max(0, int(limit))
        self.used = 0
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        """Tokens left."""
        return max(0, self.limit - self.used)

    def reserve(self, estimate: int) -> None:
        """Raise BudgetExhausted when a call estimated at `estimate` tokens would overspend."""
        with self._lock:
            if self.used + estimate > self.limit:
                raise BudgetExhausted(
                    "budget exhausted",
                    f"{self.used} of {self.limit} tokens spent, the next call needs about {estimate}",
                )

    def charge(self, tokens: int) -> None:
        """Record tokens spent."""
        with self._lock:
            self.used += max(0, int(tokens))


class LLMClient:
    """Chat completions against `settings.base_url` through the `openai` package.

    The `openai` client is built on the first call (its import costs time the offline paths
    should not pay). No retries: every failure surfaces at once as an LLMError, which callers
    turn into their offline fallback. Replies are cached in memory per (model, prompt, options).
    """

    def __init__(self, settings: LLMSettings, cache_size: int = 256) -> None:
        self.settings = settings
        self._client: Any = None
        self._client_lock = threading.Lock()
        self._cache: LRUCache[str, str] = LRUCache(cache_size)
        self.calls = 0
        """HTTP calls made (cache hits excluded)."""

    @property
    def cache_size(self) -> int:
        """Replies kept (least recently used dropped first)."""
        return self._cache.capacity

    @cache_size.setter
    def cache_size(self, size: int) -> None:
        self._cache.capacity = max(0, int(size))

    @property
    def configured(self) -> bool:
        """True when an endpoint and a model are set."""
        return self.settings.configured

    def new_budget(self) -> Budget:
        """A fresh budget for one search (`settings.token_budget`)."""
        return Budget(self.settings.token_budget)

    def _within_deadline(self, client: Any, kwargs: dict[str, Any]) -> Any:
        """`client.chat.completions.create(**kwargs)` cut at `timeout_s` + slack of wall-clock time.

        The HTTP timeout applies to each read, so a server that dribbles its reply a byte at a time
        would hold the search for as long as it likes. The call runs in a daemon thread; at the
        deadline the client (and its connection) is closed, which ends the thread at its next read,
        and the caller gets LLMError("timeout") at once, then its offline fallback.
        """
        box: dict[str, Any] = {}

        def call() -> None:
            try:
                box["resp"] = client.chat.completions.create(**kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                box["exc"] = exc

        worker = threading.Thread(target=call, name="llm-call", daemon=True)
        worker.start()
        worker.join(max(0.0, self.settings.timeout_s) + DEADLINE_SLACK_S)
        if worker.is_alive():
            with self._client_lock:
                if self._client is client:
                    self._client = None
            try:
                client.close()
            except Exception:  # noqa: BLE001 - the connection is being abandoned anyway
                pass
            raise LLMError("timeout", f"no complete answer within {self.settings.timeout_s:g} s")
        if "exc" in box:
            raise box["exc"]
        return box["resp"]

    def _openai(self) -> Any:
        with self._client_lock:
            if self._client is None:
                import openai

                self._client = openai.OpenAI(
                    base_url=self.settings.base_url,
                    api_key=self.settings.api_key or "none",
                    timeout=self.settings.timeout_s,
                    max_retries=0,
                )
            return self._client

    def chat(
        self,
        messages: Sequence[dict[str, str]],
        max_tokens: int | None = None,
        temperature: float | None = None,
        json: bool = False,  # the option's natural name
        budget: Budget | None = None,
    ) -> LLMReply:
        """One chat completion.

        Args:
            messages: OpenAI chat messages (`role`, `content`).
            max_tokens: Completion cap (default MAX_TOKENS).
            temperature: Sampling temperature (default TEMPERATURE).
            json: Ask for a JSON object (`response_format`).
            budget: The search's budget: checked before the call (estimated prompt + max_tokens),
                charged after it with the reported usage.

        Raises:
            LLMUnavailable: no endpoint is configured.
            BudgetExhausted: the budget cannot cover the call.
            LLMError: HTTP error, timeout, refused connection or a malformed response.
        """
        if not self.configured:
            raise LLMUnavailable("no LLM endpoint configured")
        max_tokens = MAX_TOKENS if max_tokens is None else max_tokens
        temperature = TEMPERATURE if temperature is None else temperature
        key = _cache_key(self.settings.model, messages, max_tokens, temperature, json)
        hit = self._cache.get(key)
        if hit is not None:
            return LLMReply(hit, 0, cached=True)
        estimate = sum(len(m.get("content", "")) for m in messages) // CHARS_PER_TOKEN + max_tokens
        if budget is not None:
            budget.reserve(estimate)
        text, tokens = self._call(messages, max_tokens, temperature, json)
        tokens = tokens or estimate
        if budget is not None:
            budget.charge(tokens)
        self._cache.put(key, text)
        return LLMReply(text, tokens)

    def _call(
        self, messages: Sequence[dict[str, str]], max_tokens: int, temperature: float, as_json: bool
    ) -> tuple[str, int]:
        import openai

        client = self._openai()
        kwargs: dict[str, Any] = {
            "model": self.settings.model,
            "messages": list(messages),
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        if as_json:
            kwargs["response_format"] = {"type": "json_object"}
        self.calls += 1
        try:
            resp = self._within_deadline(client, kwargs)
        except openai.APITimeoutError as exc:
            raise LLMError("timeout", f"no answer within {self.settings.timeout_s:g} s") from exc
        except openai.APIConnectionError as exc:
            raise LLMError("connection failed", _cause(exc)) from exc
        except openai.APIStatusError as exc:
            raise LLMError(f"http {exc.status_code}", _short(str(exc))) from exc
        except openai.APIResponseValidationError as exc:
            raise LLMError("malformed response", _short(str(exc))) from exc
        except (openai.OpenAIError, ValueError) as exc:
            raise LLMError("malformed response", _short(str(exc))) from exc
        if isinstance(resp, (str, bytes)) or not getattr(resp, "choices", None):
            raise LLMError("malformed response", "no choices in the reply")
        message = getattr(resp.choices[0], "message", None)
        content = getattr(message, "content", None)
        if not isinstance(content, str):
            raise LLMError("malformed response", "the reply has no message text")
        usage = getattr(resp, "usage", None)
        tokens = int(getattr(usage, "total_tokens", 0) or 0) if usage is not None else 0
        return content, tokens


# -- search terms ------------------------------------------------------------------------------

TERMS_SYSTEM = """You write search terms for a personal Markdown notes vault (notes, knowledge, beliefs, \
preferences, past conversation turns). The vault is searched with keyword (BM25) and semantic search.
Given a query, write 3 to 5 short search phrases, each a distinct angle on it, using the words that \
would appear in the notes that answer it (like typing into a search box).
Also decide:
- include_preferences: true if the user's preferences could matter (shopping, recommendations, plans), \
false for general knowledge.
- include_n_minus_1: true if the query is a follow-up or could refer to the recent conversation, \
false for a new, self-contained topic.
Answer with one JSON object and nothing else:
{"search_terms": ["...", "..."], "include_preferences": false, "include_n_minus_1": false}"""


class LLMTermWriter:
    """Writes search terms with the LLM; any failure gives keyword terms and a warning naming why."""

    name = "llm"

    def __init__(self, llm: LLMClient, index: IndexBackend | None, settings: Settings) -> None:
        self.llm = llm
        self.index = index
        self.settings = settings

    def __call__(
        self, query: str, budget: Budget | None = None, snapshot: Snapshot | None = None
    ) -> SearchTerms:
        """Search terms for `query` (source `llm`, or `llm->keywords` after a fallback)."""
        messages = [
            {"role": "system", "content": TERMS_SYSTEM},
            {"role": "user", "content": f"Query: {query.strip()}"},
        ]
        tokens = 0
        try:
            reply = self.llm.chat(
                messages,
                max_tokens=MAX_TOKENS,
                temperature=TEMPERATURE,
                json=True,
                budget=budget,
            )
            tokens = reply.tokens_used
            terms, prefs, n1 = parse_terms_reply(reply.text)
        except LLMError as exc:
            return self._fallback(query, exc, tokens, snapshot)
        kept, warnings = clamp_terms(terms)
        if not kept:
            return self._fallback(
                query, LLMOutputError("empty terms", "no usable search term"), tokens, snapshot
            )
        kept = kept[: self.settings.search.max_terms]
        if prefs is None or n1 is None:  # a flag left out: the offline cue words decide it
            offline = offline_terms(query)
            prefs = offline.include_preferences if prefs is None else prefs
            n1 = offline.include_n_minus_1 if n1 is None else n1
        return SearchTerms(
            query=query.strip(),
            terms=tuple(kept),
            source="llm",
            include_preferences=prefs,
            include_n_minus_1=n1,
            warnings=tuple(f"LLM: {w}" for w in warnings),
            tokens_used=tokens,
        )

    def _fallback(
        self, query: str, exc: LLMError, tokens: int, snapshot: Snapshot | None = None
    ) -> SearchTerms:
        base = offline_terms(query)
        return replace(
            base,
            source="llm->keywords",
            warnings=(*base.warnings, f"LLM search terms unavailable ({exc.reason}); keyword terms used"),
            tokens_used=tokens,
        )


def llm_term_writer(llm: LLMClient, index: IndexBackend | None, settings: Settings) -> LLMTermWriter:
    """A term writer for SearchPipeline backed by `llm` (falls back to keyword terms)."""
    return LLMTermWriter(llm, index, settings)


def parse_terms_reply(text: str) -> tuple[list[str], bool | None, bool | None]:
    """(search terms, include_preferences, include_n_minus_1) from an LLM reply.

    Accepts a bare JSON object, one inside a code fence, or one amid prose. A missing flag is
    None. Raises LLMOutputError `unparsable output` when no JSON object is found, `wrong shape`
    when it lacks a list of strings under `search_terms`. The terms are filtered afterwards
    (`clamp_terms`: length, count, control characters, plausible words).
    Only these three fields are read; anything else in the object is ignored.
    """
    obj = extract_json_object(text)
    if obj is None:
        raise LLMOutputError("unparsable output", _short(text))
    raw = obj.get("search_terms", obj.get("terms"))
    if not isinstance(raw, list) or not all(isinstance(t, str) for t in raw):
        raise LLMOutputError("wrong shape", "expected search_terms: a list of strings")
    return raw, _flag(obj.get("include_preferences")), _flag(obj.get("include_n_minus_1"))


_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


def extract_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in `text` (fenced or bare, prose around it ignored), else None."""
    if not isinstance(text, str):
        return None
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for chunk in candidates:
        start = chunk.find("{")
        while start != -1:
            try:
                obj, _end = decoder.raw_decode(chunk, start)
            except ValueError:
                start = chunk.find("{", start + 1)
                continue
            if isinstance(obj, dict):
                return obj
            start = chunk.find("{", start + 1)
    return None


def _flag(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no"):
        return value.strip().lower() in ("true", "yes")
    return None


# -- analysis between the passes -------------------------------------------------------------

ANALYSIS_SYSTEM = (
    """You check search results from a personal Markdown notes vault before anyone \
answers from them. Decide whether the results below hold what is needed to answer the query.
If they do, or if the vault plainly does not hold more on it, answer exactly:
SUFFICIENT
If important information seems missing and a different search could find it, answer exactly:
REFINE: <one new search query>
Answer with that single line only.
"""
    + DATA_RULE
)


class LLMAnalyser:
    """Judges pass 1 with the LLM; any failure gives the heuristic analysis with the reason named."""

    name = "llm"

    def __init__(self, llm: LLMClient, index: IndexBackend, settings: Settings) -> None:
        self.llm = llm
        self.index = index
        self.settings = settings

    def __call__(
        self,
        query: str,
        results: SearchResults,
        budget: Budget | None = None,
        snapshot: Snapshot | None = None,
    ) -> Analysis:
        """`SUFFICIENT` or `REFINE: <query>` for the pass-1 results of `query`."""
        prompt = analysis_prompt(query, results, PASS1_ENTRIES, self.settings.experimental.pass1_shards)
        messages = [{"role": "system", "content": ANALYSIS_SYSTEM}, {"role": "user", "content": prompt}]
        tokens = 0
        try:
            reply = self.llm.chat(messages, max_tokens=ANALYSIS_MAX_TOKENS, temperature=0.0, budget=budget)
            tokens = reply.tokens_used
            decision, refined = parse_analysis_reply(reply.text)
        except LLMError as exc:
            from explorer.search.core.twopass import heuristic_analysis

            if snapshot is not None:
                fallback = heuristic_analysis(query, results, snapshot)
            else:
                with self.index.snapshot() as snap:
                    fallback = heuristic_analysis(query, results, snap)
            return replace(
                fallback,
                analyser="llm->heuristic",
                reason=f"LLM analysis unavailable ({exc.reason}); {fallback.reason}",
                tokens_used=tokens,
            )
        if decision == "SUFFICIENT":
            return Analysis(
                "SUFFICIENT",
                reason="the LLM judged the results sufficient",
                analyser="llm",
                tokens_used=tokens,
            )
        return Analysis(
            "REFINE",
            refined_query=refined,
            reason="the LLM asked for a refined search",
            analyser="llm",
            tokens_used=tokens,
        )


def llm_analyser(llm: LLMClient, index: IndexBackend, settings: Settings) -> LLMAnalyser:
    """An analyser for SearchPipeline backed by `llm` (falls back to the heuristic analysis)."""
    return LLMAnalyser(llm, index, settings)


def analysis_prompt(query: str, results: SearchResults, entries: int, shards: int) -> str:
    """The user message of the analysis: the query and the top `entries` results, `shards` passages each."""
    lines = [f"Query: {query.strip()}", "", "Search results:"]
    searched = [r for r in results.results if r.source == "search"][:entries]
    if not searched:
        lines.append("(none)")
    for i, r in enumerate(searched, 1):
        passages = []
        for c in r.context_shards[:shards]:
            passages.append(
                "    - "
                + (snippet(c.text, c.highlights, c.start, width=ANALYSIS_SNIPPET_CHARS) if c.text else "")
            )
        lines.append(
            f"[{i}] " + quote_note(f"{r.title} ({r.document_path}, {r.source_type})\n" + "\n".join(passages))
        )
    return "\n".join(lines)


_VERDICT = re.compile(r"^[\s>*_`\"'#-]*(SUFFICIENT|REFINE)\b[\s*_`\"']*[:\-]?\s*(.*)$", re.IGNORECASE)


def parse_analysis_reply(text: str) -> tuple[str, str]:
    """(`SUFFICIENT`, "") or (`REFINE`, query) from the reply's first verdict line.

    Markdown decoration and quotes around the verdict and the query are tolerated. Raises
    LLMOutputError `unparsable output` without a verdict line, `empty refine query` for a
    REFINE without a query.
    """
    for line in (text or "").splitlines():
        m = _VERDICT.match(line.strip())
        if not m:
            continue
        verdict = m.group(1).upper()
        if verdict == "SUFFICIENT":
            return "SUFFICIENT", ""
        refined = clean_refined_query(m.group(2))
        if not refined:
            raise LLMOutputError("empty refine query", "REFINE without a usable query")
        return "REFINE", refined
    raise LLMOutputError("unparsable output", _short(text or ""))


def clean_refined_query(raw: str) -> str:
    """A REFINE query as words to search: decoration and control characters gone, at most
    MAX_REFINED_CHARS, '' when nothing plausible is left."""
    refined = clean_term(raw).strip("*_`\"' ").strip()
    if len(refined) > MAX_REFINED_CHARS:
        refined = refined[:MAX_REFINED_CHARS].rsplit(" ", 1)[0]
    return refined if plausible_term(refined, max_words=40) else ""


# -- helpers -----------------------------------------------------------------------------------


def _cache_key(
    model: str, messages: Sequence[dict[str, str]], max_tokens: int, temperature: float, as_json: bool
) -> str:
    return json.dumps(
        [model, list(messages), max_tokens, temperature, as_json], sort_keys=True, ensure_ascii=False
    )


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _cause(exc: BaseException) -> str:
    inner = exc.__cause__ or exc.__context__
    return _short(str(inner) if inner else str(exc))
