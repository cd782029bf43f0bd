"""Agent-memory signals: whose a note is (a turn's speaker, a `Users/<name>/` folder) and whom a query names.

In an agent-memory vault most notes belong to a person: a conversation turn has a `speaker`
(frontmatter or its `metadata.json`), and everything under `Users/<name>/` is that user's. When
a query names one of these people ("When did Caroline move?"), notes of that person answer it far
more often than notes that merely mention the same things about someone else; and when only
someone else's notes match, the memory most likely does not hold the answer. The pipeline
weighs the named people's notes up in the fusion (`experimental.owner_weight`) and judges quality on
them. Conversation turns are also read as a dialog: the retriever scores a turn's words together
with its neighbours' and takes the better of its own and its dialog-context vector
(`experimental.dialog_words`; explorer.index.local.dialog).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import date
from typing import Any

from explorer.index.backend import Snapshot
from explorer.search.changes import NoteChanges
from explorer.search.fusion import Fused
from explorer.search.memory.stated import stated_tokens
from explorer.search.memory.when import Span, closeness, note_day
from explorer.search.quality import coverage, token_idf
from explorer.search.schema import Contribution, SearchResult
from explorer.text.tokenize import tokenize

_WORD = re.compile(r"\w+", re.UNICODE)
#: Owner names shorter than this (after folding) are ignored: too likely to be ordinary words.
MIN_NAME_CHARS = 3


def note_owner(note: Any) -> str | None:
    """Who a note belongs to: its `speaker` (frontmatter, then metadata), else the `Users/<name>/` folder."""
    for source in (note.frontmatter, note.metadata):
        value = source.get("speaker") if isinstance(source, dict) else None
        if isinstance(value, str) and value.strip():
            return value.strip()
    parts = note.path.split("/")
    if len(parts) > 2 and parts[0].lower() == "users" and parts[1].strip():
        return parts[1]
    return None


def name_words(name: str) -> tuple[str, ...]:
    """A name as folded words (`Jean-Luc` -> ('jean', 'luc'))."""
    return tuple(w.casefold() for w in _WORD.findall(name.replace("_", " ")))


class Owners:
    """Owners of the notes of one index version: name -> paths, and the names a query mentions."""

    def __init__(self, notes: Mapping[str, Any]) -> None:
        self.paths: dict[str, set[str]] = {}
        self.words: dict[str, tuple[str, ...]] = {}
        self.owner_of: dict[str, str] = {}
        for path, note in notes.items():
            self._add(path, note)

    def _add(self, path: str, note: Any) -> None:
        owner = note_owner(note)
        if owner is None:
            return
        key = owner.casefold()
        words = name_words(owner)
        if not words or len("".join(words)) < MIN_NAME_CHARS:
            return
        self.paths.setdefault(key, set()).add(path)
        self.words[key] = words
        self.owner_of[path] = key

    def updated(self, notes: Mapping[str, Any], changed: Iterable[str]) -> Owners:
        """The owners of `notes`, given that only the notes at `changed` differ from those this was built from.

        A new object (searches of the older version may still read this one); its tables are
        copied, not rebuilt, so the cost follows the owned notes and the changed ones.
        """
        out = Owners({})
        out.paths = dict(self.paths)
        out.words = dict(self.words)
        out.owner_of = dict(self.owner_of)
        copied: set[str] = set()
        for path in changed:
            key = out.owner_of.pop(path, None)
            if key is not None:
                if key not in copied:
                    out.paths[key] = set(out.paths[key])
                    copied.add(key)
                out.paths[key].discard(path)
                if not out.paths[key]:
                    del out.paths[key]
                    del out.words[key]
            note = notes.get(path)
            if note is not None:
                owner = note_owner(note)
                new_key = owner.casefold() if owner is not None else None
                if new_key is not None and new_key in out.paths and new_key not in copied:
                    out.paths[new_key] = set(out.paths[new_key])
                    copied.add(new_key)
                out._add(path, note)
        return out

    def named(self, query: str) -> list[str]:
        """Owners (folded names) all of whose name words occur in `query`, when they are not every owner."""
        if len(self.paths) < 2:
            return []
        q = {w.casefold() for w in _WORD.findall(query)}
        hits = sorted(k for k, words in self.words.items() if all(w in q for w in words))
        return hits if len(hits) < len(self.paths) else []

    def favoured(self, names: Iterable[str]) -> frozenset[str]:
        """Paths of the named owners' notes."""
        out: set[str] = set()
        for name in names:
            out |= self.paths.get(name, set())
        return frozenset(out)


