"""Link suggestions while writing: notes the paragraph names without a link first, then related notes.

The writer asks `LinkSuggester.suggest(text, cursor)` for the paragraph around the cursor. The
answer is built in three steps:

1. **Mentions.** The paragraph's words are matched against every note's names (title, file name,
   frontmatter `title` and `aliases`), Obsidian's "unlinked mentions": whole names only, case- and
   stem-tolerant (`docker setups` names "Docker setup"), one typo allowed in a word of
   `FUZZY_MIN` letters or more (`Dokcer setup`). A name made of stop-words or of very few letters
   ("IF", "ML") matches only as written. Where names overlap, the longest one wins ("Docker setup"
   over "Docker"). Words inside an existing link are not mentions: their notes are *linked*.
2. **Ranking of mentions.** A mention in the sentence at the cursor scores `SENTENCE_WEIGHT`, one
   elsewhere in the paragraph 1.0; a typo match is multiplied by `FUZZY_FACTOR`; ties go to the
   mention nearest the cursor. Every unlinked mention comes before any related note.
3. **Related notes.** The hybrid pipeline (one pass, no rerank, keyword terms, `RELATED_SETTINGS`)
   fills the rest of the list. It reads the sentence at the cursor followed by the whole paragraph
   (`QUERY_SCOPE`), so the sentence's words count twice. That text is read as words only
   (`plain_query`: no `#tag`, `-word` or `name:` filters), and it is embedded sentence by sentence,
   each sentence's vector kept (`SentenceVectors`): while a person types, only the sentence at the
   cursor is embedded again, and `prepare` embeds a note's sentences ahead when the writer opens
   it (`related_query` keeps the sentence at the cursor a sentence of its own). A note the
   paragraph already links to is kept where it ranks but marked `linked`; linked notes that did
   not rank are added at the end while there is room.

Nothing here writes a file: `Suggestion.link` and `Mention` give the text and the span an editor
replaces (`[[Note]]`, or `[[Note|the typed words]]` when the words differ from the link target).
"""

from __future__ import annotations

import hashlib
import itertools
import re
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import numpy as np
from rapidfuzz.distance import OSA

from explorer.search.schema import SearchResult, SearchResults
from explorer.search.writing.linkrank import Candidates, LinkScorer, candidate_features, fit
from explorer.text.lru import LRUCache
from explorer.text.safe import has_controls
from explorer.text.tokenize import is_stopword, tokenize_spans
from explorer.vault.model import Link, Note
from explorer.vault.parse import markdown_link_target

if TYPE_CHECKING:
    from explorer.index.backend import IndexBackend
    from explorer.search.core.pipeline import SearchPipeline

#: Score of a mention in the sentence at the cursor (a mention elsewhere in the paragraph: 1.0).
SENTENCE_WEIGHT = 2.0
#: Factor on the score of a mention found through a typo.
FUZZY_FACTOR = 0.8
#: A typed word of this many letters or more may differ from a name's word by one edit.
FUZZY_MIN = 5
#: What the related search reads (LinkSuggester.scope).
QUERY_SCOPE = "both"
#: Suggestions listed.
LIMIT = 8
#: A name of letters only, at most this many ("IF", "ML"), or of stop-words or digits only, matches only as written.
STRICT_LETTERS = 3
#: Longer names are not matched (a hostile alias list cannot slow the scan down).
MAX_NAME = 200
#: Paragraph rules, as the writer has always used them: grow backwards while under `MIN_WORDS`,
#: and keep at most `MAX_CHARS` characters around the cursor.
MIN_WORDS = 8
MAX_CHARS = 600

#: The related search runs after every pause in typing, so it leaves out what the list does not
#: need: the name ranking (the mentions above list named notes), the knowledge-first retrieval,
#: all but one context shard per result (the list shows none; the ranking is the same), and the
#: always-include rules (preferences and the latest turn are no links to suggest; named notes are
#: the mentions).
RELATED_SETTINGS: dict[str, Any] = {
    "experimental.name_weight": 0.0,
    "experimental.knowledge_first": False,
    "experimental.pass1_shards": 1,
    "search.always_include": False,
}

#: The related search embeds the paragraph sentence by sentence, keeping each sentence's vector
#: (see `SentenceVectors`); False embeds the whole query text at every call.
SENTENCE_VECTORS = True
#: Sentence vectors kept (a few notes' worth: 1.5 KB each).
SENTENCE_CACHE = 4096
#: `LinkSuggester.prepare`: sentences embedded per model call, and at most this many for one note.
PREPARE_BATCH = 8
PREPARE_SENTENCES = 2000

#: `LinkSuggester.prepare` also fits the related notes' scorer (`linkrank`) on the vault's own links,
#: once per open index: at most `TRAIN_LINKS` links (paragraphs picked by a hash of their note), and
#: only when `TRAIN_MIN` of them found their note among the candidates (fewer: the search's order).
LEARN = True
TRAIN_LINKS = 200
TRAIN_MIN = 30
#: Notes longer than this are not trained on (each link keeps a copy of its note's text); per call,
#: at most `NOTE_LINKS` wikilinks and as many Markdown links are read before the paragraph, and after it.
TRAIN_NOTE_CHARS = 100_000
NOTE_LINKS = 500

