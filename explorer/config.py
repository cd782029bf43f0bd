"""One Settings object: defaults, overridden by <vault>/.explorer/config.toml, the environment, then flags."""

from __future__ import annotations

import dataclasses
import math
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cache
from pathlib import Path
from typing import Annotated, Any

#: Where a note lives decides its source type; first matching glob wins (paths are vault-relative).
DEFAULT_SOURCE_TYPES: tuple[tuple[str, str], ...] = (
    ("**/turns/turn_*/**", "turn_summary"),
    ("**/preferences.md", "preference"),
    ("**/Knowledge/**", "fact"),
    ("**/Beliefs/**", "belief"),
    ("**/research_cache/**", "research_cache"),
    ("**/visits/**", "visit_record"),
)

#: Ignore rules (gitignore syntax) every vault starts with; `vault.ignore` adds to them (a `!`
#: rule there can take one back, e.g. `!*.excalidraw.md`).
DEFAULT_IGNORE: tuple[str, ...] = (".obsidian/", ".trash/", ".git/", "*.excalidraw.md")

#: Folders that are never part of a vault.
ALWAYS_IGNORED_DIRS: frozenset[str] = frozenset({".obsidian", ".git", ".trash", ".explorer"})


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the key and the source."""


# A setting declares its type in its annotation (bool, int, float, str, tuple[str, ...], or a tuple
# of (str, str) or (str, float) pairs) and may add one rule through Annotated: Range(lo, hi) or
# OneOf(...). Every value from config.toml, the environment or a flag is checked against both when
# it is loaded; a field without a rule still has its type checked (whole numbers zero or more,
# finite floats), so a new setting is validated as soon as it is declared.


@dataclass(frozen=True, slots=True)
class Range:
    """Rule: a number (or the number of each (name, number) pair) from `lo` to `hi`, inclusive."""

    lo: float | None = None
    """Smallest allowed value (None: no lower bound)."""
    hi: float | None = None
    """Largest allowed value (None: no upper bound)."""

    def check(self, value: float) -> bool:
        """True when `value` is in range."""
        return (self.lo is None or value >= self.lo) and (self.hi is None or value <= self.hi)

    def describe(self) -> str:
        """The range in words, for error messages."""
        if self.lo is not None and self.hi is not None:
            return f"from {self.lo:g} to {self.hi:g}"
        return f"of at least {self.lo:g}" if self.lo is not None else f"of at most {self.hi:g}"


@dataclass(frozen=True, slots=True, init=False)
class OneOf:
    """Rule: one of these strings."""

    choices: tuple[str, ...]
    """The allowed values."""

    def __init__(self, *choices: str) -> None:
        object.__setattr__(self, "choices", choices)


@dataclass(frozen=True, slots=True)
class VaultSettings:
    """How the vault is read."""

    ignore: tuple[str, ...] = ()
    """Files and folders to skip, in gitignore syntax (vault-relative), added to DEFAULT_IGNORE."""
    source_types: tuple[tuple[str, str], ...] = DEFAULT_SOURCE_TYPES
    """(glob, source_type) pairs; anything unmatched is `note`."""
    follow_symlinks: bool = True
    """Follow symlinks (files and folders) whose target is inside the vault; loops are detected and skipped."""
    follow_external_symlinks: bool = False
    """Also follow symlinks whose target is outside the vault (off: nothing outside the vault is read)."""
    max_note_bytes: Annotated[int, Range(1)] = 8_000_000
    """Notes larger than this are skipped with a reason."""
    pdfs: bool = True
    """Index the text of PDF files, page by page (node_ids `file.pdf#page=N`); off: PDFs are not read."""
    max_pdf_bytes: Annotated[int, Range(1)] = 64_000_000
    """PDFs larger than this are skipped with a reason."""
    canvases: bool = True
    """Index JSON Canvas files (`.canvas`): text cards as shards `board.canvas#<card id>`, file cards and
    edges as links. Off: canvases are not read."""


@dataclass(frozen=True, slots=True)
class IndexSettings:
    """Where and how the index is kept."""

    cache_dir: str = ""
    """Where the index lives; empty means `<vault>/.explorer`."""
    embeddings: bool = True
    """Compute and use dense vectors; off means BM25 only."""
    model: str = "all-MiniLM-L6-v2"
    """Embedding model: the bundled name or a local model folder."""
    backend: Annotated[str, OneOf("local", "milvus")] = "local"
    """Where rankings are served from: `local` (in process) or `milvus` (a Milvus engine at `milvus_uri`)."""
    milvus_uri: str = ""
    """The Milvus engine: a path ending in `.db` (Milvus Lite in process) or `http://host:19530`.
    Its token, when it needs one, comes only from the environment variable EXPLORER_MILVUS_TOKEN."""
    collection: str = "explorer_shards"
    """The Milvus collection that holds the shards (several vaults may share one)."""
    vault_name: str = ""
    """This vault's name in a shared collection (`vault:NAME`); empty: the vault folder's name."""


@dataclass(frozen=True, slots=True)
class SearchSettings:
    """How a query is answered."""

    top_k: Annotated[int, Range(1, 1000)] = 15
    """Entries (notes) returned."""
    max_terms: Annotated[int, Range(0, 5)] = 5
    """Search terms besides the query, when an LLM writes them (0-5)."""
    typo_tolerance: bool = True
    """A query word found nowhere in the vault also searches the vault's closest words (one
    edit for words of 4-7 letters, two from 8), in BM25 and the name ranking."""
    always_include: bool = True
    """Apply the always-include rules (preferences, latest turn, referenced notes)."""
    two_pass: bool = True
    """Run the analysis and, when it says REFINE, a second pass."""
    recency_half_life_days: Annotated[float, Range(0, 1_000_000)] = 0.0
    """A gentle preference for newer notes (explorer.search.core.notefilters): a note this many days older
    than today loses half of the most its age can cost it, a much older one all of it. 0 = off (the
    default); a query's `recent:30d` / `recent:off` overrides it."""


