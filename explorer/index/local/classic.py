"""Classic cursor search tools over raw note text: TF-IDF, boolean AND, fuzzy OR and exact phrase.

The tools run on the positional index of explorer/index/local/positions.py; what they return
(`ClassicResult`, `ClassicHit`) and their defaults are part of the backend interface
(explorer/index/backend.py), which is how explorer/search reaches them.
"""

from __future__ import annotations

import math
import re
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from explorer.index.backend import (
    DEFAULTS,
    MAX_RESULTS,
    MODES,
    ClassicHit,
    ClassicQueryError,
    ClassicResult,
)
from explorer.index.local.positions import NotePositions, NoteSource, PositionalIndex, plain_word
from explorer.text.tokenize import fold_word, is_stopword, tokenize_spans
from explorer.vault.model import Highlight, Shard, display_title
from explorer.vault.windows import MAX_CONTEXT_CHARS, get_context_at_cursor

__all__ = [
    "DEFAULTS",
    "DEFAULT_AND_WINDOW",
    "MAX_KEYWORDS",
    "MAX_RESULTS",
    "MAX_SNIPPET_CHARS",
    "MAX_WINDOW",
    "MODES",
    "ClassicHit",
    "ClassicIndex",
    "ClassicQueryError",
    "ClassicResult",
    "run_mode",
]

#: Default proximity window of boolean AND, in words.
DEFAULT_AND_WINDOW = 50
#: The most keywords one call uses.
MAX_KEYWORDS = 32
#: The largest `context_chars` of one hit's snippet (half each side of the cursor).
MAX_SNIPPET_CHARS = 2 * MAX_CONTEXT_CHARS
#: The largest proximity window, in words.
MAX_WINDOW = 5000

ShardLookup = Callable[[str, int], "Shard | None"]


@dataclass(frozen=True, slots=True)
class _Keyword:
    """A keyword as given and the folded terms it tokenizes to."""

    text: str
    terms: tuple[str, ...]
    raw: tuple[str, ...]
    """Each term's surface word, lower-cased and accent-stripped but not stemmed (for fuzzy)."""


# One occurrence of a search unit in a note, as a plain tuple (there can be many per query):
# (first word position, unit index, word position past the unit, weight, term id).
_Occ = tuple[int, int, int, float, int]


@dataclass(slots=True)
class _Candidate:
    """A scored match location before it becomes a hit."""

    score: float
    path: str
    cursor: int
    match_end: int
    keywords: tuple[str, ...]
    terms: set[str]