def owner_weights(
    base: Callable[[str], float], index: Snapshot, favoured: frozenset[str], boost: float
) -> Callable[[str], float]:
    """The fusion's per-shard weight: `base` (the source type's), times `boost` for the favoured notes."""
    if not favoured or boost == 1.0:
        return base

    def weight(node_id: str) -> float:
        shard = index.shards.get(node_id)
        w = base(node_id)
        return w * boost if shard is not None and shard.path in favoured else w

    return weight


_TURN_NUMBER = re.compile(r"(?:^|/)turn_(\d+)(?:/|\.md$)")


def _turn_number(path: str, frontmatter: Mapping[str, Any], metadata: Mapping[str, Any]) -> int | None:
    """A turn note's number as the index reads it: `turn_id` (frontmatter, then metadata), else `turn_NNNNNN`."""
    for source in (frontmatter, metadata):
        value = source.get("turn_id")
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    m = _TURN_NUMBER.search(path)
    return int(m.group(1)) if m else None


class Dialog:
    """Adjacent turns of the vault's conversations: turn n and n + 1 of the same recorded session (the index's),
    the day each such turn was recorded on (frontmatter `date`, else metadata `timestamp`), and the turn after each."""

    def __init__(
        self, neighbours: Mapping[str, tuple[str, ...]], notes: Mapping[str, Any] | None = None
    ) -> None:
        self.neighbours: dict[str, tuple[str, ...]] = {
            path: tuple(sorted(near)) for path, near in neighbours.items()
        }
        self.days: dict[str, date] = {}
        self.following: dict[str, str] = {}
        """Turn path -> the next turn of its session (the reply to it), when the index holds one."""
        self.sessions: dict[str, object] = {}
        """Turn path -> its recorded session (frontmatter, then metadata `session`)."""
        numbers: dict[str, int] = {}
        for path in self.neighbours:
            note = (notes or {}).get(path)
            if note is None:
                continue
            fm = note.frontmatter if isinstance(note.frontmatter, dict) else {}
            meta = note.metadata if isinstance(note.metadata, dict) else {}
            number = _turn_number(path, fm, meta)
            if number is not None:
                numbers[path] = number
            for source in (fm, meta):
                session = source.get("session")
                if isinstance(session, (int, str)) and not isinstance(session, bool):
                    self.sessions[path] = session
                    break
            day = note_day(fm.get("date")) or note_day(meta.get("timestamp"))
            if day is not None:
                self.days[path] = day
        for path, near in self.neighbours.items():
            own = numbers.get(path)
            after = [p for p in near if own is not None and numbers.get(p, own) > own]
            if after:
                self.following[path] = min(after, key=lambda p: numbers[p])


class MemoryCache:
    """`Owners` and `Dialog` of the current index version, brought up to date when the version changes
    (thread-safe): from the notes that changed since the last version (`changes`), or rebuilt."""

    def __init__(self, changes: NoteChanges | None = None) -> None:
        self._lock = threading.Lock()
        self._changes = changes or NoteChanges()
        self._version = -1
        self._owners = Owners({})
        self._dialog = Dialog({})
        self._neighbours: object = None

    def get(self, snap: Snapshot) -> tuple[Owners, Dialog]:
        """Those of the snapshot's version (updated when the last one asked for was another)."""
        with self._lock:
            if self._version != snap.version:
                changed = self._changes.since(snap, self._version if self._version >= 0 else None)
                if changed is None:
                    self._owners = Owners(snap.notes)
                elif changed:
                    self._owners = self._owners.updated(snap.notes, changed)
                neighbours = snap.neighbours
                if (
                    changed is None
                    or neighbours is not self._neighbours
                    or any(p in self._dialog.neighbours for p in changed)
                ):
                    self._dialog = Dialog(neighbours, snap.notes)
                    self._neighbours = neighbours
                self._version = snap.version
            return self._owners, self._dialog


#: Days after a named span over which a turn's date still fits, less and less (things are told after they happen).
DATE_AFTER_DAYS = 7.0


def lift_by_date(
    fused: list[Fused],
    index: Snapshot,
    dialog: Dialog,
    spans: list[Span],
    share: float,
    after_days: float = DATE_AFTER_DAYS,
) -> list[Fused]:
    """Time in the query: each conversation turn recorded when the query says gains `share` of the best fused score.

    A turn's fit is `closeness` of its recorded day to the spans the query names (1 inside one,
    fading to 0 over `after_days` days after it, 0 before it). The gain is one more contribution
    (retriever `date`, term = the span's words, rank 1, raw score = the fit) on the turn's best
    shard, so contributions still sum to the fused score; turns no ranking retrieved gain nothing.
    Returns the list re-sorted; unchanged when the query names no date or no turn has a day.
    """
    if share <= 0.0 or not spans or not dialog.days or not fused:
        return fused
    top = fused[0].score
    term = "; ".join(s.text for s in spans)
    seen: set[str] = set()
    out = list(fused)
    changed = False
    for i, f in enumerate(out):
        shard = index.shards.get(f.node_id)
        if shard is None or shard.path in seen:
            continue
        seen.add(shard.path)
        day = dialog.days.get(shard.path)
        fit = closeness(day, spans, after_days) if day is not None else 0.0
        if fit <= 0.0:
            continue
        extra = Contribution(
            term=term,
            retriever="date",
            rank=1,
            raw_score=round(fit, 4),
            retriever_weight=share,
            term_weight=1.0,
            source_weight=1.0,
            contribution=share * top * fit,
        )
        out[i] = Fused(f.node_id, f.score + extra.contribution, (*f.contributions, extra), f.best_rank)
        changed = True
    if changed:
        out.sort(key=lambda f: (-f.score, f.best_rank, f.node_id))
    return out