@dataclass(frozen=True, slots=True)
class RerankSettings:
    """The multi-pass reranker (explorer.search.rerank): gate pass, early exit, precision pass."""

    enabled: bool = False
    """Rerank fused results (`--rerank` / `--no-rerank` override it per search)."""
    backend: Annotated[str, OneOf("local", "cross-encoder", "llm", "none")] = "local"
    """local (bundled MiniLM: best shard, then sentence windows), cross-encoder, llm (the configured
    LLM, one pass) or none."""
    cross_encoder: str = ""
    """Local folder of a sentence-transformers cross-encoder (backend cross-encoder)."""


@dataclass(frozen=True, slots=True)
class LLMSettings:
    """An OpenAI-compatible endpoint; off when base_url and model are empty."""

    base_url: str = ""
    """Endpoint, e.g. http://127.0.0.1:8080/v1."""
    api_key: str = ""
    """Key; many local servers accept any."""
    model: str = ""
    """Model name."""
    timeout_s: Annotated[float, Range(0.1, 3600)] = 10.0
    """Per request."""
    token_budget: Annotated[int, Range(0, 100_000_000)] = 4000
    """Tokens one search may spend."""

    @property
    def configured(self) -> bool:
        """True when an endpoint and a model are set."""
        return bool(self.base_url and self.model)


@dataclass(frozen=True, slots=True)
class UISettings:
    """The terminal app."""

    theme: str = "explorer-dark"
    """Theme name (from themes/ or Textual's built-ins)."""