_WIKILINK = re.compile(r"!?\[\[([^\[\]\r\n]+?)\]\]")
_MDLINK = re.compile(r"!?\[([^\[\]\r\n]*)\]\(\s*(<[^<>\r\n]*>|[^\s()<>]+)(?:\s+\"[^\"\r\n]*\")?\s*\)")
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n")
# What the query syntax would read as a filter: quotes, brackets, `#tag`, `-word` (and `---`), `name:value`.
_FILTERISH = re.compile(r"[\"\[\]|#]|(?<!\w)-+|(?<=\w):")
_FRONTMATTER = re.compile(r"---[ \t]*\r?\n(?:.*?\n)??(?:---|\.\.\.)[ \t]*(?:\r?\n|$)", re.DOTALL)
_BREAK = re.compile(r"[.!?;\n]")
_SENTENCE_GAP = re.compile(r"(?<=[.!?;])\s+")
_SENTENCE_STOP = re.compile(r"[.!?;]$")
_PARAGRAPH = re.compile(r"(?:[^\n]|\n(?![ \t]*\n))+")


def plain_query(text: str) -> str:
    """Text made safe to search as words: no quotes, filters, exclusions or wikilink brackets."""
    return " ".join(_FILTERISH.sub(" ", text).split())


def frontmatter_end(text: str) -> int:
    """Offset just past a leading YAML frontmatter block (0 when the text has none)."""
    m = _FRONTMATTER.match(text)
    return m.end() if m else 0