class ClassicIndex(PositionalIndex):
    """The four classic tools over a positional index (see `PositionalIndex` for how it is kept)."""

    def __init__(
        self,
        shard_at: ShardLookup | None = None,
        lock: threading.RLock | None = None,
        source: NoteSource | None = None,
    ) -> None:
        """Create an empty index.

        Args:
            shard_at: Finds the shard of a (path, cursor), for each hit's node_id.
            lock: The lock that guards the notes (share the VaultIndex's so a search sees one batch).
            source: Returns (version, notes) of the owning index; searches sync to it first.
        """
        super().__init__(lock, source)
        self._shard_at = shard_at

    # -- the four tools --------------------------------------------------------------------
    def search_context(
        self,
        keywords: Sequence[str] | str,
        max_results: int = 15,
        context_chars: int = 300,
        window: int | None = None,
    ) -> ClassicResult:
        """TF-IDF ranking of match locations; when nothing matches, boolean AND, then fuzzy.

        A keyword of several words ("Great Wall") counts as one unit that matches where its words
        stand next to each other. Occurrences closer than the window (in words; by default about
        a snippet's width) form one location, scored sum over units of idf * (1 + ln tf), idf =
        ln(1 + N / df) with df counted for the unit itself. The AND fallback then accepts a
        multi-word keyword's words in any order within `window` words (default 50); fuzzy last.
        """
        return self.run("tfidf", keywords, max_results, context_chars, window)

    def search_exact_phrase(
        self,
        keywords: Sequence[str] | str,
        max_results: int = 10,
        context_chars: int = 4000,
        window: int | None = None,
    ) -> ClassicResult:
        """The keywords joined as one phrase, matched case-insensitively; any whitespace matches any.

        Falls back to proximity when the phrase occurs nowhere: the phrase's words (folded, so
        inflections match) within `window` words (default max(8, 3 * words)), scored words /
        words spanned, times 0.8 when they stand out of phrase order.
        """
        return self.run("phrase", keywords, max_results, context_chars, window)

    def search_boolean_and(
        self,
        keywords: Sequence[str] | str,
        max_results: int = 15,
        context_chars: int = 3000,
        window: int = DEFAULT_AND_WINDOW,
    ) -> ClassicResult:
        """Locations where every keyword word occurs within `window` words.

        Score = proximity * (0.5 + 0.5 * completeness): proximity = words needed / words spanned
        (1.0 when they stand side by side), completeness = share of keywords found intact (a
        multi-word keyword's words adjacent and in order).
        """
        return self.run("and", keywords, max_results, context_chars, window)

    def search_fuzzy(
        self,
        keywords: Sequence[str] | str,
        max_results: int = 15,
        context_chars: int = 300,
        window: int | None = None,
    ) -> ClassicResult:
        """Partial OR matching that tolerates typos and inflections.

        Each keyword word matches the vault's words as written (lower-cased, accents stripped,
        not stemmed) with a similarity: the same word or an inflection (same folded term) 1.0;
        within edit distance 1 (4+ letters) or 2 (8+ letters) while sharing the first
        or last letter, 1 - d / length (adjacent swaps count 1), looked for only when the word
        itself is not in the vault; containing it (3+ letters) 0.9 * length ratio; contained in
        it (at least half of it) 0.8 * ratio. Matches below 60% of the word's best similarity
        (or 0.35) are dropped. Location score = sum over keyword
        words of (best similarity² * idf among their matches there) * (1 + ln matches there).
        """
        return self.run("fuzzy", keywords, max_results, context_chars, window)

    # -- driver ----------------------------------------------------------------------------
    def run(
        self,
        mode: str,
        keywords: Sequence[str] | str,
        max_results: int | None = None,
        context_chars: int | None = None,
        window: int | None = None,
    ) -> ClassicResult:
        """Run one tool by name; None for a parameter means the tool's default.

        Raises:
            ClassicQueryError: unknown mode, no usable keyword, or a parameter out of range.
        """
        if mode not in MODES:
            raise ClassicQueryError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
        d_results, d_chars = DEFAULTS[mode]
        warnings: list[str] = []
        max_results = d_results if max_results is None else max_results
        context_chars = d_chars if context_chars is None else context_chars
        _check_int("max_results", max_results, 1)
        _check_int("context_chars", context_chars, 0)
        if window is not None:
            _check_int("window", window, 1)
            if window > MAX_WINDOW:
                warnings.append(f"window capped at {MAX_WINDOW} words")
                window = MAX_WINDOW
        if max_results > MAX_RESULTS:
            warnings.append(f"max_results capped at {MAX_RESULTS}")
            max_results = MAX_RESULTS
        if context_chars > MAX_SNIPPET_CHARS:
            warnings.append(f"context_chars capped at {MAX_SNIPPET_CHARS}")
            context_chars = MAX_SNIPPET_CHARS
        kws = _parse_keywords(keywords, warnings)
        with self.lock:
            self.update()
            tried: list[str] = []
            expansions: tuple[tuple[str, tuple[str, ...]], ...] = ()
            if mode == "tfidf":
                stages = [
                    (
                        "tfidf",
                        lambda: self._tfidf(
                            _content(kws, warnings, "tfidf"), _cluster(window, context_chars)
                        ),
                    ),
                    ("and", lambda: self._and(kws, window or DEFAULT_AND_WINDOW, ordered=False)),
                    (
                        "fuzzy",
                        lambda: self._fuzzy(_content(kws, [], "fuzzy"), _cluster(window, context_chars)),
                    ),
                ]
            elif mode == "phrase":
                words = sum(len(k.terms) for k in kws)
                stages = [
                    ("phrase", lambda: self._phrase(kws, context_chars)),
                    ("proximity", lambda: self._and(kws, window or max(8, 3 * words), ordered=True)),
                ]
            elif mode == "and":
                stages = [("and", lambda: self._and(kws, window or DEFAULT_AND_WINDOW, ordered=False))]
            else:
                stages = [
                    (
                        "fuzzy",
                        lambda: self._fuzzy(
                            _content(kws, warnings, "fuzzy"), _cluster(window, context_chars)
                        ),
                    )
                ]
            stage, found = "none", list[_Candidate]()
            for name, run in stages:
                tried.append(name)
                got: Any = run()
                if isinstance(got, tuple):
                    got, expansions = got
                if got:
                    stage, found = name, got
                    break
            if len(tried) > 1:
                for prev in tried[:-1] if stage != "none" else tried:
                    warnings.append(f"{prev}: no match")
                if stage != "none":
                    warnings.append(f"answered by the {stage} stage")
            found.sort(key=lambda c: (-c.score, c.path, c.cursor))
            hits = tuple(self._hit(c, kws, context_chars, stage) for c in found[:max_results])
            return ClassicResult(
                mode=mode,
                stage=stage,
                keywords=tuple(k.text for k in kws),
                hits=hits,
                total=len(found),
                stages_tried=tuple(tried),
                warnings=tuple(dict.fromkeys(warnings)),
                expansions=expansions if stage == "fuzzy" else (),
                index_version=self.version,
            )

    # -- stages ----------------------------------------------------------------------------
    def _tfidf(self, kws: list[_Keyword], width: int) -> list[_Candidate]:
        per_doc: dict[str, list[_Occ]] = {}
        df = [0] * len(kws)
        units = [self._tids(kw.terms) for kw in kws]
        for doc in self._candidate_docs((u[0] for u in units), require_all=False):
            occs: list[_Occ] = []
            for u, kw in enumerate(kws):
                positions = self._unit_occurrences(doc, units[u])
                if positions:
                    df[u] += 1
                    size = len(kw.terms)
                    occs.extend((p, u, p + size, 1.0, -1) for p in positions)
            if occs:
                per_doc[doc.note.path] = occs
        idf = [self.idf(n) for n in df]
        out: list[_Candidate] = []
        for path, occs in per_doc.items():
            doc = self._docs[path]
            for group in _clusters(occs, width):
                tf: dict[int, int] = {}
                for o in group:
                    tf[o[1]] = tf.get(o[1], 0) + 1
                score = sum(idf[u] * (1.0 + math.log(c)) for u, c in tf.items())
                matched = [kws[u].text for u in sorted(tf)]
                out.append(
                    self._candidate(doc, group[0], score, matched, {t for u in tf for t in kws[u].terms})
                )
        return out

    def _and(self, kws: list[_Keyword], window: int, ordered: bool) -> list[_Candidate]:
        words = list(dict.fromkeys(t for k in kws for t in k.terms))
        required = list(self._tids(words))
        order = {t: i for i, t in enumerate(required)}
        k = len(required)
        out: list[_Candidate] = []
        for doc in self._candidate_docs(required, require_all=True):
            occs = sorted((p, order[t]) for t in required for p in doc.positions(t))
            windows: list[tuple[float, int, int]] = []
            counts = [0] * k
            have = 0
            left = 0
            for p_r, t_r in occs:
                if counts[t_r] == 0:
                    have += 1
                counts[t_r] += 1
                while have == k and counts[occs[left][1]] > 1:
                    counts[occs[left][1]] -= 1
                    left += 1
                if have == k:
                    first = occs[left][0]
                    span = p_r - first + 1
                    if span <= window:
                        windows.append(
                            (self._and_score(doc, kws, first, p_r, k, ordered, required), first, p_r)
                        )
            # Best windows first, each kept only when it shares no word with one already kept.
            starts: list[int] = []
            ends: list[int] = []
            chosen: list[tuple[float, int, int]] = []
            for w in sorted(windows, key=lambda w: (-w[0], w[1])):
                i = bisect_left(starts, w[1])
                if (i > 0 and ends[i - 1] >= w[1]) or (i < len(starts) and starts[i] <= w[2]):
                    continue
                starts.insert(i, w[1])
                ends.insert(i, w[2])
                chosen.append(w)
            for score, first, _last in chosen:
                occ = (first, 0, first + 1, 1.0, -1)
                out.append(self._candidate(doc, occ, score, [kw.text for kw in kws], set(words)))
        return out

    def _and_score(
        self,
        doc: NotePositions,
        kws: list[_Keyword],
        first: int,
        last: int,
        k: int,
        ordered: bool,
        required: list[int],
    ) -> float:
        proximity = min(1.0, k / (last - first + 1))
        if not ordered:
            intact = sum(
                1
                for kw in kws
                if len(kw.terms) == 1
                or any(
                    tuple(doc.ids[p : p + len(kw.terms)]) == self._tids(kw.terms)
                    for p in range(first, last - len(kw.terms) + 2)
                )
            )
            return proximity * (0.5 + 0.5 * intact / len(kws))
        seen: list[int] = []
        for p in range(first, last + 1):
            idx = required.index(doc.ids[p]) if doc.ids[p] in required else -1
            if idx >= 0 and idx not in seen:
                seen.append(idx)
        return proximity * (0.8 if seen != sorted(seen) else 1.0)

    def _phrase(self, kws: list[_Keyword], context_chars: int) -> list[_Candidate]:
        rx = _phrase_regex(kws)
        terms = {t for k in kws for t in k.terms}
        found: dict[str, list[re.Match[str]]] = {}
        for doc in self._candidate_docs(self._tids(terms), require_all=True):
            matches = list(rx.finditer(doc.note.text))
            if matches:
                found[doc.note.path] = matches
        idf = self.idf(len(found))
        reach = max(1, context_chars // 2)
        out: list[_Candidate] = []
        for path, matches in found.items():
            doc = self._docs[path]
            score = idf * (1.0 + math.log(len(matches)))
            last_kept = -reach - 1
            for m in matches:
                if m.start() - last_kept < reach:
                    continue
                last_kept = m.start()
                out.append(
                    _Candidate(score, path, m.start(), m.end(), tuple(kw.text for kw in kws), set(terms))
                )
        return out

    def _fuzzy(
        self, kws: list[_Keyword], width: int
    ) -> tuple[list[_Candidate], tuple[tuple[str, tuple[str, ...]], ...]]:
        self._build_vocab()
        words: list[tuple[str, str, int]] = []  # (folded, as typed, keyword index)
        for ki, kw in enumerate(kws):
            for term, raw in zip(kw.terms, kw.raw):
                if not any(w[0] == term for w in words):
                    words.append((term, raw, ki))
        expansions: list[tuple[str, tuple[str, ...]]] = []
        term_to: dict[int, list[tuple[int, float]]] = {}
        for wi, (term, raw, _) in enumerate(words):
            found = self._expand(term, raw)
            expansions.append((raw or term, tuple(found)))
            best: dict[int, float] = {}
            for surface, sim in found.items():
                tid = self._ids.get(fold_word(surface), -1)
                if self._df.get(tid, 0) and sim > best.get(tid, 0.0):
                    best[tid] = sim
            for tid, sim in best.items():
                term_to.setdefault(tid, []).append((wi, sim * sim * self.idf(self._df[tid])))
        out: list[_Candidate] = []
        for doc in self._candidate_docs(term_to, require_all=False):
            occs = [
                (p, wi, p + 1, weight, tid)
                for tid, pairs in term_to.items()
                for p in doc.positions(tid)
                for wi, weight in pairs
            ]
            if not occs:
                continue
            for group in _clusters(occs, width):
                best_w: dict[int, float] = {}
                count: dict[int, int] = {}
                for o in group:
                    best_w[o[1]] = max(best_w.get(o[1], 0.0), o[3])
                    count[o[1]] = count.get(o[1], 0) + 1
                score = sum(w * (1.0 + math.log(count[u])) for u, w in best_w.items())
                matched = [kws[i].text for i in sorted({words[wi][2] for wi in best_w})]
                top = max(group, key=lambda o: (o[3], -o[0]))
                out.append(self._candidate(doc, top, score, matched, {self._terms[o[4]] for o in group}))
        return out, tuple(expansions)

    # -- hits ------------------------------------------------------------------------------
    def _candidate(
        self, doc: NotePositions, occ: _Occ, score: float, keywords: Iterable[str], terms: set[str]
    ) -> _Candidate:
        return _Candidate(
            score, doc.note.path, doc.starts[occ[0]], doc.ends[occ[2] - 1], tuple(keywords), terms
        )

    def _hit(self, c: _Candidate, kws: list[_Keyword], context_chars: int, stage: str) -> ClassicHit:
        doc = self._docs[c.path]
        text = doc.note.text
        before = context_chars // 2
        after = max(context_chars - before, c.match_end - c.cursor)
        win = get_context_at_cursor(text, c.cursor, before, after, path=c.path)
        if stage == "phrase":
            phrase = " ".join(" ".join(k.text for k in kws).split())
            spans = [
                Highlight(m.start() + win.start, m.end() + win.start, phrase)
                for m in _phrase_regex(kws).finditer(win.text)
                if m.end() + win.start <= win.end
            ]
        else:
            lo = bisect_left(doc.starts, win.start)
            hi = bisect_left(doc.starts, win.end)
            want = set(self._tids(c.terms))
            spans = [
                Highlight(doc.starts[i], doc.ends[i], self._terms[doc.ids[i]])
                for i in range(lo, hi)
                if doc.ids[i] in want and doc.ends[i] <= win.end
            ]
        if not any(h.start <= c.cursor < h.end for h in spans):
            spans.append(Highlight(c.cursor, c.match_end, text[c.cursor : c.match_end].casefold()))
        spans.sort(key=lambda h: (h.start, -h.end))
        merged: list[Highlight] = []
        for h in spans:
            if merged and h.start < merged[-1].end:
                continue
            merged.append(h)
        shard = self._shard_at(c.path, c.cursor) if self._shard_at else None
        return ClassicHit(
            score=c.score,
            path=c.path,
            node_id=shard.node_id if shard else "",
            cursor=c.cursor,
            match=text[c.cursor : c.match_end],
            keywords=c.keywords,
            terms=tuple(sorted(c.terms)),
            title=display_title(doc.note),
            snippet=win.text,
            snippet_start=win.start,
            snippet_end=win.end,
            highlights=tuple(merged),
        )


# -- helpers ---------------------------------------------------------------------------------
class _HasClassic(Protocol):
    """An index that keeps a classic index (explorer.index.local.vault_index.VaultIndex)."""

    def classic(self) -> ClassicIndex: ...


def run_mode(
    index: ClassicIndex | _HasClassic,
    mode: str,
    keywords: Sequence[str] | str,
    max_results: int | None = None,
    context_chars: int | None = None,
    window: int | None = None,
) -> ClassicResult:
    """Run one tool by name ('tfidf', 'phrase', 'and', 'fuzzy') on a local index or a ClassicIndex.

    None for a parameter means the tool's default. Raises ClassicQueryError for bad input.
    """
    classic = index if isinstance(index, ClassicIndex) else index.classic()
    return classic.run(mode, keywords, max_results, context_chars, window)


def _phrase_regex(kws: list[_Keyword]) -> re.Pattern[str]:
    """The keywords as one phrase: case-insensitive, any whitespace run for each space, whole words at the ends."""
    parts = " ".join(k.text for k in kws).split()
    pattern = r"\s+".join(re.escape(p) for p in parts)
    if parts[0][0].isalnum() or parts[0][0] == "_":
        pattern = r"(?<!\w)" + pattern
    if parts[-1][-1].isalnum() or parts[-1][-1] == "_":
        pattern += r"(?!\w)"
    return re.compile(pattern, re.IGNORECASE)


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ClassicQueryError(f"{name} must be a whole number, got {value!r}")
    if value < minimum:
        raise ClassicQueryError(f"{name} must be {minimum} or more, got {value}")


def _parse_keywords(keywords: Sequence[str] | str, warnings: list[str]) -> list[_Keyword]:
    if isinstance(keywords, str):
        keywords = [keywords]
    given = [str(k).strip() for k in keywords if str(k).strip()]
    if not given:
        raise ClassicQueryError("no keywords: give at least one word to search for")
    out: list[_Keyword] = []
    dropped: list[str] = []
    for text in dict.fromkeys(given):
        spans = tokenize_spans(text)
        if not spans:
            dropped.append(text)
            continue
        raw = tuple(plain_word(text[s:e]) for _, s, e in spans)
        out.append(_Keyword(text, tuple(t for t, _, _ in spans), raw))
    if not out:
        raise ClassicQueryError(
            f"the keywords {', '.join(repr(d) for d in dropped)} contain no searchable words (only punctuation?)"
        )
    if dropped:
        warnings.append(f"ignored keywords without searchable words: {', '.join(repr(d) for d in dropped)}")
    if len(out) > MAX_KEYWORDS:
        warnings.append(f"only the first {MAX_KEYWORDS} of {len(out)} keywords were used")
        out = out[:MAX_KEYWORDS]
    return out


def _content(kws: list[_Keyword], warnings: list[str], stage: str) -> list[_Keyword]:
    """Keywords minus single stop-words, unless nothing else is left."""
    keep = [k for k in kws if not (len(k.terms) == 1 and is_stopword(k.text))]
    if keep and len(keep) < len(kws):
        dropped = [k.text for k in kws if k not in keep]
        warnings.append(f"{stage}: ignored stop-words {', '.join(dropped)}")
        return keep
    return kws


def _cluster(window: int | None, context_chars: int) -> int:
    """Words within which occurrences form one location: the window, else about half a snippet."""
    if window is not None:
        return window
    return max(8, min(400, context_chars // 12))


def _clusters(occs: list[_Occ], width: int) -> list[list[_Occ]]:
    """Occurrences grouped greedily: a group holds those starting fewer than `width` words after its first."""
    occs = sorted(occs)
    groups: list[list[_Occ]] = []
    for o in occs:
        if groups and o[0] - groups[-1][0][0] < width:
            groups[-1].append(o)
        else:
            groups.append([o])
    return groups