@dataclass(frozen=True, slots=True)
class ExperimentalSettings:
    """Tuning values, for measuring alternatives: the defaults are the measured ones (BENCHMARKS.md, by area).

    Not settings a person needs: setting one in config.toml or the environment warns once per load
    (a `--set` flag does not: it is asked for each time), and any of them may change or go without
    notice.
    """

    fusion: Annotated[str, OneOf("auto", "rrf", "score")] = "auto"
    """rrf (reciprocal ranks), score (raw scores normalised to 0-1), or auto: score fusion in a vault
    of conversation turns, RRF elsewhere."""
    rrf_k: Annotated[int, Range(0, 100_000)] = 60
    """RRF constant."""
    bm25_weight: Annotated[float, Range(0, 100)] = 1.0
    """Weight of the BM25 rankings."""
    dense_weight: Annotated[float, Range(0, 100)] = 1.0
    """Weight of the embedding rankings."""
    query_weight: Annotated[float, Range(0, 100)] = 1.5
    """Weight of the query itself among the search terms."""
    term_weight: Annotated[float, Range(0, 100)] = 1.0
    """Weight of each written search term."""
    term_retrievers: Annotated[str, OneOf("both", "bm25", "dense")] = "both"
    """Which retrievers search the written terms (the query uses both)."""
    source_weights: Annotated[tuple[tuple[str, float], ...], Range(0, 100)] = (("fact", 1.5),)
    """Weight per source_type; unnamed types weigh 1.0."""
    dense_threshold: Annotated[float, Range(-1, 1)] = 0.40
    """Cosine below this is no semantic match."""
    candidates: Annotated[int, Range(1, 100_000)] = 100
    """Depth of each per-term ranking, in notes."""
    feedback_shards: Annotated[int, Range(0, 50)] = 3
    """Best fused passages whose vectors move the query vector for the feedback ranking (0: none)."""
    name_weight: Annotated[float, Range(0, 100)] = 2.0
    """Weight of the name ranking (notes whose title, file name or alias the query names; 0: none)."""
    owner_weight: Annotated[float, Range(0, 100)] = 1.5
    """Weight of the notes of a person the query names (explorer.search.memory.signals; 1: off)."""
    date_weight: Annotated[float, Range(0, 10)] = 0.5
    """Share of the best fused score a turn recorded on the day the query names gains (0: off)."""
    answer_weight: Annotated[float, Range(0, 10)] = 0.4
    """Share of a turn's fused score the next turn gains when it asks a person the query names (0: off)."""
    asking_discount: Annotated[float, Range(0, 1)] = 0.2
    """Share of its fused score such an asking turn loses (the answer is in the reply)."""
    turn_rescore: bool = True
    """Re-order the first fused conversation turns by the turn model (explorer.search.memory.rescore)."""
    dialog_words: Annotated[float, Range(0, 10)] = 0.5
    """Share of the adjacent turns' words in a turn's BM25 document (0: its own words only)."""
    recency_weight: Annotated[float, Range(0, 1)] = 0.1
    """The most a note's score can lose to its age under a recency preference."""
    analyser: Annotated[str, OneOf("auto", "llm", "heuristic")] = "auto"
    """Pass-1 analysis: auto (LLM when configured, else heuristic), llm or heuristic."""
    knowledge_first: bool = True
    """Search knowledge notes first and return early when they suffice."""
    pass1_shards: Annotated[int, Range(1, 50)] = 3
    """Context shards per entry of pass 1."""
    cache_size: Annotated[int, Range(0, 100_000)] = 64
    """Recent searches kept in memory."""
    rerank_pass1_candidates: Annotated[int, Range(1, 10_000)] = 30
    """Results scored by the reranker's gate pass."""
    rerank_pass1_timeout_ms: Annotated[int, Range(0, 600_000)] = 80
    """Budget of the gate pass (0: no limit); on timeout the fused order stays."""
    rerank_pass2_timeout_ms: Annotated[int, Range(0, 600_000)] = 150
    """Budget of the precision pass (0: no limit); on timeout the gate pass's order stays."""
    rerank_early_exit_ratio: Annotated[float, Range(0, 1000)] = 1.5
    """Skip the precision pass when the gate's top score / runner-up (0-1 scale) exceeds this."""
    rerank_early_exit_gap: Annotated[float, Range(0, 1)] = 0.3
    """Skip the precision pass when the gate's top score minus runner-up exceeds this."""
    rerank_blend: Annotated[float, Range(0, 1)] = 0.7
    """final = blend * rerank score + (1 - blend) * fused score / best fused score."""
    runtime: Annotated[str, OneOf("auto", "onnx", "sentence-transformers")] = "auto"
    """Embedding runtime: auto (ONNX Runtime, else sentence-transformers), onnx or sentence-transformers."""
    dialog_context: bool = True
    """Also embed each conversation turn with its adjacent turns (a second vector per turn note)."""
    watch_debounce_ms: Annotated[int, Range(0, 60_000)] = 300
    """Quiet period that closes a batch of file changes."""
    typing_debounce_ms: Annotated[int, Range(0, 10_000)] = 150
    """Typing pause before the app's live search."""
    mark_results: bool = False
    """The app writes `explorer:<stage>:<query>` to the terminal's title (OSC 2) just after the frame
    that drew a search's results: how `benchmarks.browser` times keystroke to results in a real
    terminal and in the browser, and knows the results are the typed query's, not a prefix's."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything configurable, grouped as in config.toml."""

    vault: VaultSettings = field(default_factory=VaultSettings)
    index: IndexSettings = field(default_factory=IndexSettings)
    search: SearchSettings = field(default_factory=SearchSettings)
    rerank: RerankSettings = field(default_factory=RerankSettings)
    llm: LLMSettings = field(default_factory=LLMSettings)
    ui: UISettings = field(default_factory=UISettings)
    experimental: ExperimentalSettings = field(default_factory=ExperimentalSettings)

    def with_overrides(self, overrides: Mapping[str, Any], origin: str = "flags") -> Settings:
        """Return a copy with dotted keys (`search.top_k`) replaced, values checked."""
        sections: dict[str, dict[str, Any]] = {}
        for dotted, value in overrides.items():
            section, _, key = dotted.partition(".")
            if not key:
                raise ConfigError(f"{origin}: '{dotted}' must be written section.key")
            sections.setdefault(section, {})[key] = value
        return _apply(self, sections, origin, from_text=True)


