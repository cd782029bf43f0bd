"""`explorer mcp`: the vault as a Model Context Protocol server over stdio, for LLM agents.

Tools: `search` (the hybrid pipeline, a brief answer under 8,000 characters by default; see
explorer.cli.answers), `recent` (a user's latest turns), `find` (classic cursor tools),
`get_context` (text around a cursor), `explain` (why a note ranked), `why_not` (why an expected
note is not in the top k, each counterfactual run before it is stated), `stats`,
and, only when the server is started with `--allow-write`, `remember` (append a note in the
agent-memory layout). The index stays live while serving: a VaultWatcher applies file changes
and embeds new shards in the background, and every answer carries an `index` block saying how
fresh the index is. Bad input is a tool error (`is_error` with a message for the model), never
a dead server.
"""

from __future__ import annotations

import inspect
import json
import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from explorer.cli.answers import (
    DEFAULT_EXCERPT,
    MAX_ANSWER_CHARS,
    MAX_EXCERPT,
    brief_search,
    fit,
    recent_turns,
)
from explorer.config import Settings
from explorer.text.files import RealFolder, UnsafePathError, real_folder
from explorer.text.safe import plain_input

#: Most results a search or find may ask for.
MAX_K = 50
#: Most characters a context window may ask for on each side.
MAX_CONTEXT = 20_000
#: Largest note `remember` writes.
MAX_REMEMBER_CHARS = 100_000
#: Longest name-like argument: a path or node_id, a note, a user, a title, a date, a keyword.
MAX_NAME_CHARS = 1_000
#: The longest string each argument may be, checked before any work (items of a list alike). A
#: query is not here: a search reads its first 2,000 characters, why-not refuses a longer one.
ARG_LIMITS = {
    **dict.fromkeys(
        ("target", "note", "user", "title", "after", "before", "on", "mode", "kind", "keywords"),
        MAX_NAME_CHARS,
    ),
    "text": MAX_REMEMBER_CHARS,
}
#: An argument longer than this is named with its size in an error, never quoted.
QUOTE_CHARS = 200

INSTRUCTIONS = """\
Explorer searches an Obsidian-style Markdown vault that serves as long-term memory (notes,
knowledge, beliefs, preferences, past conversation turns).
Typical use: `search` with a natural-language question; read `quality.level` (high / medium / low)
and `no_good_match`; open the best hits with `get_context` (pass a result's `node_id`).
`no_good_match: true` means the vault may not hold the answer, so say so rather than guess.
Answers are brief by default (under 8000 characters): page with `offset`, ask for `detail` only
when you need scores and passages. Use `recent` for a user's latest turns, `find` for exact words
or phrases, `why_not` when a note you expected is missing, `explain` to see why a note ranked.
Every answer has an `index` block: `seconds_since_update` and `watcher` tell how fresh it is."""

SEARCH_DOC = """Search the memory vault (hybrid BM25 + embeddings, two passes, quality check).

Use it first for any question about what the vault holds; then `get_context` on a result to read it.
Args:
  query: natural language or keywords, with optional Obsidian-style operators:
    tag:name  path:folder  file:name  section:heading  "exact phrase"  -excluded
    [property:value]  [property]  after:DATE  before:DATE  on:DATE  recent:30d
    vault:NAME  vault:*  (a team memory on Milvus: other vaults of the collection; their notes
    come back as vault:NAME/PATH, which get_context reads)
    e.g. 'hamster wheel size', 'tag:pets "cage size"', 'espresso path:Coffee -cold',
    '[status:draft] budget', 'what did Alice decide on:"7 May 2023"'.
  k: number of results, 1-50 (default 10).
  mode: "hybrid" (default: both retrievers, two passes), "quick" (one pass, faster),
    "lexical" (BM25 words only, no embeddings).
  after / before / on: keep only memories dated after, before or within a day ("2023-05-07",
    "7 May 2023"), a month ("2023-05", "May 2023"), a year ("2023") or a relative period
    ("today", "yesterday", "last week", "last month", "this year"). A memory's date is its
    frontmatter date/created, a turn's timestamp, else its file time. Use them when the question
    names a time ("what did we discuss in May 2023?").
  recent_days: prefer newer memories gently (half-life in days, e.g. 30); 0 or omitted: off.
  offset: skip this many results (paging: pass the answer's `next_offset`); offset + k <= 50.
  excerpt_chars: characters of each result's excerpt, 0-2000 (default 200).
  detail: false (default) for a brief answer under 8000 characters; true for the full
    SearchResults JSON of the page (scores, per-term explanations, passages with cursors, passes,
    timings; often 20-50k characters: ask for it only when you need those).
Returns `quality` {level: high / medium / low, suggestion}, `no_good_match` (true when nothing
relevant was found, or when a query naming a person finds that the matching memories are someone
else's: then say you do not know rather than guess), `advisory` (a hint when searching more will
not help), `results` (rank, node_id, document_path, title, source_type, date and date_from when known, excerpt),
`next_offset` (null when there is no more), `cut` (present when results were left out to stay
under 8000 characters) and `index`."""

