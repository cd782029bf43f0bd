"""The LLM rerank backend: the configured LLM orders the candidates in one call."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from explorer.search.prompt import DATA_RULE, quote_note
from explorer.search.rerank.base import Cancelled, RerankBackendError, passage, short
from explorer.search.schema import SearchResult

#: Candidates the LLM backend sees at most (each costs prompt tokens).
LLM_CANDIDATES = 20
#: Characters of each candidate shown to the LLM.
LLM_SNIPPET_CHARS = 200
#: Completion tokens of an LLM ranking (a list of indices).
LLM_MAX_TOKENS = 120


def parse_index_list(text: str, count: int) -> list[int]:
    """Indices in `[0, count)` from a reply such as `3, 1, 0, 2`, first occurrence kept, in order.

    Brackets and words around the numbers are tolerated (`[3], [1]`, `Ranking: 3,1`).
    """
    out: list[int] = []
    seen: set[int] = set()
    for m in re.finditer(r"(?<!\d)\d{1,6}(?!\d)", text or ""):  # a 5,000-digit "index" is no index
        n = int(m.group())
        if 0 <= n < count and n not in seen:
            seen.add(n)
            out.append(n)
    return out


LLM_SYSTEM = (
    "You rank search results from a personal Markdown notes vault by how well they answer a query. "
    "Answer with the result numbers only, most relevant first, separated by commas (for example: 3,1,0,2). "
    "No other text. " + DATA_RULE
)


def llm_prompt(query: str, candidates: Sequence[SearchResult], chars: int = LLM_SNIPPET_CHARS) -> str:
    """The user message of an LLM ranking: the query and the numbered candidates."""
    lines = [f'Query: "{query.strip()}"', "", "Results:"]
    for i, r in enumerate(candidates):
        text = " ".join((r.snippet or passage(r, chars)).split())[:chars]
        lines.append(f"[{i}] " + quote_note(f"{r.title} ({r.document_path}): {text}"))
    lines += ["", 'Output (comma-separated result numbers, e.g. "3,1,0,2"):']
    return "\n".join(lines)


class LLMBackend:
    """Asks the configured LLM to order the candidates (one call per search).

    The reply is read as a list of indices; indices it leaves out follow in their incoming order.
    Position p of n scores `(n - p) / n`, already on the 0-1 scale. An LLM error or a reply
    without one usable index raises, so the reranker keeps the incoming order and says why.
    """

    name = "llm"
    refines = False

    def __init__(self, llm: Any, max_tokens: int = LLM_MAX_TOKENS) -> None:
        self.llm = llm
        self.max_tokens = max_tokens
        self.tokens_used = 0
        """Tokens spent over this backend's life (the metadata reports each search's share)."""

    def prepare(self) -> None:
        """Nothing to load."""

    def affordable(
        self, query: str, candidates: Sequence[SearchResult], budget_ms: float, *, precise: bool
    ) -> int:
        """All of them: one call, bounded by the LLM client's own timeout."""
        return len(candidates)

    def normalize(self, scores: Sequence[float]) -> list[float]:
        """Already 0-1."""
        return list(scores)

    def score(
        self,
        query: str,
        candidates: Sequence[SearchResult],
        *,
        precise: bool = True,
        cancelled: Cancelled | None = None,
    ) -> list[float]:
        """Rank-derived scores from the LLM's ordering."""
        n = len(candidates)
        if n == 0:
            return []
        messages = [
            {"role": "system", "content": LLM_SYSTEM},
            {"role": "user", "content": llm_prompt(query, candidates)},
        ]
        reply = self.llm.chat(messages, max_tokens=self.max_tokens, temperature=0.0)
        self.tokens_used += int(getattr(reply, "tokens_used", 0) or 0)
        text = getattr(reply, "text", "") or ""
        order = parse_index_list(text, n)
        if not order:
            raise RerankBackendError(f"unparsable ranking {short(text)!r}")
        listed = set(order)
        full = order + [i for i in range(n) if i not in listed]
        scores = [0.0] * n
        for pos, i in enumerate(full):
            scores[i] = (n - pos) / n
        return scores