def cache_dir_for(vault: Path, settings: Settings) -> Path:
    """The index folder of a vault."""
    if settings.index.cache_dir:
        p = Path(os.path.expanduser(settings.index.cache_dir))
        return p if p.is_absolute() else vault / p
    return vault / ".explorer"


#: Keys that were settings once, each with what became of it: ("experimental", its name under
#: [experimental]), ("fixed", the value it is fixed at and why) or ("gone", why). A config file or
#: the environment that still sets one gets a warning saying what to do; a flag gets an error.
REMOVED_KEYS: dict[str, tuple[str, str]] = {
    **{
        f"search.{key}": ("experimental", key)
        for key in (
            "fusion",
            "rrf_k",
            "bm25_weight",
            "dense_weight",
            "query_weight",
            "term_weight",
            "term_retrievers",
            "source_weights",
            "dense_threshold",
            "candidates",
            "feedback_shards",
            "name_weight",
            "owner_weight",
            "date_weight",
            "dialog_words",
            "recency_weight",
            "analyser",
            "knowledge_first",
            "pass1_shards",
            "cache_size",
        )
    },
    **{
        f"rerank.{key}": ("experimental", f"rerank_{key}")
        for key in (
            "pass1_candidates",
            "pass1_timeout_ms",
            "pass2_timeout_ms",
            "early_exit_ratio",
            "early_exit_gap",
            "blend",
        )
    },
    "index.runtime": ("experimental", "runtime"),
    "index.dialog_context": ("experimental", "dialog_context"),
    "index.debounce_ms": ("experimental", "watch_debounce_ms"),
    "ui.debounce_ms": ("experimental", "typing_debounce_ms"),
    "vault.max_note_shards": ("fixed", "2000 shards per note"),
    "vault.max_pdf_pages": ("fixed", "2000 pages per PDF"),
    "vault.pdf_seconds": ("fixed", "20 s per PDF"),
    "index.bm25_k1": ("fixed", "1.5, the formula of rank_bm25"),
    "index.bm25_b": ("fixed", "0.75, the formula of rank_bm25"),
    "index.bm25_epsilon": ("fixed", "0.25, the formula of rank_bm25"),
    "index.shard_tokens": ("fixed", "200 word pieces"),
    "index.shard_overlap": ("fixed", "30 word pieces"),
    "index.embed_batch": ("fixed", "32 shards"),
    "search.shards_per_entry": ("fixed", "3"),
    "search.pass1_entries": ("fixed", "10"),
    "search.pass2_entries": ("fixed", "5"),
    "search.pass2_shards": ("fixed", "2"),
    "search.date_after_days": ("fixed", "7 days"),
    "search.dialog_reach": ("fixed", "2 turns"),
    "search.dialog_vectors": ("fixed", "on"),
    "search.feedback_beta": ("fixed", "1.0"),
    "search.feedback_weight": ("fixed", "1.0"),
    "search.phrase_weight": ("fixed", "1.0"),
    "rerank.pass2_candidates": ("fixed", "100"),
    "llm.temperature": ("fixed", "0.4"),
    "llm.max_tokens": ("fixed", "200 tokens per completion"),
    "ui.context_chars": ("fixed", "600 characters; the context pane's keys widen and narrow it"),
    "search.neighbour_weight": (
        "gone",
        "the lift from adjacent turns lowered LoCoMo recall (BENCHMARKS.md#agent-memory-locomo)",
    ),
    "search.feedback_list": (
        "gone",
        "the other feedback lists lowered SciFact and LoCoMo (BENCHMARKS.md#retrieval-quality-scifact)",
    ),
    "search.second_shard_weight": (
        "gone",
        "a note's second shard lowered SciFact nDCG@10 (BENCHMARKS.md#retrieval-quality-scifact)",
    ),
    "search.keyword_terms": (
        "gone",
        "offline keyword terms lowered SciFact nDCG@10 (BENCHMARKS.md#retrieval-quality-scifact)",
    ),
    "llm.rerank": ("merged", 'rerank.backend = "llm" with rerank.enabled = true'),
}


