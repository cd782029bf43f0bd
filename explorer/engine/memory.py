"""The memory service: the system an agent adapter serves (the MCP server, explorer.cli.mcp), beside
the engine session it runs.

Its tools are its methods marked `@tool` (explorer.engine.tools), each one definition: name, input
schema (the signature), what an agent reads (the docstring) and handler (the body). `search` (the
hybrid pipeline, a brief answer under 8,000 characters by default; see explorer.engine.answers),
`recent` (a user's latest turns), `find` (classic cursor tools), `get_context` (text around a
cursor), `explain` (why a note ranked), `why_not` (why an expected note is not in the top k, each
counterfactual run before it is stated), `stats`, and, only when writing is allowed, `remember`
(append a note in the agent-memory layout, explorer.engine.memory_notes). The index stays live while
serving: the session's VaultWatcher applies file changes and embeds new shards in the background,
and every answer carries an `index` block saying how fresh the index is. A bad argument raises
ToolInputError with a message for the model.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from explorer.config import Settings
from explorer.engine.answers import (
    DEFAULT_EXCERPT,
    MAX_ANSWER_CHARS,
    MAX_EXCERPT,
    brief_search,
    fit,
    recent_turns,
)
from explorer.engine.memory_notes import only_user, safe_name, write_knowledge, write_turn
from explorer.engine.session import Session, SessionHooks
from explorer.engine.tools import (
    MAX_CONTEXT,
    MAX_K,
    MAX_REMEMBER_CHARS,
    ToolInputError,
    ToolSpec,
    check_int,
    check_k,
    tool,
    tool_spec,
)
from explorer.text.dates import TimeFilters
from explorer.text.files import UnsafePathError
from explorer.text.safe import plain_input

if TYPE_CHECKING:
    from explorer.index.backend import IndexBackend
    from explorer.search.core.pipeline import SearchPipeline

#: Most keywords `remember` stores with a turn.
MAX_KEYWORDS = 20
#: Longest title `remember` writes (a turn's topic, a knowledge note's heading).
MAX_TITLE_CHARS = 120


class MemoryService:
    """The system an MCP server (or any agent adapter) serves: index, pipeline, watcher, freshness.

    Args:
        vault: The vault folder.
        settings: Loaded settings.
        allow_write: Enable `remember`.
        user: Default user folder for `remember`.
        watch: Keep the index live with a VaultWatcher while serving.
        on_message: Where the session's notices and the watcher's errors are said.
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
    def index(self) -> IndexBackend:
        """The session's open index."""
        index = self.session.index
        assert index is not None  # opened by __init__
        return index

    @property
    def pipeline(self) -> SearchPipeline:
        """The session's pipeline."""
        pipeline = self.session.pipeline
        assert pipeline is not None  # built by __init__
        return pipeline

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

    def tools(self) -> Iterator[tuple[Callable[..., dict[str, Any]], ToolSpec]]:
        """Each tool this service offers (`remember` only when writing is allowed), as its bound
        handler and its ToolSpec, in the order they are declared (a subclass's own tools after)."""
        specs: dict[str, ToolSpec] = {}
        for cls in reversed(type(self).__mro__):
            for name, attr in vars(cls).items():
                spec = tool_spec(attr)
                if spec is not None:
                    specs[name] = spec
                else:
                    specs.pop(name, None)  # overridden by a method that is no tool
        for name, spec in specs.items():
            if self.allow_write or not spec.writes:
                yield getattr(self, name), spec

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
    @tool()
    def search(
        self,
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
        """Search the memory vault (hybrid BM25 + embeddings, two passes, quality check).

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
        # Results offset + 1..offset + k: briefly under MAX_ANSWER_CHARS (explorer.engine.answers), or
        # with `detail` as the pipeline's SearchResults JSON (that page's results only). The time
        # arguments are filters beside the query (explorer.text.dates.TimeFilters), never cut with it.
        from explorer.search.core.pipeline import QueryError

        check_k(k, "k")
        if mode not in ("hybrid", "quick", "lexical"):
            raise ToolInputError(f"mode must be 'hybrid', 'quick' or 'lexical', got {mode!r}")
        check_int(offset, "offset", 0, MAX_K - 1)
        check_int(excerpt_chars, "excerpt_chars", 0, MAX_EXCERPT)
        if offset + k > MAX_K:
            raise ToolInputError(f"offset + k must be at most {MAX_K}, got {offset} + {k}")
        when = _time_filters(after, before, on, recent_days, self.pipeline.today())
        try:
            res = self.pipeline.search(
                query.strip(),
                k=offset + k,
                dense=mode != "lexical",
                two_pass=False if mode == "quick" else None,
                rerank=False if mode == "quick" else None,
                when=when,
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

    @tool()
    def recent(
        self, user: str | None = None, n: int = 5, excerpt_chars: int = DEFAULT_EXCERPT
    ) -> dict[str, Any]:
        """The latest conversation turns of a user, newest first (by date, then turn number).

        Use it to pick up where a conversation left off, or for "what did we talk about last"; use
        `search` for a topic.
        Args:
          user: the user folder under Users/ (default: the server's --user, else the only user).
          n: number of turns, 1-50 (default 5).
          excerpt_chars: characters of each turn's excerpt, 0-2000 (default 200).
        Returns `turns` (node_id, path, title, turn number, date, user, excerpt) under 8000 characters."""
        check_int(n, "n", 1, MAX_K)
        check_int(excerpt_chars, "excerpt_chars", 0, MAX_EXCERPT)
        who = user.strip() if isinstance(user, str) and user.strip() else (self.user or only_user(self.vault))
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

    @tool()
    def find(
        self,
        keywords: list[str],
        mode: Literal["tfidf", "phrase", "and", "fuzzy"] = "tfidf",
        max_results: int = 10,
        window: int | None = None,
    ) -> dict[str, Any]:
        """Classic exact-word tools with a cursor per hit (no embeddings).

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
        from explorer.index.backend import ClassicQueryError
        from explorer.search.core.classic import find

        if isinstance(keywords, str):  # a library caller's one keyword, not its characters
            keywords = [keywords]
        words = [w for w in (keywords or []) if isinstance(w, str) and w.strip()]
        if not words:
            raise ToolInputError('keywords must hold at least one word, e.g. ["espresso", "grind"]')
        if mode not in ("tfidf", "phrase", "and", "fuzzy"):
            raise ToolInputError(f"mode must be 'tfidf', 'phrase', 'and' or 'fuzzy', got {mode!r}")
        check_k(max_results, "max_results")
        if window is not None and (not isinstance(window, int) or window < 1):
            raise ToolInputError(f"window must be 1 or more words, got {window!r}")
        try:
            result = find(self.index, self.settings, mode, words, max_results, None, window)
        except ClassicQueryError as exc:
            raise ToolInputError(str(exc)) from exc
        return {**result.to_dict(), "index": self.freshness()}

    @tool()
    def get_context(
        self,
        target: str,
        cursor: int | None = None,
        before: int = 1000,
        after: int = 1000,
        window: int | None = None,
    ) -> dict[str, Any]:
        """Read the text around a position in one note.

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
        from explorer.index.targets import ContextError, context_for
        from explorer.index.transclusion import with_embeds

        if window is not None:
            check_int(window, "window", 0, 2 * MAX_CONTEXT)
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

    @tool()
    def explain(self, query: str, target: str) -> dict[str, Any]:
        """Why a note ranked where it did for a query.

        Use it to judge how much to trust a result (which words or meanings matched it).
        Args:
          query: the search query.
          target: the note's node_id or path (as in a search result).
        Returns its rank, score and, per search term and retriever (bm25, dense), the rank, raw score
        and RRF contribution, plus rerank movement when reranking ran."""
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

    @tool()
    def why_not(self, query: str, note: str, k: int | None = None) -> dict[str, Any]:
        """Why a note you expected is not in the top k of a search, and what would bring it there.

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
        from explorer.engine.build import make_pipeline
        from explorer.search.core.pipeline import QueryError
        from explorer.search.explain.whynot import prove

        if k is not None:
            check_k(k, "k")
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

    @tool()
    def stats(self) -> dict[str, Any]:
        """Index counts and state: notes, shards, vectors, shards still without vectors,
        embedding model state, skipped files with the reason, and index freshness.

        Use it when results look thin or stale: it says whether the index is still embedding, what was
        skipped and why."""
        st = self.index.stats()
        return {
            "vault": str(self.vault),
            **st.counts(),
            "skipped": dict(sorted(self.index.skipped_files().items())),
            "read_only": not self.allow_write,
            "index": self.freshness(),
        }

    @tool(writes=True)
    def remember(
        self,
        text: str,
        title: str = "",
        kind: Literal["turn", "knowledge"] = "turn",
        user: str | None = None,
        keywords: list[str] | None = None,
    ) -> dict[str, Any]:
        """Write a new memory into the vault (atomically; searchable at once).

        Use it to keep something worth recalling in a later conversation: a turn summary, or a fact.

        Args:
          text: the Markdown body to remember, e.g. 'Alice prefers oat milk in her coffee.'
          title: a short topic line (at most 120 characters), e.g. 'Coffee preference'.
          kind: "turn" (default: a conversation-turn note, Users/<user>/turns/turn_NNNNNN/context.md) or
            "knowledge" (a knowledge note, Users/<user>/Knowledge/<title>.md; an existing one gets the
            text appended as a dated section).
          user: the vault's user folder (default: the server's --user, else the only folder under
            Users/, else "agent").
          keywords: optional list of keywords (at most 20) stored with a turn.
        Returns the new note's path and node_id."""
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
        who = safe_name(user or self.user or only_user(self.vault) or "agent", "user")
        title = " ".join(plain_input(str(title or "")).split())
        if len(title) > MAX_TITLE_CHARS:
            raise ToolInputError(
                f"title is {len(title):,} characters; a title is at most {MAX_TITLE_CHARS}: put the rest in text"
            )
        words = [w for k in (keywords or []) if (w := " ".join(plain_input(str(k)).split()))]
        if len(words) > MAX_KEYWORDS:
            raise ToolInputError(
                f"keywords: at most {MAX_KEYWORDS}, got {len(words)}: keep the ones that matter"
            )
        now = datetime.now(UTC).replace(microsecond=0)
        with self._write_lock:
            try:
                if kind == "turn":
                    rel = write_turn(self.vault, who, text, title, words, now)
                else:
                    rel = write_knowledge(
                        self.vault, who, text, title, now, self.settings.vault.max_note_bytes
                    )
            except UnsafePathError as exc:
                raise ToolInputError(
                    f"not written: {exc}; remember writes only real files and folders inside the vault, "
                    "never through a symbolic link"
                ) from None
            report = self.session.refresh(paths=[rel], reread=True)
        if rel in report.skipped:
            raise ToolInputError(f"{rel} was written but cannot be indexed: {report.skipped[rel]}")
        with self.index.snapshot() as snap:
            shards = snap.shard_ids(rel)
        return {
            "path": rel,
            "node_id": shards[0] if shards else rel,
            "kind": kind,
            "written_at": now.isoformat(),
            "index": self.freshness(),
        }

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


def _time_filters(
    after: str | None, before: str | None, on: str | None, recent_days: float | None, today: Any
) -> TimeFilters | None:
    """The search tool's time arguments as filters (None when none is given); ToolInputError for a bad one."""
    from explorer.text.dates import DateError, parse_period

    periods: dict[str, tuple[Any, ...]] = {"after": (), "before": (), "on": ()}
    for name, value in (("after", after), ("before", before), ("on", on)):
        if value is None or not str(value).strip():
            continue
        value = " ".join(str(value).split())
        if '"' in value:
            raise ToolInputError(f"{name}: a date has no quote marks, got {value!r}")
        try:
            periods[name] = (parse_period(value, today),)
        except DateError as exc:
            raise ToolInputError(f"{name}: {exc}") from None
    recent = None
    if recent_days is not None:
        if (
            isinstance(recent_days, bool)
            or not isinstance(recent_days, (int, float))
            or not 0 <= recent_days <= 36500
        ):
            raise ToolInputError(f"recent_days must be a number of days from 0 to 36500, got {recent_days!r}")
        recent = round(float(recent_days), 3)  # to the thousandth of a day, as `recent:` reads it
    if recent is None and not any(periods.values()):
        return None
    return TimeFilters(periods["after"], periods["before"], periods["on"], recent)


def _no_good_match(res: Any) -> bool:
    q = res.quality
    if q is None:
        return True
    return bool(q.factors.get("no_good_match", q.level == "low"))