RECENT_DOC = """The latest conversation turns of a user, newest first (by date, then turn number).

Use it to pick up where a conversation left off, or for "what did we talk about last"; use
`search` for a topic.
Args:
  user: the user folder under Users/ (default: the server's --user, else the only user).
  n: number of turns, 1-50 (default 5).
  excerpt_chars: characters of each turn's excerpt, 0-2000 (default 200).
Returns `turns` (node_id, path, title, turn number, date, user, excerpt) under 8000 characters."""

FIND_DOC = """Classic exact-word tools with a cursor per hit (no embeddings).

Use it for exact words, names, codes or phrases, or every place a word occurs; use `search` for
questions and meaning.
Args:
  keywords: one or more words, e.g. ["espresso", "grind"]; items such as "tag:pets",
    "path:Coffee", "file:name", "section:heading" or "#tag" filter the notes, as in `search`.
  mode: "tfidf" (rank notes by the words, default), "phrase" (the words in this order,
    falling back to proximity), "and" (all words within `window` words), "fuzzy" (any word,
    tolerating typos and partial words).
  max_results: 1-50 (default 10). window: proximity window in words for "and"/"phrase".
Returns hits with path, node_id, cursor, score, matched keywords and a snippet."""

CONTEXT_DOC = """Read the text around a position in one note.

Use it after `search` or `find` to read a result in full, or to read on past a window's `end`.
Args:
  target: a node_id from a search or find result (e.g. 'Coffee/espresso.md#Grind > Fine') or a
    vault-relative note path ('Coffee/espresso.md'; '.md' may be omitted).
  cursor: character offset in the note (e.g. a hit's `cursor`); default: start of the node.
  before, after: characters to include on each side, 0-20000 (default 1000).
  window: about this many characters in all, half before and half after the cursor (overrides
    before/after; the ends snap to whole words).
Returns the window `text`, its `start`/`end` offsets, `note_chars` (note length) and
highlights; call again with a larger `after` or a cursor near `end` to read on. `embeds` holds
the text of each `![[embed]]` in the window (`status` "embedded" with its source `node_id`, or
why not: missing, cycle, depth, file, limit)."""

EXPLAIN_DOC = """Why a note ranked where it did for a query.

Use it to judge how much to trust a result (which words or meanings matched it).
Args:
  query: the search query.
  target: the note's node_id or path (as in a search result).
Returns its rank, score and, per search term and retriever (bm25, dense), the rank, raw score
and RRF contribution, plus rerank movement when reranking ran."""

WHY_NOT_DOC = """Why a note you expected is not in the top k of a search, and what would bring it there.

Use it when a note you know exists is missing from `search`, before concluding the vault lacks it.
Args:
  query: the search query, as given to `search`.
  note: the expected note: a path, a link target ('Kyoto'), a title, or a unique part of a path.
  k: the list length it should reach, 1-50 (default: the server's top k).
Returns `rank` (where it ranks today, in a list 50 long; null when not in it), `summary`, `facts`
(a filter that leaves it out, its best passage's cosine under the dense floor, its place past a
retriever's candidate depth, query words it lacks) and `changes`: counterfactuals that were each
run as a search before being stated ("with the floor at 0.35, it would rank #6", "left out by
-draft — without it, ...", "if it contained “proofing” it would rank #3"); `not_enough` holds
changes that were run and did not reach the top k; `stages` traces each retriever's list."""