def removed_key_advice(dotted: str, origin: str, flag_value: Any = None) -> str | None:
    """What to tell someone who sets `dotted`, no longer a setting (None: it is one, or never was).

    A file or the environment gets a warning (the key is ignored); a `--set` flag (`flag_value`
    given) stops the command, so its advice says what to type instead, not that it is ignored.
    """
    if dotted not in REMOVED_KEYS:
        return None
    kind, detail = REMOVED_KEYS[dotted]
    if flag_value is not None:
        if kind == "experimental":
            todo = f"it is the experimental tuning value experimental.{detail} now: --set experimental.{detail}={flag_value}"
        elif kind == "fixed":
            todo = f"it is fixed at {detail}: leave the flag out"
        elif kind == "merged":
            todo = f"set {detail} instead"
        else:
            todo = f"the alternative is gone ({detail}): leave the flag out"
        return f"'{dotted}' is no longer a setting; {todo}"
    env = origin == "environment"
    name = "EXPLORER_" + dotted.replace(".", "_").upper()
    drop = f"unset {name}" if env else "remove it"
    if kind == "experimental":
        where = f"EXPLORER_EXPERIMENTAL_{detail.upper()}" if env else f"{detail} under [experimental]"
        todo = f"it is the experimental tuning value experimental.{detail} now: {drop}, or set {where}"
    elif kind == "fixed":
        todo = f"it is fixed at {detail}: {drop}"
    elif kind == "merged":
        todo = f"set {detail} instead, and {drop}"
    else:
        todo = f"the alternative is gone ({detail}): {drop}"
    return f"'{dotted}' is no longer a setting and is ignored; {todo}"