def asks(text: str) -> bool:
    """Whether a turn's text asks: its first paragraph ends with a question mark ("You play any instruments?")."""
    first = text.strip().split("\n\n", 1)[0].rstrip()
    return first.endswith("?")


def lift_answers(
    fused: list[Fused],
    index: Snapshot,
    dialog: Dialog,
    favoured: frozenset[str],
    share: float,
    discount: float,
) -> list[Fused]:
    """A question to a named person: the turn that asks it lends its score to the reply, the next turn.

    When a query names someone, a turn of someone else that asks (`asks`) and whose next turn in
    the session is the named person's matches the query's words, but the answer is in the reply
    ("You play any instruments?" - "Yeah, I play clarinet!"). The reply gains `share` of the asking
    turn's fused score (one more contribution, retriever `answer`, raw score = the asking turn's
    score; a reply no ranking retrieved enters the list with it alone), and the asking turn loses
    `discount` of its own (retriever `asks`, a negative contribution), so contributions still sum
    to the fused score. Unchanged when nobody is named or `share` is 0.
    """
    if share <= 0.0 or not favoured or not dialog.following or not fused:
        return fused
    shards = index.shards
    gains: dict[str, tuple[float, Fused]] = {}
    seen: set[str] = set()
    out = list(fused)
    for i, f in enumerate(out):
        shard = shards.get(f.node_id)
        if shard is None or shard.path in seen:
            continue
        seen.add(shard.path)
        reply = dialog.following.get(shard.path)
        if shard.path in favoured or reply is None or reply not in favoured or not asks(shard.text):
            continue
        if reply not in gains or gains[reply][0] < share * f.score:
            gains[reply] = (share * f.score, f)
        if discount > 0.0:
            loss = Contribution(
                term=reply,
                retriever="asks",
                rank=1,
                raw_score=round(f.score, 6),
                retriever_weight=-discount,
                term_weight=1.0,
                source_weight=1.0,
                contribution=-discount * f.score,
            )
            out[i] = Fused(f.node_id, f.score + loss.contribution, (*f.contributions, loss), f.best_rank)
    if not gains:
        return fused
    best: dict[str, int] = {}
    for i, f in enumerate(out):
        shard = shards.get(f.node_id)
        if shard is not None and shard.path in gains and shard.path not in best:
            best[shard.path] = i
    for reply, (gain, asking) in gains.items():
        asker = shards.get(asking.node_id)
        extra = Contribution(
            term=asker.path if asker is not None else asking.node_id,
            retriever="answer",
            rank=1,
            raw_score=round(asking.score, 6),
            retriever_weight=share,
            term_weight=1.0,
            source_weight=1.0,
            contribution=gain,
        )
        if reply in best:
            f = out[best[reply]]
            out[best[reply]] = Fused(f.node_id, f.score + gain, (*f.contributions, extra), f.best_rank)
            continue
        ids = index.shard_ids(reply)
        if ids:
            out.append(Fused(ids[0], gain, (extra,), asking.best_rank))
    out.sort(key=lambda f: (-f.score, f.best_rank, f.node_id))
    return out


def _name_words(owners: Owners, named: list[str]) -> set[str]:
    """The tokens of the named people's names: left out of what a query asks about them."""
    return {t for name in named for w in owners.words.get(name, ()) for t in tokenize(w)}


