"""Search terms: the query itself, plus up to 5 terms when an LLM writes them."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from explorer.index.backend import Snapshot

MAX_TERMS = 5
TRUNCATE_ABOVE = 10
#: A search term longer than this (characters) is no search term: dropped.
MAX_TERM_CHARS = 100
#: Nor is one of more words than this.
MAX_TERM_WORDS = 10
#: Nor one with a "word" longer than this.
MAX_WORD_CHARS = 40

# Terminal escape sequences (CSI, OSC, C1 CSI, two-character ESC): removed whole from written terms.
_ESCAPE_SEQ = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]|(?:\x1b\]|\x9d)[^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b."
)
# Control, zero-width and bidi characters: removed from written terms.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\u2028\u2029\ufeff]")

_WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")
# Real references to the conversation, not pronouns: "her", "that" or "it" name things in the
# query itself far more often than the previous turn.
_FOLLOW_UP = re.compile(
    r"\b(last time|last turn|last message|earlier|previous(?:ly)?|before that|again|as (?:i|you) said|"
    r"you (?:said|mentioned|told me|suggested|recommended)|i (?:said|mentioned|told you|asked)|"
    r"we (?:discussed|talked about|said)|remind me|what about|how about|and then)\b",
    re.IGNORECASE,
)
_PREFERENCE = re.compile(
    r"\b(recommend\w*|suggest\w*|buy|buying|purchase|shop\w*|sale|price\w*|budget|best|prefer\w*|"
    r"favou?rite\w*|should i|which one|choose|gift|plan\w*|book(?:ing)?|order|diet|menu|trip)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class SearchTerms:
    """What a query is searched with."""

    query: str
    """The query itself (always searched, weighted highest)."""
    terms: tuple[str, ...]
    """Additional search terms (0-5)."""
    source: str
    """`keywords` (offline extraction), `llm`, or `llm->keywords` (the LLM failed; keywords used)."""
    include_preferences: bool = False
    """Append the user's preferences."""
    include_n_minus_1: bool = False
    """Append the most recent turn."""
    warnings: tuple[str, ...] = field(default=())
    """E.g. a truncated term list or an LLM fallback."""
    tokens_used: int = 0
    """LLM tokens spent writing them."""

    @property
    def all_terms(self) -> list[str]:
        """The query first, then the unique other terms."""
        out = [self.query]
        for t in self.terms:
            if t.strip() and t.strip().lower() != self.query.strip().lower() and t not in out:
                out.append(t)
        return out


class TermWriter(Protocol):
    """Writes search terms for a query."""

    def __call__(self, query: str) -> SearchTerms: ...


def offline_terms(query: str) -> SearchTerms:
    """Offline terms: the query alone, with the flags its cue words raise (follow-up phrases; shopping, plans).

    Without an LLM no terms are written besides the query: keyword-extracted ones lowered the
    benchmarks (BENCHMARKS.md#retrieval-quality-scifact).
    """
    return SearchTerms(
        query=query.strip(),
        terms=(),
        source="keywords",
        include_preferences=bool(_PREFERENCE.search(query)),
        include_n_minus_1=bool(_FOLLOW_UP.search(query)),
    )


def clean_term(raw: str) -> str:
    """A written term with escape sequences, control, zero-width and bidi characters removed and white space collapsed."""
    return " ".join(_CONTROL.sub(" ", _ESCAPE_SEQ.sub(" ", raw)).split())


def plausible_term(term: str, max_words: int = MAX_TERM_WORDS) -> bool:
    """True for something a person would type into a search box: a few words, mostly letters or digits."""
    words = term.split()
    if not words or len(words) > max_words or any(len(w) > MAX_WORD_CHARS for w in words):
        return False
    chars = "".join(words)
    alnum = sum(ch.isalnum() for ch in chars)
    return alnum > 0 and alnum >= 0.6 * len(chars)


def clamp_terms(terms: list[str]) -> tuple[list[str], list[str]]:
    """Clean a term list from any writer (an LLM's above all).

    Control characters are removed; empties, duplicates and implausible terms (over
    MAX_TERM_CHARS characters or MAX_TERM_WORDS words, a word over MAX_WORD_CHARS, mostly
    symbols) are dropped with a warning; more than 10 -> first 5, warned.
    """
    warnings: list[str] = []
    written = [clean_term(t) for t in terms if isinstance(t, str)]
    kept = [t for t in written if t and len(t) <= MAX_TERM_CHARS and plausible_term(t)]
    dropped = sum(1 for t in written if t) - len(kept)
    if dropped:
        warnings.append(
            f"{dropped} implausible search term{'s' if dropped != 1 else ''} dropped "
            f"(over {MAX_TERM_CHARS} characters or {MAX_TERM_WORDS} words, or not words)"
        )
    cleaned = list(dict.fromkeys(kept))
    if len(cleaned) > TRUNCATE_ABOVE:
        warnings.append(f"{len(cleaned)} search terms written; kept the first {MAX_TERMS}")
        cleaned = cleaned[:MAX_TERMS]
    elif len(cleaned) > MAX_TERMS:
        cleaned = cleaned[:MAX_TERMS]
    return cleaned, warnings


def write_terms(
    text: str,
    writer: Callable[..., SearchTerms] | None,
    max_terms: int,
    budget: Any = None,
    snapshot: Snapshot | None = None,
) -> SearchTerms:
    """The terms stage: `writer` (an LLM) when given, the query alone otherwise or when it fails.

    The terms are then cleaned and cut to `max_terms`; every warning is kept on the result.
    """
    if writer is not None:
        try:
            terms = call_with_budget(writer, budget, text, snapshot=snapshot)
        except Exception as exc:  # noqa: BLE001 - any writer failure falls back to keywords
            terms = replace(
                offline_terms(text),
                warnings=(f"term writer failed ({exc}); keyword terms used",),
            )
    else:
        terms = offline_terms(text)
    cleaned, warns = clamp_terms(list(terms.terms))
    return replace(terms, terms=tuple(cleaned[:max_terms]), warnings=tuple(terms.warnings) + tuple(warns))


def call_with_budget(fn: Callable[..., Any], budget: Any, *args: Any, **extra: Any) -> Any:
    """Call a term writer or analyser, handing it the search's token budget (and each of `extra`,
    such as the `snapshot` the search reads) when it takes one."""
    params: Mapping[str, inspect.Parameter]
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {
        k: v for k, v in (("budget", budget), *extra.items()) if v is not None and (k in params or takes_any)
    }
    return fn(*args, **kwargs)