def load_settings(
    vault: Path | None,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    config_file: Path | None = None,
    warn: Callable[[str], None] | None = None,
) -> Settings:
    """Build Settings from defaults, the vault's config.toml, the environment and flags.

    Args:
        vault: The vault root; its `.explorer/config.toml` is read when present.
        flags: Dotted overrides from the command line, e.g. {"search.top_k": 5}.
        environ: Environment (default os.environ). `EXPLORER_<SECTION>_<KEY>` sets a key;
            `OPENAI_BASE_URL`, `OPENAI_API_KEY` and `EXPLORER_LLM_MODEL` set the LLM.
        config_file: An explicit config file instead of the vault's.
        warn: Told about unknown sections and keys in the file and the environment (with a
            "did you mean"); they are ignored. Default: ConfigError. Unknown flags always raise.
            Also told, once per load, which `[experimental]` values the file and the environment
            set (a flag's are asked for on the command line: no warning), and about each key
            that is no longer a setting (ignored; without `warn` such a key is a Python warning
            from the file and the environment, and an error from a flag).

    Raises:
        ConfigError: naming the file, the key, the value and what is allowed, when a value has
            the wrong type, is out of range, not finite or not one of the allowed words.
    """
    settings = Settings()
    path = config_file or (vault / ".explorer" / "config.toml" if vault else None)
    data: dict[str, Any] = {}
    if path is not None and path.is_file():
        import tomllib

        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        for section, values in data.items():
            if not isinstance(values, dict):
                raise ConfigError(f"{path}: '{section}' must be a [section] table")
        settings = _apply(settings, data, str(path), warn=warn)
    environ_data = _from_environ(environ if environ is not None else os.environ)
    settings = _apply(settings, environ_data, "environment", from_text=True, warn=warn)
    if flags:
        settings = settings.with_overrides(flags)
    # A flag's experimental values are asked for on the command line each time: no warning for them.
    tuned = {*data.get("experimental", {}), *environ_data.get("experimental", {})}
    names = ", ".join(f"experimental.{key}" for key in sorted(tuned & set(field_specs(ExperimentalSettings))))
    if names and warn is not None:
        warn(
            f"{names}: experimental tuning, not a setting (the defaults are the measured values, "
            "BENCHMARKS.md); it may change or go without notice"
        )
    return settings