def named_match(
    rankings: Iterable[Any], index: Snapshot, owners: Owners, named: list[str], top_n: int = 3
) -> float:
    """How much of the best lexical evidence belongs to the people the query names: 0-1 (1 = all of it).

    From the query's own BM25 ranking, rescored on the query's words without the named people's
    names: among its `top_n` best shards of notes that belong to someone (notes of nobody, such as
    knowledge notes, are skipped), the share of that score held by the named people's notes. 1 when
    no person is named, the query holds nothing but names, or no owned note matched its other words.
    The names are left out because they select whose notes answer: every note of a person that
    holds their name (every turn of theirs does, `Ana: ...`) would otherwise start ahead, and a
    question whose other words match nothing in particular would look like theirs. When a query
    asks about one person and the best matches for what it asks are someone else's, the memory
    most likely does not hold the answer: on LoCoMo, where most unanswerable questions ask one
    speaker about what the other said, this separates them from answerable ones better than
    relevance does.
    """
    if not named:
        return 1.0
    ranking = next((r for r in rankings if r.retriever == "bm25"), None)
    if ranking is None or not ranking.items:
        return 1.0
    names = _name_words(owners, named)
    asked = [t for t in dict.fromkeys(tokenize(ranking.term)) if t not in names]
    if not asked:
        return 1.0
    candidates = [node_id for node_id, _ in ranking.items]
    scores = index.lexical.scores(asked, candidates)
    wanted = set(named)
    mine = total = 0.0
    counted = 0
    for node_id in sorted(candidates, key=lambda n: -scores.get(n, 0.0)):
        raw = scores.get(node_id, 0.0)
        if raw <= 0.0:
            break
        shard = index.shards.get(node_id)
        owner = owners.owner_of.get(shard.path) if shard is not None else None
        if owner is None:
            continue
        total += raw
        if owner in wanted:
            mine += raw
        counted += 1
        if counted == top_n:
            break
    return mine / total if total > 0.0 else 1.0


def named_coverage(
    results: Iterable[SearchResult],
    index: Snapshot,
    owners: Owners,
    named: list[str],
    words: list[str],
    top_n: int = 3,
) -> float:
    """How much of what the query asks the named people's own results hold: 0-1 (1 = all of it).

    `results` are the named people's results, best first, and `words` the query's folded content
    words. The named people's names are left out of `words` (they select whose notes answer; a
    turn of theirs holds their name whatever it says), and of the rest, the IDF-weighted share
    (explorer.search.quality.coverage) found in the statements (explorer.search.memory.stated: questions
    and sentences said to someone else left out) of the context shards of the best of the first
    `top_n` results is returned. 1 when no person is named or the query holds nothing but names;
    0 when the named people have no result. A question about someone whose own notes only hold
    its common words ("What did Ana say about the race?", the race being Ben's) covers little, and
    so does one whose words they only ask the other about ("How did your race go?").
    """
    if not named:
        return 1.0
    names = _name_words(owners, named)
    asked = [w for w in words if w not in names]
    if not asked:
        return 1.0
    n_docs = index.lexical.n_docs()
    df: dict[str, float] = {}

    def idf(word: str) -> float:
        if word not in df:
            df[word] = token_idf(n_docs, index.lexical.doc_freq(word))
        return df[word]

    best = 0.0
    firsts = list(results)[:top_n]
    index.prefetch(r.document_path for r in firsts)
    for result in firsts:
        toks: set[str] = set()
        for shard in result.context_shards:
            toks |= _stated(index, shard.node_id)
        best = max(best, coverage(asked, toks, idf))
    return best


def other_coverage(
    entries: Iterable[tuple[str, float]],
    index: Snapshot,
    owners: Owners,
    named: list[str],
    words: list[str],
    top_n: int = 5,
) -> float:
    """How much of what the query asks the best results of people *other* than the named ones hold: 0-1.

    `entries` are the search's notes best first (path, score). Among the first `top_n` that belong
    to someone not named, the best IDF-weighted coverage (as `named_coverage`, names left out, of
    their statements) of the query's folded content words. 0 when nobody is named or nobody else has a result. When
    someone else's notes hold what is asked and the named person's do not, the memory most likely
    holds it about the other person (on LoCoMo, most unanswerable questions are of that kind).
    """
    if not named:
        return 0.0
    names = _name_words(owners, named)
    asked = [w for w in words if w not in names]
    if not asked:
        return 0.0
    wanted = set(named)
    n_docs = index.lexical.n_docs()

    def idf(word: str) -> float:
        return token_idf(n_docs, index.lexical.doc_freq(word))

    others: list[str] = []
    for path, _score in entries:
        owner = owners.owner_of.get(path)
        if owner is not None and owner not in wanted:
            others.append(path)
            if len(others) == top_n:
                break
    index.prefetch(others)
    best = 0.0
    for path in others:
        toks: set[str] = set()
        for node_id in index.shard_ids(path):
            toks |= _stated(index, node_id)
        best = max(best, coverage(asked, toks, idf))
    return best


def _stated(index: Snapshot, node_id: str) -> set[str]:
    """The tokens of a shard's statements (explorer.search.memory.stated): what its owner says of their own."""
    shard = index.shards.get(node_id)
    return stated_tokens(shard.text) if shard is not None else set()