def paragraph_bounds(
    text: str, index: int, min_words: int = MIN_WORDS, max_chars: int = MAX_CHARS
) -> tuple[int, int]:
    """(start, end) of the paragraph (blank-line separated) around `index`, grown backwards while
    it is short (never into the frontmatter when the cursor is below it), cut to `max_chars` around
    the cursor."""
    index = max(0, min(index, len(text)))
    floor = frontmatter_end(text) if text.startswith("---") else 0
    if index < floor:
        floor = 0
    start = text.rfind("\n\n", floor, index)
    start = floor if start == -1 else start + 2
    end = text.find("\n\n", index)
    end = len(text) if end == -1 else end
    while len(text[start:end].split()) < min_words and start > floor:
        prev = text.rfind("\n\n", floor, max(floor, start - 2))
        start = floor if prev == -1 else prev + 2
    if end - start > max_chars:
        lo = max(0, min(index - start - max_chars // 2, end - start - max_chars))
        cut_start, cut_end = start + lo > start, start + lo + max_chars < end
        start, end = start + lo, start + lo + max_chars
        # A cut falls on a sentence boundary where there is one between it and the cursor, so the
        # window's sentences stay the same while a person types (each keeps its vector).
        if cut_start:
            m = _SENTENCE_END.search(text, start, index)
            if m is not None:
                start = m.end()
                while start < index and text[start].isspace():
                    start += 1
        if cut_end:
            ends = [m.end() for m in _SENTENCE_END.finditer(text, index, end)]
            if ends:
                end = ends[-1]
    return start, end


def sentence_bounds(text: str, index: int, start: int, end: int) -> tuple[int, int]:
    """(start, end) of the sentence around `index` within text[start:end]; a cursor just after a
    sentence's full stop belongs to that sentence."""
    i = max(start, min(index, end))
    while i > start and text[i - 1].isspace():
        i -= 1
    if i > start and text[i - 1] in ".!?":
        i -= 1
    lo = start
    for m in _SENTENCE_END.finditer(text, start, i):
        lo = m.end()
    after = _SENTENCE_END.search(text, i, end)
    hi = after.end() if after else end
    return lo, hi


def related_query(text: str, cursor: int, start: int, end: int, scope: str = QUERY_SCOPE) -> str:
    """What the related search reads for the paragraph text[start:end] (`scope` as `LinkSuggester.scope`).

    With `both`, the sentence at the cursor stands first and ends with a full stop, so it stays a
    sentence of its own: its vector is the one `SentenceVectors` computes again while a person
    types, and the paragraph's first sentence keeps its own (without the stop the two would read as
    one new sentence at every call).
    """
    paragraph = plain_query(text[start:end])
    if scope == "paragraph":
        return paragraph
    s_lo, s_hi = sentence_bounds(text, cursor, start, end)
    sentence = plain_query(text[s_lo:s_hi])
    if scope == "sentence" and sentence:
        return sentence
    if sentence and paragraph and not _SENTENCE_STOP.search(sentence):
        sentence += "."
    return f"{sentence} {paragraph}".strip()


def paragraphs(text: str) -> list[tuple[int, int]]:
    """(start, end) of the blank-line separated paragraphs of `text` below its frontmatter."""
    floor = frontmatter_end(text) if text.startswith("---") else 0
    return [(floor + m.start(), floor + m.end()) for m in _PARAGRAPH.finditer(text[floor:])]


def remove_links(text: str, links: Iterable[Link], keep_words: bool = False) -> tuple[str, list[int]]:
    """`text` with `links` taken out (or replaced by their words), and where each link ended in the result.

    Removed, a link takes the space before it along when punctuation or the end follows (`see
    [[Note]].` -> `see.`); kept, `[[Note|words]]` -> `words`, `[[Note]]` -> `Note`, `[text](x.md)` -> `text`.
    """
    out: list[str] = []
    ends: list[int] = []
    pos = length = 0
    for link in sorted(links, key=lambda x: x.start):
        piece = text[pos : link.start]
        if not keep_words and text[link.end : link.end + 1] in (" ", ".", ",", ";", ":", ")", ""):
            piece = piece.rstrip(" ")
        words = (link.alias or link.target.rsplit("/", 1)[-1].removesuffix(".md")) if keep_words else ""
        out += [piece, words]
        length += len(piece) + len(words)
        ends.append(length)
        pos = link.end
    out.append(text[pos:])
    return "".join(out), ends


def training_links(
    notes: Mapping[str, Note], graph: Any, limit: int = TRAIN_LINKS
) -> list[tuple[str, str, int, str]]:
    """Up to `limit` links of the vault as a writer meets them before typing them: (note, its text with
    the paragraph's links removed, the cursor where the link stood, the linked note). Paragraphs are
    taken note by note in the order of a hash of the note's path (the same vault gives the same links)."""
    out: list[tuple[str, str, int, str]] = []
    order = sorted(notes, key=lambda p: hashlib.blake2b(p.encode(), digest_size=8).digest())
    for path in order:
        note = notes[path]
        if not note.links or len(note.text) > TRAIN_NOTE_CHARS:
            continue
        for lo, hi in paragraphs(note.text):
            links = [ln for ln in note.links if lo <= ln.start < hi and not ln.embed]
            if not links:
                continue
            hidden, ends = remove_links(note.text, links)
            seen: set[str] = set()
            for ln, end in zip(sorted(links, key=lambda x: x.start), ends):
                target = graph.resolve(ln.target, path, ln.markdown) if ln.target else None
                if target is None or target == path or target in seen or not target.lower().endswith(".md"):
                    continue
                seen.add(target)
                out.append((path, hidden, end, target))
                if len(out) >= limit:
                    return out
    return out


#: Scorers fitted in this process, by what a fit reads (`LinkSuggester.fit_key`): the writer opens a
#: suggester per note, and every app or index opened on the same vault content takes the same scorer.
_FITTED: LRUCache[Hashable, tuple[LinkScorer | None]] = LRUCache(8)
#: The scorer an open index took last: its later suggesters take it even after its notes changed
#: (the writer saves notes as it goes; a scorer of the links as they were still ranks well).
_TAKEN: weakref.WeakKeyDictionary[Any, tuple[LinkScorer | None]] = weakref.WeakKeyDictionary()
#: The digest of an index's notes, by index and version (a note's content is hashed once per version).
_CONTENT: weakref.WeakKeyDictionary[Any, tuple[int, str]] = weakref.WeakKeyDictionary()


def content_digest(notes: Mapping[str, Note]) -> str:
    """A digest of the notes' paths and texts (any change to a note, a note added or gone, changes it)."""
    h = hashlib.blake2b(digest_size=16)
    for path in sorted(notes):
        h.update(path.encode("utf-8", "surrogatepass") + b"\0")
        h.update(hashlib.blake2b(notes[path].text.encode("utf-8", "surrogatepass"), digest_size=16).digest())
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class _Name:
    path: str
    name: str
    keys: tuple[str, ...]
    """Folded tokens of the name."""
    raw: tuple[str, ...]
    """Its words, case-folded but not stemmed (what a typo is measured against)."""
    strict: bool
    """Match only as written (short names, stop-word names)."""


@dataclass(frozen=True, slots=True)
class Mention:
    """A note named in the paragraph."""

    path: str
    """The note named."""
    name: str
    """Which of its names matched."""
    start: int
    """Offset of the mention (or of the link) in the text."""
    end: int
    """Offset past it."""
    typed: str
    """The words as they stand in the text."""
    linked: bool
    """True when the words are a link already."""
    fuzzy: bool = False
    """True when a word matched through a typo."""
    in_sentence: bool = False
    """True when the mention is in the sentence at the cursor."""


@dataclass(frozen=True, slots=True)
class Suggestion:
    """One entry of the writer's list."""

    path: str
    """The note suggested."""
    title: str
    """Its title."""
    kind: str
    """`mention` (named, not linked), `related` (found by the search) or `linked` (the paragraph links to it)."""
    link: str
    """The link text to insert: `[[Target]]` or `[[Target|typed words]]` over a mention ('' when the
    note's name holds control characters: it cannot be linked from here)."""
    mention: Mention | None = None
    """The unlinked mention this suggestion replaces (None: insert at the cursor)."""
    result: SearchResult | None = None
    """The search result behind a related (or linked) entry."""


@dataclass(frozen=True, slots=True)
class Suggestions:
    """The writer's list for one cursor position."""

    query: str
    """The paragraph's words as searched."""
    start: int
    """Paragraph start offset."""
    end: int
    """Paragraph end offset."""
    items: tuple[Suggestion, ...]
    """Mentions first, then related notes (linked ones marked)."""
    mentions: tuple[Mention, ...] = ()
    """Every name found in the paragraph (linked ones too), in text order."""
    results: SearchResults | None = None
    """The related search's answer (None when there was nothing to search)."""
    timings_ms: dict[str, float] = field(default_factory=dict)
    """Time spent per step."""
    candidates: Candidates | None = None
    """The related notes' features (`linkrank`), when a scorer ranked them or they were asked for."""


class MentionIndex:
    """Every note's names, by their first word (one-word names) or first two words (longer names),
    and by one-deletion neighbours of their words (typos)."""

    def __init__(self) -> None:
        self._names: dict[str, tuple[_Name, ...]] = {}
        self._notes: dict[str, Note] = {}
        self._first: dict[str, list[_Name]] = {}
        self._pairs: dict[tuple[str, str], list[_Name]] = {}
        self._by_name: dict[str, list[str]] = {}
        self._by_path: dict[str, str] = {}
        self._stems: dict[str, list[str]] = {}
        self._deletes: dict[str, set[str]] = {}
        self._fold_of: dict[str, str] = {}
        self._near: dict[str, tuple[str, ...]] = {}
        self._version: object = None

    def refresh(self, notes: Mapping[str, Note], version: object) -> None:
        """Bring the table up to date with `notes` (only changed notes are redone)."""
        if version == self._version:
            return
        for path in [p for p in self._notes if p not in notes]:
            self._drop(path)
        for path, note in notes.items():
            if self._notes.get(path) is not note:
                self._drop(path)
                self._add(path, note)
        self._near.clear()
        self._version = version

    def _add(self, path: str, note: Note) -> None:
        self._notes[path] = note
        entries = []
        for name in note.names:
            if has_controls(name) or len(name) > MAX_NAME:
                continue  # never matched, so never written into the editor
            spans = tokenize_spans(name)
            if not spans:
                continue
            keys = tuple(t for t, _, _ in spans)
            raw = tuple(name[s:e].casefold() for _, s, e in spans)
            short = all(w.isalpha() for w in raw) and sum(map(len, raw)) <= STRICT_LETTERS
            strict = short or all(is_stopword(w) for w in raw) or all(w.isdigit() for w in raw)
            entry = _Name(path, name, keys, raw, strict)
            entries.append(entry)
            self._bucket(entry).append(entry)
            self._by_name.setdefault(name.casefold(), []).append(path)
            for word, key in zip(raw, keys):
                if len(word) >= FUZZY_MIN and word.isalpha() and word not in self._fold_of:
                    self._fold_of[word] = key
                    for d in _deletes(word):
                        self._deletes.setdefault(d, set()).add(word)
        self._names[path] = tuple(entries)
        low = path.casefold()
        self._by_path[low] = path
        self._by_path[low[:-3] if low.endswith(".md") else low] = path
        self._stems.setdefault(note.stem.casefold(), []).append(path)

    def _drop(self, path: str) -> None:
        note = self._notes.pop(path, None)
        for entry in self._names.pop(path, ()):
            bucket = self._bucket(entry)
            if entry in bucket:
                bucket.remove(entry)
            paths = self._by_name.get(entry.name.casefold(), [])
            if path in paths:
                paths.remove(path)
        if note is not None:
            low = path.casefold()
            self._by_path.pop(low, None)
            self._by_path.pop(low[:-3] if low.endswith(".md") else low, None)
            stems = self._stems.get(note.stem.casefold(), [])
            if path in stems:
                stems.remove(path)

    def _bucket(self, entry: _Name) -> list[_Name]:
        """The list `entry` is kept in: by its first word, or its first two words."""
        if len(entry.keys) == 1:
            return self._first.setdefault(entry.keys[0], [])
        return self._pairs.setdefault((entry.keys[0], entry.keys[1]), [])

    def note(self, path: str) -> Note | None:
        """The note at `path` as last refreshed."""
        return self._notes.get(path)

    def link_target(self, path: str) -> str:
        """What to write inside `[[...]]` for `path`: the file name, or the path when two notes share it."""
        note = self._notes.get(path)
        if note is None:
            return path[:-3] if path.lower().endswith(".md") else path
        if len(self._stems.get(note.stem.casefold(), ())) > 1:
            return path[:-3] if path.lower().endswith(".md") else path
        return note.stem

    def resolve(self, target: str) -> str | None:
        """The note a link target names (path, file name or another name, case-insensitively)."""
        t = target.strip().replace("\\", "/").lstrip("/").casefold()
        if not t:
            return None
        if t in self._by_path:
            return self._by_path[t]
        stem = t.rsplit("/", 1)[-1]
        stem = stem[:-3] if stem.endswith(".md") else stem
        for table in (self._stems, self._by_name):
            found = sorted(table.get(stem, ()), key=lambda p: (len(p), p))
            if found:
                return found[0]
        return None

    def _close(self, word: str) -> tuple[str, ...]:
        """Name words one edit (insert, delete, replace, swap) away from the typed `word`."""
        hit = self._near.get(word)
        if hit is not None:
            return hit
        found: set[str] = set()
        if len(word) >= FUZZY_MIN - 1 and word.isalpha():
            for d in (word, *_deletes(word)):
                found |= self._deletes.get(d, set())
        out = tuple(
            sorted(w for w in found if w != word and len(w) >= FUZZY_MIN and OSA.distance(w, word) <= 1)
        )
        if len(self._near) > 50_000:
            self._near.clear()
        self._near[word] = out
        return out

    def find(
        self, text: str, start: int, end: int, skip: Iterable[tuple[int, int]] = ()
    ) -> list[tuple[_Name, int, int, bool]]:
        """Names standing in text[start:end] outside the `skip` spans: (name, start, end, fuzzy),
        longest first where they overlap."""
        spans = [(k, start + s, start + e) for k, s, e in tokenize_spans(text[start:end])]
        blocked = sorted(skip)
        toks = [t for t in spans if not any(a <= t[1] < b for a, b in blocked)]
        out: list[tuple[_Name, int, int, bool]] = []
        i = 0
        while i < len(toks):
            best: list[tuple[_Name, int, bool]] = []
            best_len = 0
            # The second word's keys (as typed, or a name's word one typo away), looked up once.
            seconds = [k for k, _ in self._keys_at(text, toks[i + 1])] if i + 1 < len(toks) else []
            for key0, fuzzy0 in self._keys_at(text, toks[i]):
                candidates = list(self._first.get(key0, ()))
                for key1 in seconds:
                    candidates.extend(self._pairs.get((key0, key1), ()))
                for entry in candidates:
                    n = len(entry.keys)
                    if n < best_len or i + n > len(toks):
                        continue
                    fuzzy = self._match(text, toks, i, entry, fuzzy0)
                    if fuzzy is None:
                        continue
                    if n > best_len or (best and best[0][2] and not fuzzy):
                        best, best_len = [], n
                    if not best or fuzzy == best[0][2]:
                        best.append((entry, n, fuzzy))
            if best:
                for entry, n, fuzzy in best:
                    out.append((entry, toks[i][1], toks[i + n - 1][2], fuzzy))
                i += best_len
            else:
                i += 1
        return out

    def _keys_at(self, text: str, tok: tuple[str, int, int]) -> list[tuple[str, bool]]:
        key, s, e = tok
        keys = [(key, False)]
        for word in self._close(text[s:e].casefold()):
            fk = self._fold_of.get(word)
            if fk is not None and fk != key:
                keys.append((fk, True))
        return keys

    def _match(
        self, text: str, toks: list[tuple[str, int, int]], i: int, entry: _Name, fuzzy0: bool
    ) -> bool | None:
        """None when `entry` does not stand at toks[i]; else whether a typo was needed."""
        n = len(entry.keys)
        if entry.strict:
            typed = " ".join(text[toks[i][1] : toks[i + n - 1][2]].split())
            return False if typed == entry.name or _same_words(typed, entry.name) else None
        fuzzy = int(fuzzy0)
        for j in range(1, n):
            key, s, e = toks[i + j]
            if _BREAK.search(text, toks[i + j - 1][2], s):
                return None
            if key == entry.keys[j]:
                continue
            word = text[s:e].casefold()
            if fuzzy or entry.raw[j] not in self._close(word):
                return None
            fuzzy += 1
        if fuzzy and (n == 1 and len(entry.raw[0]) < FUZZY_MIN + 1):
            return None
        if fuzzy and n > 1 and fuzzy >= n:
            return None
        return bool(fuzzy)


def _same_words(typed: str, name: str) -> bool:
    """Same words with the same letters' case (punctuation between them aside)."""
    return [m.group(0) for m in re.finditer(r"\w+", typed)] == [m.group(0) for m in re.finditer(r"\w+", name)]


def _deletes(word: str) -> set[str]:
    return {word[:i] + word[i + 1 :] for i in range(len(word))}


def _link(target: str, typed: str, path: str) -> str:
    """`[[target]]` or `[[target|typed]]`; a Markdown link when the name holds a character that would
    end a wikilink early (`[`, `]`, `|`, `#`, `^`)."""
    typed = " ".join(typed.replace("[", " ").replace("]", " ").replace("|", " ").split())
    if has_controls(target) or has_controls(typed):
        return ""  # a name a terminal could act on is never written into the editor
    if any(c in target for c in "[]|#^"):
        words = typed or target.rsplit("/", 1)[-1].replace("[", " ").replace("]", " ")
        return f"[{' '.join(words.split())}]({quote(path)})"
    if not typed or typed == target or typed == target.rsplit("/", 1)[-1]:
        return f"[[{target}]]"
    return f"[[{target}|{typed}]]"


def sentences(text: str) -> list[str]:
    """The sentences `SentenceVectors` embeds one by one: split after `.`, `!`, `?` or `;`, each
    ending with its mark (a full stop where it has none: the sentence being typed reads the same
    with it, and the sentence at the cursor stands before the paragraph with one)."""
    out = []
    for piece in _SENTENCE_GAP.split(text.strip()):
        if piece:
            out.append(piece if _SENTENCE_STOP.search(piece) else piece + ".")
    return out


class SentenceVectors:
    """An embedder that answers a text from the vectors of its sentences, each embedded once.

    While a person types, only the sentence at the cursor changes: its vector is the only one
    computed again (a sentence costs a fraction of a paragraph: the model's cost grows with the
    length of what it reads). A text's vector is the mean of its sentences' vectors, each weighed by
    its word count, normalised; a sentence that stands twice in the text (the sentence at the
    cursor, then the paragraph) counts twice.
    """

    def __init__(self, embedder: Any, capacity: int = SENTENCE_CACHE) -> None:
        self.embedder = embedder
        """The model's embedder (the index's)."""
        self.model_id: str = embedder.model_id
        self.dim: int = embedder.dim
        self.runtime: str = embedder.runtime
        self._kept: LRUCache[str, np.ndarray] = LRUCache(capacity)

    def missing(self, texts: Iterable[str]) -> list[str]:
        """The sentences of `texts` that have no vector kept yet (each once, in order)."""
        pieces = dict.fromkeys(p for t in texts for p in sentences(t))
        return [p for p in pieces if p not in self._kept]

    def encode(self, texts: Any, batch_size: int = 32) -> np.ndarray:
        """L2-normalised float32 vectors of `texts`, one row each (as the embedder's `encode`)."""
        pieces = [sentences(t) or [t] for t in texts]
        vec: dict[str, np.ndarray] = {}
        todo: list[str] = []
        for p in dict.fromkeys(p for ps in pieces for p in ps):
            kept = self._kept.get(p)
            if kept is None:
                todo.append(p)
            else:
                vec[p] = kept
        if todo:
            for p, v in zip(todo, self.embedder.encode(todo, batch_size)):
                vec[p] = np.asarray(v, dtype=np.float32)
                self._kept.put(p, vec[p])
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, ps in enumerate(pieces):
            acc = sum((max(1, len(p.split())) * vec[p] for p in ps), np.zeros(self.dim, dtype=np.float32))
            out[i] = acc / max(float(np.linalg.norm(acc)), 1e-12)
        return out


class _SentenceIndex:
    """The index as the related search reads it: the same in everything but its embedder (`SentenceVectors`)."""

    def __init__(self, index: IndexBackend) -> None:
        self._index = index
        self._model: Any = None
        self._vectors: SentenceVectors | None = None

    def embedder(self) -> SentenceVectors | None:
        """The index's embedder behind a sentence cache (a new cache when the model changed)."""
        emb = self._index.embedder()
        if emb is None:
            return None
        if emb is not self._model or self._vectors is None:
            self._model, self._vectors = emb, SentenceVectors(emb)
        return self._vectors

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)


class LinkSuggester:
    """Link suggestions for a paragraph being written, over one search pipeline."""

    def __init__(
        self,
        pipeline: SearchPipeline,
        sentence_weight: float = SENTENCE_WEIGHT,
        fuzzy_factor: float = FUZZY_FACTOR,
        scope: str = QUERY_SCOPE,
        sentence_vectors: bool = SENTENCE_VECTORS,
        scorer: LinkScorer | None = None,
        learn: bool = LEARN,
    ) -> None:
        from explorer.search.core.pipeline import SearchPipeline

        self.pipeline = pipeline
        """The app's pipeline (its index is the one read)."""
        self.related = SearchPipeline(
            _SentenceIndex(pipeline.index) if sentence_vectors else pipeline.index,
            pipeline.settings.with_overrides(RELATED_SETTINGS, origin="link suggestions"),
        )
        """The pipeline of the related search: the app's settings with `RELATED_SETTINGS`, keyword terms (no LLM)."""
        self.sentence_weight = sentence_weight
        self.fuzzy_factor = fuzzy_factor
        self._lock = threading.Lock()
        self.scope = scope
        """What the related search reads: `paragraph`, `sentence` (at the cursor) or `both` (the sentence, then the paragraph)."""
        self.names = MentionIndex()
        self.scorer = scorer
        """Ranks the related notes by what predicts a link in this vault (`linkrank`); None: the search's order."""
        self.learn = learn and scorer is None
        """`prepare` fits `scorer` on the vault's links (or takes the one fitted on this index before)."""
        self._active = 0
        self._active_lock = threading.Lock()
        self._note_vectors: dict[str, np.ndarray | None] = {}
        self._vectors_version: object = None

    def refresh(self) -> None:
        """Bring the name table up to date with the index (cheap when nothing changed)."""
        with self.pipeline.index.snapshot() as snap:
            self.names.refresh(snap.notes, snap.version)

    def prepare(
        self,
        text: str,
        cursor: int = 0,
        *,
        cancelled: Callable[[], bool] | None = None,
        batch: int = PREPARE_BATCH,
        limit: int = PREPARE_SENTENCES,
    ) -> int:
        """Embed ahead the sentences the related search will read in `text` (a note just opened).

        Every paragraph is read as `suggest` reads it with the cursor at its end, nearest the
        `cursor` first; sentences without a kept vector are embedded `batch` at a time (at most
        `limit`), stopping when `cancelled()` turns true. Then the first word typed in a paragraph
        embeds only its own sentence. Returns the number of sentences embedded.
        """
        index = self.related.index
        vectors = index.embedder() if isinstance(index, _SentenceIndex) else None
        if vectors is None:
            return 0
        spans = sorted(paragraphs(text), key=lambda span: (max(span[0] - cursor, cursor - span[1], 0), span))
        queries = []
        for _lo, hi in spans:
            start, end = paragraph_bounds(text, hi)
            queries.append(related_query(text, hi, start, end, self.scope))
        todo = vectors.missing(queries)[:limit]
        done = 0
        for i in range(0, len(todo), batch):
            if cancelled is not None and cancelled():
                break
            vectors.encode(todo[i : i + batch])
            done += len(todo[i : i + batch])
        if self.learn and self.scorer is None and not (cancelled is not None and cancelled()):
            self.fit_scorer(cancelled=cancelled)
        return done

    def fit_scorer(
        self, *, cancelled: Callable[[], bool] | None = None, limit: int = TRAIN_LINKS
    ) -> LinkScorer | None:
        """Fit the related notes' scorer on the vault's own links (`training_links`) and use it.

        Each link is asked for as the writer asks with the link not typed yet; the candidates and
        the linked note train a `linkrank.LinkScorer`. Done once per vault content (`fit_key`: a later
        suggester, on this index or another opened on the same notes, takes the same scorer; an index
        opened on changed notes fits again) and once per open index (its later suggesters take the
        scorer it took, though notes were saved since). Waits while a `suggest` call of this
        suggester runs, and a training call under way stops between its stages when one starts, so
        typing is answered first. None (the search's order stays) when cancelled or with fewer than
        `TRAIN_MIN` usable links.
        """
        index = self.pipeline.index
        try:
            kept = _TAKEN.get(index)
        except TypeError:
            kept = None
        key = None
        if kept is None:
            key = self.fit_key(limit)
            kept = _FITTED.get(key)
        if kept is not None:
            self.scorer, self.learn = kept[0], False
            self._took(kept)
            return self.scorer
        with self.pipeline.index.snapshot() as snap:
            todo = training_links(snap.notes, snap.links(), limit)
        groups = self.training_groups(todo, cancelled=cancelled)
        if groups is None:
            return None
        usable = sum(target in c.paths for c, target in groups)
        scorer = fit(groups) if usable >= TRAIN_MIN else None
        self.scorer, self.learn = scorer, False
        _FITTED.put(key, (scorer,))
        self._took((scorer,))
        return scorer

    def _took(self, kept: tuple[LinkScorer | None]) -> None:
        try:
            _TAKEN[self.pipeline.index] = kept
        except TypeError:
            pass

    def fit_key(self, limit: int = TRAIN_LINKS) -> Hashable:
        """What a fit of the scorer reads: the vault's notes (a digest of their paths and texts, with
        how many shards wait for a vector), the model, the related search's settings and this
        suggester's own. A backend that holds other vaults' notes too (whose answers move without
        this vault changing) keys by its open index as well."""
        index = self.pipeline.index
        with index.snapshot() as snap:
            version, pending = snap.version, snap.counts().pending
            try:
                kept = _CONTENT.get(index)
            except TypeError:
                kept = None
            if kept is not None and kept[0] == version:
                digest = kept[1]
            else:
                digest = content_digest(snap.notes)
                try:
                    _CONTENT[index] = (version, digest)
                except TypeError:
                    pass
        emb = index.embedder()
        model = None if emb is None else (str(emb.model_id), int(emb.dim), str(emb.runtime))
        own = (
            self.scope,
            self.sentence_weight,
            self.fuzzy_factor,
            isinstance(self.related.index, _SentenceIndex),
        )
        where = id(index) if index.many_vaults else type(index).__qualname__
        return (digest, pending, model, repr(self.related.settings), own, limit, where)

    def training_groups(
        self, todo: Iterable[tuple[str, str, int, str]], *, cancelled: Callable[[], bool] | None = None
    ) -> list[tuple[Candidates, str]] | None:
        """(candidates, linked note) for each of `todo` (`training_links`), asked as the writer asks;
        None when cancelled. Gives way to this suggester's own calls: waits while one runs, and a
        call of its own under way stops between its stages when one starts (it runs again after)."""
        from explorer.search.core.pipeline import SearchCancelled

        def stop() -> bool:
            return cancelled is not None and cancelled()

        def give_way() -> bool:
            return bool(self._active) or stop()

        groups = []
        for path, text, cursor, target in todo:
            while True:
                while self._active:
                    time.sleep(0.005)
                if stop():
                    return None
                try:
                    got = self.suggest(
                        text, cursor, path=path, features=True, learning=True, cancelled=give_way
                    )
                    break
                except SearchCancelled:
                    continue
            if got.candidates is not None:
                groups.append((got.candidates, target))
        return groups

    def mentions(
        self, text: str, cursor: int, path: str | None = None
    ) -> tuple[tuple[int, int], list[Mention]]:
        """The paragraph's bounds and the names in it: links (linked) and unlinked mentions, in text order."""
        # A cancelled writer thread may still be running: one thread at a time reads and refreshes the table.
        with self._lock:
            return self._mentions(text, cursor, path)

    def _mentions(self, text: str, cursor: int, path: str | None) -> tuple[tuple[int, int], list[Mention]]:
        self.refresh()
        start, end = paragraph_bounds(text, cursor)
        s_lo, s_hi = sentence_bounds(text, cursor, start, end)
        out: list[Mention] = []
        links: list[tuple[int, int]] = []
        for m in _WIKILINK.finditer(text, start, end):
            target = m.group(1).partition("|")[0].partition("#")[0]
            links.append((m.start(), m.end()))
            found = self.names.resolve(target)
            if found is not None:
                out.append(
                    Mention(
                        found,
                        target.strip(),
                        m.start(),
                        m.end(),
                        m.group(0),
                        True,
                        in_sentence=s_lo <= m.start() < s_hi,
                    )
                )
        for m in _MDLINK.finditer(text, start, end):
            if any(a <= m.start() < b for a, b in links):
                continue
            links.append((m.start(), m.end()))
            dest = markdown_link_target(m.group(2))
            found = self.names.resolve(dest[0]) if dest and dest[0] else None
            if found is not None:
                out.append(
                    Mention(
                        found,
                        dest[0] if dest else "",
                        m.start(),
                        m.end(),
                        m.group(0),
                        True,
                        in_sentence=s_lo <= m.start() < s_hi,
                    )
                )
        for entry, lo, hi, fuzzy in self.names.find(text, start, end, links):
            if entry.path == path:
                continue
            out.append(Mention(entry.path, entry.name, lo, hi, text[lo:hi], False, fuzzy, s_lo <= lo < s_hi))
        out.sort(key=lambda m: (m.start, m.path))
        return (start, end), out

    def rank_mentions(self, mentions: Iterable[Mention], cursor: int) -> list[Mention]:
        """Unlinked mentions best first, one per note (its best occurrence)."""
        best: dict[str, tuple[float, int, Mention]] = {}
        for m in mentions:
            if m.linked:
                continue
            score = (self.sentence_weight if m.in_sentence else 1.0) * (self.fuzzy_factor if m.fuzzy else 1.0)
            dist = min(abs(cursor - m.start), abs(cursor - m.end))
            cur = best.get(m.path)
            if cur is None or (score, -dist) > (cur[0], -cur[1]):
                best[m.path] = (score, dist, m)
        return [m for _, _, m in sorted(best.values(), key=lambda t: (-t[0], t[1], t[2].path))]

    def suggest(
        self,
        text: str,
        cursor: int,
        *,
        path: str | None = None,
        k: int = LIMIT,
        dense: bool = True,
        cancelled: Callable[[], bool] | None = None,
        early: Callable[[Suggestions], None] | None = None,
        features: bool = False,
        learning: bool = False,
    ) -> Suggestions:
        """The list for the paragraph around `cursor` in `text` (the note at `path` is left out).

        `early`, when given, receives the named notes alone (no `results`) before the related search
        starts, so a list can show them at once. Raises the pipeline's SearchCancelled when
        `cancelled()` turns true during the search. With a `scorer` (or `features`), the related
        notes are described by `linkrank.candidate_features` (kept in `candidates`); the scorer
        orders them. (`learning`: a call of `fit_scorer`, which gives way to the others.)
        """
        if learning:
            return self._suggest(text, cursor, path, k, dense, cancelled, early, features)
        with self._active_lock:
            self._active += 1
        try:
            return self._suggest(text, cursor, path, k, dense, cancelled, early, features)
        finally:
            with self._active_lock:
                self._active -= 1

    def _suggest(
        self,
        text: str,
        cursor: int,
        path: str | None,
        k: int,
        dense: bool,
        cancelled: Callable[[], bool] | None,
        early: Callable[[Suggestions], None] | None,
        features: bool,
    ) -> Suggestions:
        from explorer.search.core.pipeline import QueryError

        t0 = time.perf_counter()
        (start, end), mentions = self.mentions(text, cursor, path)
        ranked = self.rank_mentions(mentions, cursor)
        linked = {m.path for m in mentions if m.linked}
        t1 = time.perf_counter()
        items: list[Suggestion] = []
        seen: set[str] = set()
        for m in ranked:
            if m.path in seen or m.path in linked or len(items) >= k:
                continue
            seen.add(m.path)
            target = self.names.link_target(m.path)
            # A typo is corrected by the link: the note's name stands where the misspelt words were.
            shown = m.name if m.fuzzy else m.typed
            items.append(Suggestion(m.path, self._title(m.path), "mention", _link(target, shown, m.path), m))
        query = related_query(text, cursor, start, end, self.scope)
        if early is not None:
            early(
                Suggestions(
                    query,
                    start,
                    end,
                    tuple(items),
                    tuple(mentions),
                    None,
                    {"mentions": round((time.perf_counter() - t0) * 1000, 2)},
                )
            )
        results = None
        scored = self.scorer is not None or features
        if query and (len(items) < k or features):
            try:
                results = self.related.search(
                    query,
                    k=k + 1 + len(seen),
                    dense=dense,
                    two_pass=False,
                    rerank=False,
                    cancelled=cancelled,
                    record=False,
                )
            except QueryError:
                results = None
        t2 = time.perf_counter()
        cands = None
        if results is not None and scored:
            cands = self._candidates(text, cursor, (start, end), path, results, seen, dense)
        if results is not None:
            by_path = {r.document_path: r for r in reversed(results.results)}
            order = [r.document_path for r in results.results]
            if self.scorer is not None and cands is not None:
                order = self.scorer.order(cands)
            for p in order:
                if len(items) >= k:
                    break
                if p == path or p in seen:
                    continue
                seen.add(p)
                kind = "linked" if p in linked else "related"
                r = by_path.get(p)
                items.append(
                    Suggestion(p, r.title if r else self._title(p), kind, self._link_to(p), result=r)
                )
        for p in sorted(linked - seen):
            if len(items) >= k:
                break
            if p == path:
                continue
            seen.add(p)
            items.append(Suggestion(p, self._title(p), "linked", self._link_to(p)))
        timings = {
            "mentions": round((t1 - t0) * 1000, 2),
            "related": round((t2 - t1) * 1000, 2),
            "total": round((time.perf_counter() - t0) * 1000, 2),
        }
        return Suggestions(query, start, end, tuple(items), tuple(mentions), results, timings, cands)

    def _candidates(
        self,
        text: str,
        cursor: int,
        bounds: tuple[int, int],
        path: str | None,
        results: SearchResults,
        named: Iterable[str],
        dense: bool,
    ) -> Candidates:
        """The related notes' features for the paragraph `bounds` of `text` (`linkrank.candidate_features`)."""
        start, end = bounds
        s_lo, s_hi = sentence_bounds(text, cursor, start, end)
        sentence, paragraph = plain_query(text[s_lo:s_hi]), plain_query(text[start:end])
        with self.pipeline.index.snapshot() as snap:
            if snap.version != self._vectors_version:
                self._note_vectors, self._vectors_version = {}, snap.version
            graph = snap.links()
            outside: list[str] = []
            for lo, hi in ((0, start), (end, len(text))):
                for m in itertools.islice(_WIKILINK.finditer(text, lo, hi), NOTE_LINKS):
                    found = graph.resolve(m.group(1).partition("|")[0].partition("#")[0], path)
                    if found is not None:
                        outside.append(found)
                for m in itertools.islice(_MDLINK.finditer(text, lo, hi), NOTE_LINKS):
                    dest = markdown_link_target(m.group(2))
                    found = graph.resolve(dest[0], path, True) if dest and dest[0] else None
                    if found is not None:
                        outside.append(found)
            vectors: tuple[np.ndarray | None, np.ndarray | None] = (None, None)
            emb = self.related.index.embedder() if dense else None
            if emb is not None:
                got = emb.encode([sentence or ".", paragraph or "."])
                vectors = (got[0] if sentence else None, got[1] if paragraph else None)
            return candidate_features(
                snap,
                path=path,
                sentence=sentence,
                paragraph=paragraph,
                note_links=outside,
                results=results.results,
                vectors=vectors,
                exclude=named,
                vector_cache=self._note_vectors,
            )

    def _link_to(self, path: str) -> str:
        return _link(self.names.link_target(path), "", path)

    def _title(self, path: str) -> str:
        note = self.names.note(path)
        return note.title if note is not None else path