def _from_environ(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    sections = {f.name: f.type for f in fields(Settings)}
    for name, value in environ.items():
        if not name.startswith("EXPLORER_"):
            continue
        rest = name[len("EXPLORER_") :].lower()
        for section in sections:
            if rest.startswith(section + "_"):
                out.setdefault(section, {})[rest[len(section) + 1 :]] = value
                break
    llm = out.setdefault("llm", {})
    for env_name, key in (("OPENAI_BASE_URL", "base_url"), ("OPENAI_API_KEY", "api_key")):
        if env_name in environ and key not in llm:
            llm[key] = environ[env_name]
    if not llm:
        del out["llm"]
    return out


def _apply(
    settings: Settings,
    data: Mapping[str, Any],
    origin: str,
    from_text: bool = False,
    warn: Callable[[str], None] | None = None,
) -> Settings:
    """`settings` with `data` ({section: {key: value}}) applied, every value checked.

    Unknown sections and keys go to `warn` with a "did you mean" and are ignored; without
    `warn` they raise ConfigError. `from_text` values (environment, flags) are strings to
    convert; values from TOML must already have the right type.
    """
    changes: dict[str, Any] = {}
    section_fields = [f.name for f in fields(Settings)]
    for section, values in data.items():
        if section not in section_fields:
            _unknown(f"unknown section '{section}'", section, section_fields, origin, warn)
            continue
        current = getattr(settings, section)
        changes[section] = _apply_section(current, section, values, origin, from_text, warn)
    return replace(settings, **changes)


def _unknown(what: str, name: str, known: list[str], origin: str, warn: Callable[[str], None] | None) -> None:
    import difflib

    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else f" (known: {', '.join(known)})"
    if warn is None:
        raise ConfigError(f"{origin}: {what}{hint}")
    warn(f"{origin}: {what} is ignored{hint}")


def _apply_section(
    current: Any,
    section: str,
    values: Mapping[str, Any],
    origin: str,
    from_text: bool,
    warn: Callable[[str], None] | None,
) -> Any:
    section_type: type = type(current)
    specs = field_specs(section_type)
    updates: dict[str, Any] = {}
    for key, raw in values.items():
        advice = removed_key_advice(f"{section}.{key}", origin)
        if advice is not None:
            if origin == "environment" or warn is not None or not from_text:
                _warn_removed(f"{origin}: {advice}", warn)
                continue
            # A flag is typed for this command: an error, whose advice says what to type instead.
            raise ConfigError(f"{origin}: {removed_key_advice(f'{section}.{key}', origin, flag_value=raw)}")
        if key not in specs:
            _unknown(f"unknown key '{section}.{key}'", key, list(specs), origin, warn)
            continue
        kind, rule = specs[key]
        updates[key] = _coerce(raw, kind, rule, f"{section}.{key}", origin, from_text)
    return dataclasses.replace(current, **updates)


def _warn_removed(message: str, warn: Callable[[str], None] | None) -> None:
    if warn is not None:
        warn(message)
    else:
        import warnings

        warnings.warn(message, UserWarning, stacklevel=4)


@cache
def field_specs(cls: type) -> dict[str, tuple[Any, Range | OneOf | None]]:
    """{field name: (type, rule or None)} of a settings section, from its annotations."""
    hints = typing.get_type_hints(cls, include_extras=True)
    out: dict[str, tuple[Any, Range | OneOf | None]] = {}
    for f in fields(cls):
        hint, rule = hints[f.name], None
        if typing.get_origin(hint) is Annotated:
            hint, *extras = typing.get_args(hint)
            rule = next((e for e in extras if isinstance(e, (Range, OneOf))), None)
        out[f.name] = (hint, rule)
    return out


_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def _number(value: Any, whole: bool, from_text: bool) -> float | int:
    """`value` as a finite number (a whole one for `whole`); ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError
    if isinstance(value, str):
        if not from_text:
            raise ValueError
        value = float(value.strip()) if not whole or any(c in value for c in ".eE") else int(value.strip())
    if isinstance(value, float):
        if not math.isfinite(value) or (whole and not value.is_integer()):
            raise ValueError
        return int(value) if whole else value
    return value if whole else float(value)


def _coerce(raw: Any, kind: Any, rule: Range | OneOf | None, key: str, origin: str, from_text: bool) -> Any:
    """`raw` converted to `kind` and checked against `rule`; ConfigError names origin, key, value and what is allowed."""

    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{origin}: '{key}' must be {expected}, got {raw!r}")

    if kind is bool:
        if isinstance(raw, bool):
            return raw
        if from_text and isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
            return raw.strip().lower() in _TRUE
        raise bad("true or false")
    if kind in (int, float):
        whole = kind is int
        noun = "a whole number" if whole else "a finite number"
        what = (
            f"{noun} {rule.describe()}"
            if isinstance(rule, Range)
            else (f"{noun} zero or more" if whole else noun)
        )
        try:
            value = _number(raw, whole, from_text)
        except (ValueError, OverflowError):
            raise bad(what) from None
        if (isinstance(rule, Range) and not rule.check(value)) or (rule is None and whole and value < 0):
            raise bad(what)
        return value
    if kind is str:
        if not isinstance(raw, str):
            raise bad("a string")
        if isinstance(rule, OneOf) and raw not in rule.choices:
            raise bad("one of " + ", ".join(rule.choices))
        return raw
    if typing.get_origin(kind) is tuple:
        return _coerce_tuple(raw, kind, rule, bad, from_text)
    return raw


def _coerce_tuple(
    raw: Any, kind: Any, rule: Range | OneOf | None, bad: Callable[[str], ConfigError], from_text: bool
) -> tuple[Any, ...]:
    items = raw
    args = typing.get_args(kind)
    pairs = bool(args) and typing.get_origin(args[0]) is tuple
    if from_text and isinstance(items, str):
        items = [part.strip() for part in items.split(",") if part.strip()]
        if pairs:  # name=value,name=value
            items = [tuple(part.split("=", 1)) if "=" in part else part for part in items]
    if pairs and isinstance(items, Mapping):
        items = list(items.items())
    if not pairs:
        if not isinstance(items, (list, tuple)) or not all(isinstance(item, str) for item in items):
            raise bad("a list of strings")
        return tuple(items)
    value_type = typing.get_args(args[0])[1]
    values = f"finite numbers {rule.describe()}" if isinstance(rule, Range) else "finite numbers"
    expected = f"a table of names to {values if value_type is float else 'strings'}"
    if not isinstance(items, (list, tuple)):
        raise bad(expected)
    out = []
    for item in items:
        if not isinstance(item, (list, tuple)) or len(item) != 2 or not isinstance(item[0], str):
            raise bad(expected)
        name, value = item
        if value_type is float:
            try:
                value = _number(value, False, from_text)
            except (ValueError, OverflowError):
                raise bad(expected) from None
            if isinstance(rule, Range) and not rule.check(value):
                raise bad(expected)
        elif not isinstance(value, str):
            raise bad(expected)
        out.append((name, value))
    return tuple(out)