STATS_DOC = """Index counts and state: notes, shards, vectors, shards still without vectors,
embedding model state, skipped files with the reason, and index freshness.

Use it when results look thin or stale: it says whether the index is still embedding, what was
skipped and why."""

REMEMBER_DOC = """Write a new memory into the vault (atomically; searchable at once).

Use it to keep something worth recalling in a later conversation: a turn summary, or a fact.

Args:
  text: the Markdown body to remember, e.g. 'Alice prefers oat milk in her coffee.'
  title: a short topic line, e.g. 'Coffee preference'.
  kind: "turn" (default: a conversation-turn note, Users/<user>/turns/turn_NNNNNN/context.md) or
    "knowledge" (a knowledge note, Users/<user>/Knowledge/<title>.md; an existing one gets the
    text appended as a dated section).
  user: the vault's user folder (default: the server's --user, else the only folder under
    Users/, else "agent").
  keywords: optional list of keywords stored with a turn.
Returns the new note's path and node_id."""


class ToolInputError(ValueError):
    """A tool argument is wrong; the message tells the model what to send instead."""


class MemoryService:
    """The system an MCP server (or any agent adapter) serves: index, pipeline, watcher, freshness.

    Args:
        vault: The vault folder.
        settings: Loaded settings.
        allow_write: Enable `remember`.
        user: Default user folder for `remember`.
        watch: Keep the index live with a VaultWatcher while serving.
    """

    def __init__(
        self,
        vault: Path,
        settings: Settings,
        *,
        allow_write: bool = False,
        user: str | None = None,
        watch: bool = True,
        on_message: Callable[[str], None] | None = None,
    ) -> None:
        from explorer.engine import Session, SessionHooks

        self.vault = Path(vault).resolve()
        self.settings = settings
        self.allow_write = allow_write
        self.user = user
        self._say = on_message or (lambda _m: None)
        self.session = Session(
            self.vault,
            settings,
            hooks=SessionHooks(on_error=self._on_error),
            on_message=self._say,
        )
        self.session.open()
        self._write_lock = threading.Lock()
        # The watcher keeps the index live; one-shot `explorer search` of this vault is answered
        # by this process while it serves.
        self.session.start(watch=watch, embed=settings.index.embeddings, serve=True)

    @property
    def index(self) -> Any:
        """The session's open index."""
        return self.session.index

    @property
    def pipeline(self) -> Any:
        """The session's pipeline."""
        return self.session.pipeline

    @property
    def watcher(self) -> Any:
        """The session's watcher (None with watching off)."""
        return self.session.watcher

    @property
    def updated_at(self) -> float:
        """When the index last changed."""
        return self.session.updated_at

    def _on_error(self, message: str) -> None:
        self._say(message if message.startswith("embedding") else f"watcher: {message}")

    def close(self) -> None:
        """Stop serving, the watcher and the background embedding; close the index.

        Every thread that may be inside the model's runtime has ended when this returns: one
        still running there at interpreter exit aborts the process.
        """
        self.session.close()

    # -- freshness ----------------------------------------------------------------------
    def freshness(self) -> dict[str, Any]:
        """How current the index is: its version, when it last changed, the watcher's state, vectors missing."""
        st = self.index.stats()
        return {
            "version": st.version,
            "updated_at": datetime.fromtimestamp(self.updated_at, UTC).isoformat(timespec="seconds"),
            "seconds_since_update": round(time.time() - self.updated_at, 1),
            "watcher": self.watcher.state if self.watcher is not None else "off (index as of server start)",
            "notes": st.notes,
            "shards_without_vectors": st.pending,
            "model_state": st.model_state,
        }

    # -- tools --------------------------------------------------------------------------
    def search(
        self,
        query: str,
        k: int = 10,
        mode: str = "hybrid",
        after: str | None = None,
        before: str | None = None,
        on: str | None = None,
        recent_days: float | None = None,
        *,
        offset: int = 0,
        excerpt_chars: int = DEFAULT_EXCERPT,
        detail: bool = False,
    ) -> dict[str, Any]:
        """Results `offset + 1`..`offset + k` for `query`: briefly under MAX_ANSWER_CHARS (explorer.cli.answers),
        or with `detail` as the pipeline's SearchResults JSON (that page's results only).

        `after` / `before` / `on` and `recent_days` join the query as its `after:` / `before:` /
        `on:` / `recent:` operators; a date that does not parse is a tool error that says why.
        """
        from explorer.search.core.pipeline import QueryError

        _check_k(k, "k")
        if mode not in ("hybrid", "quick", "lexical"):
            raise ToolInputError(f"mode must be 'hybrid', 'quick' or 'lexical', got {mode!r}")
        _check_int(offset, "offset", 0, MAX_K - 1)
        _check_int(excerpt_chars, "excerpt_chars", 0, MAX_EXCERPT)
        if offset + k > MAX_K:
            raise ToolInputError(f"offset + k must be at most {MAX_K}, got {offset} + {k}")
        query = f"{query} {_time_operators(after, before, on, recent_days, self.pipeline.today())}".strip()
        try:
            res = self.pipeline.search(
                query,
                k=offset + k,
                dense=mode != "lexical",
                two_pass=False if mode == "quick" else None,
                rerank=False if mode == "quick" else None,
            )
        except QueryError as exc:
            raise ToolInputError(str(exc)) from exc
        if not detail:
            return brief_search(
                res,
                self.index,
                offset=offset,
                k=k,
                chars=excerpt_chars,
                no_good_match=_no_good_match(res),
                freshness=self.freshness(),
            )
        out = res.to_dict()
        out.pop("context_shards", None)  # the same passages are inside each result
        out["results"] = out["results"][offset : offset + k]
        out["offset"] = offset
        out["no_good_match"] = _no_good_match(res)
        out["index"] = self.freshness()
        return out

    def recent(
        self, user: str | None = None, n: int = 5, excerpt_chars: int = DEFAULT_EXCERPT
    ) -> dict[str, Any]:
        """The latest `n` conversation turns of `user` (the only user when there is one), newest first."""
        _check_int(n, "n", 1, MAX_K)
        _check_int(excerpt_chars, "excerpt_chars", 0, MAX_EXCERPT)
        who = user.strip() if isinstance(user, str) and user.strip() else (self.user or self._only_user())
        if who is not None and ("/" in who or who in (".", "..")):
            raise ToolInputError(f"user must be a folder name under Users/, got {who!r}")
        turns = recent_turns(self.index, who, n, excerpt_chars)
        answer = {"user": who, "turns": turns, "index": self.freshness()}
        if not turns:
            answer["note"] = (
                f"no conversation turns under Users/{who}/turns/"
                if who
                else "no conversation turns in this vault"
            )
        return fit(
            answer, "turns", MAX_ANSWER_CHARS, lambda kept: f"ask for n={kept}, or a smaller excerpt_chars"
        )

    def find(
        self, keywords: list[str], mode: str = "tfidf", max_results: int = 10, window: int | None = None
    ) -> dict[str, Any]:
        """One classic tool's hits."""
        from explorer.index.classic import ClassicQueryError
        from explorer.search.core.classic import find

        words = [w for w in (keywords or []) if isinstance(w, str) and w.strip()]
        if not words:
            raise ToolInputError('keywords must hold at least one word, e.g. ["espresso", "grind"]')
        if mode not in ("tfidf", "phrase", "and", "fuzzy"):
            raise ToolInputError(f"mode must be 'tfidf', 'phrase', 'and' or 'fuzzy', got {mode!r}")
        _check_k(max_results, "max_results")
        if window is not None and (not isinstance(window, int) or window < 1):
            raise ToolInputError(f"window must be 1 or more words, got {window!r}")
        try:
            result = find(self.index, self.settings, mode, words, max_results, None, window)
        except ClassicQueryError as exc:
            raise ToolInputError(str(exc)) from exc
        return {**result.to_dict(), "index": self.freshness()}

    def get_context(
        self,
        target: str,
        cursor: int | None = None,
        before: int = 1000,
        after: int = 1000,
        window: int | None = None,
    ) -> dict[str, Any]:
        """The window around `cursor` in the note `target` names (`window`: that many characters in all, half each side)."""
        from explorer.index.targets import ContextError, context_for
        from explorer.index.transclusion import with_embeds

        if window is not None:
            _check_int(window, "window", 0, 2 * MAX_CONTEXT)
            before, after = window // 2, window - window // 2
        for name, value in (("before", before), ("after", after)):
            if not isinstance(value, int) or value < 0 or value > MAX_CONTEXT:
                raise ToolInputError(f"{name} must be 0-{MAX_CONTEXT} characters, got {value!r}")
        target = self._inside(target)
        try:
            found = with_embeds(self.index, context_for(self.index, target, cursor, before, after))
        except ContextError as exc:
            raise ToolInputError(str(exc)) from exc
        return {**found.to_dict(), "index": self.freshness()}

    def explain(self, query: str, target: str) -> dict[str, Any]:
        """Rank, score and contributions of one note for `query`."""
        from explorer.index.targets import ContextError, resolve_target
        from explorer.search.core.pipeline import QueryError

        target = self._inside(target)
        try:
            path = resolve_target(self.index, target).path
        except ContextError as exc:
            raise ToolInputError(str(exc)) from exc
        try:
            res = self.pipeline.search(query, k=MAX_K, record=False)
        except QueryError as exc:
            raise ToolInputError(str(exc)) from exc
        for rank, r in enumerate(res.results, 1):
            if r.document_path == path:
                return {
                    "query": res.query,
                    "path": path,
                    "found": True,
                    "rank": rank,
                    "results": len(res.results),
                    "node_id": r.node_id,
                    "score": r.score,
                    "relevance": r.relevance,
                    "pass": r.pass_,
                    "source": r.source,
                    "reason": r.reason,
                    "bm25_rank": r.bm25_rank,
                    "embedding_rank": r.embedding_rank,
                    "explanation": r.explanation.to_dict() if r.explanation else None,
                    "index": self.freshness(),
                }
        report = self._why_not(res, path)
        return {
            "query": res.query,
            "path": path,
            "found": False,
            "results": len(res.results),
            "verdict": report["verdict"],
            "stages": report["stages"],
            "index": self.freshness(),
        }

    def why_not(self, query: str, note: str, k: int | None = None) -> dict[str, Any]:
        """Why `note` is not in the top k for `query`, and what would bring it there, each change run first."""
        from explorer.engine import make_pipeline
        from explorer.search.core.pipeline import QueryError
        from explorer.search.explain.whynot import prove

        if k is not None:
            _check_k(k, "k")
        note = self._inside(note)
        try:
            proof = prove(
                self.pipeline, query, note, k=k or self.settings.search.top_k, make_pipeline=make_pipeline
            )
        except QueryError as exc:
            raise ToolInputError(str(exc)) from exc
        if proof.path is None:
            raise ToolInputError(proof.summary)
        return {**proof.to_dict(), "index": self.freshness()}

    def _why_not(self, res: Any, name: str) -> dict[str, Any]:
        from explorer.search.explain.whynot import why_not

        report = why_not(self.index, res, name)
        if report.path is None:
            raise ToolInputError(report.verdict)
        return {
            "note": report.path,
            "verdict": report.verdict,
            "stages": [{"stage": r.stage, "outcome": r.outcome, "present": r.found} for r in report.rows],
        }

    def stats(self) -> dict[str, Any]:
        """Counts, model state, skipped files and freshness."""
        st = self.index.stats()
        return {
            "vault": str(self.vault),
            **st.counts(),
            "skipped": dict(sorted(self.index.skipped.items())),
            "read_only": not self.allow_write,
            "index": self.freshness(),
        }

    def remember(
        self,
        text: str,
        title: str = "",
        kind: str = "turn",
        user: str | None = None,
        keywords: list[str] | None = None,
    ) -> dict[str, Any]:
        """Write a turn or knowledge note atomically, index it at once, return its path."""
        if not self.allow_write:
            raise ToolInputError("this server is read-only: start it with --allow-write to enable remember")
        if not isinstance(text, str) or not text.strip():
            raise ToolInputError("text must be non-empty Markdown")
        if len(text) > MAX_REMEMBER_CHARS:
            raise ToolInputError(f"text is {len(text):,} characters; the limit is {MAX_REMEMBER_CHARS:,}")
        if kind not in ("turn", "knowledge"):
            raise ToolInputError(f"kind must be 'turn' or 'knowledge', got {kind!r}")
        # Control characters (a NUL makes the note read as binary, and skipped) are dropped on the way in.
        text = plain_input(text)
        if not text.strip():
            raise ToolInputError("text must be non-empty Markdown (it held only control characters)")
        who = _safe_name(user or self.user or self._only_user() or "agent", "user")
        title = " ".join(plain_input(str(title or "")).split())[:120]
        words = [w for k in (keywords or [])[:100] if (w := " ".join(plain_input(str(k)).split()))][:20]
        now = datetime.now(UTC).replace(microsecond=0)
        with self._write_lock:
            try:
                if kind == "turn":
                    rel = self._write_turn(who, text, title, words, now)
                else:
                    rel = self._write_knowledge(who, text, title, now)
            except UnsafePathError as exc:
                raise ToolInputError(
                    f"not written: {exc}; remember writes only real files and folders inside the vault, "
                    "never through a symbolic link"
                ) from None
            report = self.session.refresh(paths=[rel], reread=True)
        if rel in report.skipped:
            raise ToolInputError(f"{rel} was written but cannot be indexed: {report.skipped[rel]}")
        shards = self.index.shards_by_path.get(rel, [])
        return {
            "path": rel,
            "node_id": shards[0] if shards else rel,
            "kind": kind,
            "written_at": now.isoformat(),
            "index": self.freshness(),
        }

    def _folder(self, who: str, name: str) -> RealFolder:
        """Users/<who>/<name>, made as needed, reached from the vault with no symbolic link on the way."""
        return real_folder(self.vault, f"Users/{who}/{name}", create=True)

    def _write_turn(self, who: str, text: str, title: str, keywords: list[str], now: datetime) -> str:
        with self._folder(who, "turns") as turns:
            numbers = [int(m.group(1)) for n in turns.names() if (m := re.fullmatch(r"turn_(\d+)", n))]
            number = max(numbers, default=0) + 1
            while not turns.make(f"turn_{number:06d}"):
                number += 1
            with turns.folder(f"turn_{number:06d}") as folder:
                self._write_turn_files(folder, number, text, title, keywords, now)
        return f"Users/{who}/turns/turn_{number:06d}/context.md"

    def _write_turn_files(
        self, folder: RealFolder, number: int, text: str, title: str, keywords: list[str], now: datetime
    ) -> None:
        front = [
            "---",
            f"turn_id: {number}",
            f"date: {now.date().isoformat()}",
            f"time: {json.dumps(now.strftime('%H:%M'))}",
        ]
        if title:
            front.append(f"topic: {json.dumps(title)}")
        front += ["tags: [agent/turn]", "---", ""]
        body = (f"# {title}\n\n" if title else "") + text.strip() + "\n"
        meta = {"turn_id": number, "topic": title, "keywords": keywords, "timestamp": now.isoformat()}
        folder.write("metadata.json", json.dumps(meta, indent=2) + "\n")
        folder.write("context.md", "\n".join(front) + body)

    def _write_knowledge(self, who: str, text: str, title: str, now: datetime) -> str:
        from explorer.vault.scan import readable_text

        if not title:
            raise ToolInputError("a knowledge note needs a title (its file name)")
        name = f"{_safe_name(title, 'note')}.md"
        rel = f"Users/{who}/Knowledge/{name}"
        limit = self.settings.vault.max_note_bytes
        section = f"\n## {now.date().isoformat()}\n\n{text.strip()}\n"
        with self._folder(who, "Knowledge") as folder:
            old = folder.read_bytes(name, limit)
            if old is None:
                content = f"---\ndate: {now.date().isoformat()}\n---\n\n# {title}\n{section}"
            else:
                # Appending to a note the index skips would answer success for a memory no search finds.
                current, why = readable_text(old, limit)
                if current is None:
                    raise ToolInputError(
                        f"{rel} is not indexed ({why}): nothing appended; give another title"
                    )
                content = current + ("" if current.endswith("\n") else "\n") + section
            if len(content.encode("utf-8")) > limit:
                raise ToolInputError(
                    f"{rel} would pass {limit:,} bytes (setting vault.max_note_bytes) and no longer be "
                    "indexed: nothing appended; give another title"
                )
            folder.write(name, content)
        return rel

    def _only_user(self) -> str | None:
        users = self.vault / "Users"
        names = (
            [p.name for p in users.iterdir() if p.is_dir() and not p.name.startswith(".")]
            if users.is_dir() and not users.is_symlink()
            else []
        )
        return names[0] if len(names) == 1 else None

    def _inside(self, target: Any) -> str:
        """A target as a vault-relative name; a path that leaves the vault is refused."""
        if not isinstance(target, str) or not target.strip():
            raise ToolInputError("give a node_id or a vault-relative note path")
        t = target.strip()
        name, sep, frag = t.partition("#")
        candidate = Path(name)
        if candidate.is_absolute():
            try:
                rel = candidate.resolve().relative_to(self.vault)
            except ValueError:
                raise ToolInputError(f"{name} is outside the vault; give a vault-relative path") from None
            return rel.as_posix() + sep + frag
        if ".." in Path(name.replace("\\", "/")).parts:
            resolved = (self.vault / name).resolve()
            if resolved != self.vault and self.vault not in resolved.parents:
                raise ToolInputError(f"{name} is outside the vault; give a vault-relative path")
        return t


def _check_int(value: Any, name: str, least: int, most: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise ToolInputError(f"{name} must be a whole number from {least} to {most}, got {value!r}")


def _check_k(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_K:
        raise ToolInputError(f"{name} must be a whole number from 1 to {MAX_K}, got {value!r}")


def _time_operators(
    after: str | None, before: str | None, on: str | None, recent_days: float | None, today: Any
) -> str:
    """The query operators of the search tool's time arguments; ToolInputError for a bad one."""
    from explorer.text.dates import DateError, parse_period

    parts = []
    for name, value in (("after", after), ("before", before), ("on", on)):
        if value is None or not str(value).strip():
            continue
        value = " ".join(str(value).split())
        if '"' in value:
            raise ToolInputError(f"{name}: a date has no quote marks, got {value!r}")
        try:
            parse_period(value, today)
        except DateError as exc:
            raise ToolInputError(f"{name}: {exc}") from None
        parts.append(f'{name}:"{value}"')
    if recent_days is not None:
        if (
            isinstance(recent_days, bool)
            or not isinstance(recent_days, (int, float))
            or not 0 <= recent_days <= 36500
        ):
            raise ToolInputError(f"recent_days must be a number of days from 0 to 36500, got {recent_days!r}")
        parts.append(f"recent:{float(recent_days):.3f}d")
    return " ".join(parts)


def _no_good_match(res: Any) -> bool:
    q = res.quality
    if q is None:
        return True
    return bool(q.factors.get("no_good_match", q.level == "low"))


def _safe_name(name: str, what: str) -> str:
    cleaned = re.sub(r"[^\w .-]+", "", str(name), flags=re.UNICODE).strip(" .")
    cleaned = re.sub(r"\s+", " ", cleaned)[:80]
    if not cleaned:
        raise ToolInputError(f"{what} {name!r} has no usable characters")
    return cleaned


def _check_sizes(named: dict[str, Any]) -> None:
    """ToolInputError, naming the argument and its size, for a string argument (or list item) over
    its limit in ARG_LIMITS."""
    for name, value in named.items():
        limit = ARG_LIMITS.get(name)
        if limit is None:
            continue
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, str) and len(item) > limit:
                what = f"an item of {name}" if isinstance(value, list) else name
                raise ToolInputError(f"{what} is {len(item):,} characters; the limit is {limit:,}")


def _sized(message: str, named: dict[str, Any]) -> str:
    """`message` with every long argument it quotes replaced by the argument's name and size, and
    cut to MAX_NAME_CHARS (an agent reads the error, not its own argument back)."""
    for name, value in named.items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and len(item) > QUOTE_CHARS:
                shown = f"<{name}: {len(item):,} characters>"
                for quoted in (repr(item), item, " ".join(item.split())):
                    message = message.replace(quoted, shown)
    if len(message) > MAX_NAME_CHARS:
        message = message[:MAX_NAME_CHARS] + f"… (error cut, {len(message):,} characters)"
    return message


# -- the MCP server ----------------------------------------------------------------------------
def build_server(service: MemoryService) -> Any:
    """An MCPServer whose tools call `service`; anticipated failures become tool errors."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import ToolAnnotations

    server = MCPServer(name="explorer", instructions=INSTRUCTIONS, version=_version())
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    def guarded(fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        signature = inspect.signature(fn)

        def call(*args: Any, **kwargs: Any) -> dict[str, Any]:
            named = dict(signature.bind_partial(*args, **kwargs).arguments)
            try:
                _check_sizes(named)
                return fn(*args, **kwargs)
            except ToolInputError as exc:
                raise ToolError(_sized(str(exc), named)) from exc
            except Exception as exc:  # the server must outlive any one call
                raise ToolError(_sized(f"{type(exc).__name__}: {exc}", named)) from exc

        return call

    def search(
        query: str,
        k: int = 10,
        mode: Literal["hybrid", "quick", "lexical"] = "hybrid",
        after: str | None = None,
        before: str | None = None,
        on: str | None = None,
        recent_days: float | None = None,
        offset: int = 0,
        excerpt_chars: int = DEFAULT_EXCERPT,
        detail: bool = False,
    ) -> dict[str, Any]:
        return guarded(service.search)(
            query,
            k,
            mode,
            after,
            before,
            on,
            recent_days,
            offset=offset,
            excerpt_chars=excerpt_chars,
            detail=detail,
        )

    def recent(user: str | None = None, n: int = 5, excerpt_chars: int = DEFAULT_EXCERPT) -> dict[str, Any]:
        return guarded(service.recent)(user, n, excerpt_chars)

    def find(
        keywords: list[str],
        mode: Literal["tfidf", "phrase", "and", "fuzzy"] = "tfidf",
        max_results: int = 10,
        window: int | None = None,
    ) -> dict[str, Any]:
        return guarded(service.find)(keywords, mode, max_results, window)

    def get_context(
        target: str,
        cursor: int | None = None,
        before: int = 1000,
        after: int = 1000,
        window: int | None = None,
    ) -> dict[str, Any]:
        return guarded(service.get_context)(target, cursor, before, after, window)

    def explain(query: str, target: str) -> dict[str, Any]:
        return guarded(service.explain)(query, target)

    def why_not(query: str, note: str, k: int | None = None) -> dict[str, Any]:
        return guarded(service.why_not)(query, note, k)

    def stats() -> dict[str, Any]:
        return guarded(service.stats)()

    for fn, doc in (
        (search, SEARCH_DOC),
        (recent, RECENT_DOC),
        (find, FIND_DOC),
        (get_context, CONTEXT_DOC),
        (explain, EXPLAIN_DOC),
        (why_not, WHY_NOT_DOC),
        (stats, STATS_DOC),
    ):
        server.add_tool(fn, description=doc, annotations=read_only, structured_output=False)

    if service.allow_write:

        def remember(
            text: str,
            title: str = "",
            kind: Literal["turn", "knowledge"] = "turn",
            user: str | None = None,
            keywords: list[str] | None = None,
        ) -> dict[str, Any]:
            return guarded(service.remember)(text, title, kind, user, keywords)

        server.add_tool(
            remember,
            description=REMEMBER_DOC,
            annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False),
            structured_output=False,
        )
    return server


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("explorer")
    except Exception:  # noqa: BLE001 - not installed as a distribution
        return "0"


def run_mcp(
    vault: Path, settings: Settings, *, allow_write: bool = False, user: str | None = None, watch: bool = True
) -> int:
    """Serve `vault` over stdio until the client closes the connection."""
    import sys

    def say(message: str) -> None:
        print(f"explorer: {message}", file=sys.stderr, flush=True)

    service = MemoryService(vault, settings, allow_write=allow_write, user=user, watch=watch, on_message=say)
    try:
        build_server(service).run("stdio")
    finally:
        service.close()
    return 0
