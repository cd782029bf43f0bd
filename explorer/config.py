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
    max_note_bytes: Annotated[int, Range(1)] = 8_000_000
    """Notes larger than this are skipped with a reason."""
    max_note_shards: Annotated[int, Range(1)] = 2000
    """Shards one note may contribute; the rest of a longer note is left out with a recorded reason."""
    source_types: tuple[tuple[str, str], ...] = DEFAULT_SOURCE_TYPES
    """(glob, source_type) pairs; anything unmatched is `note`."""
    follow_symlinks: bool = True
    """Follow symlinks (files and folders) whose target is inside the vault; loops are detected and skipped."""
    follow_external_symlinks: bool = False
    """Also follow symlinks whose target is outside the vault (off: nothing outside the vault is read)."""
    pdfs: bool = True
    """Index the text of PDF files, page by page (node_ids `file.pdf#page=N`); off: PDFs are not read."""
    max_pdf_bytes: Annotated[int, Range(1)] = 64_000_000
    """PDFs larger than this are skipped with a reason."""
    max_pdf_pages: Annotated[int, Range(1)] = 2000
    """Pages read from one PDF; the rest of a longer one is left out with a recorded reason."""
    pdf_seconds: Annotated[float, Range(0.1, 3600)] = 20.0
    """Time one PDF may take to read, checked between pages: the pages read by then are kept, the rest
    left out with a recorded reason (one page is itself bounded by the PDF library's limits)."""
    canvases: bool = True
    """Index JSON Canvas files (`.canvas`): text cards as shards `board.canvas#<card id>`, file cards and
    edges as links. Off: canvases are not read."""


@dataclass(frozen=True, slots=True)
class IndexSettings:
    """How notes become shards, and how shards are indexed."""

    cache_dir: str = ""
    """Where the index lives; empty means `<vault>/.explorer`."""
    shard_tokens: Annotated[int, Range(8, 512)] = 200
    """Size cap of a shard in estimated word pieces (the model window is 256)."""
    shard_overlap: Annotated[int, Range(0, 256)] = 30
    """Estimated word pieces shared by consecutive pieces of a long section."""
    embeddings: bool = True
    """Compute and use dense vectors; off means BM25 only."""
    dialog_context: bool = True
    """Also embed each conversation turn read with its adjacent turns of the same session (a second
    vector per turn note; see explorer.index.dialog). Off: turns have only their own vector."""
    model: str = "all-MiniLM-L6-v2"
    """Embedding model: the bundled name or a local model folder."""
    runtime: Annotated[str, OneOf("auto", "onnx", "sentence-transformers")] = "auto"
    """Embedding runtime: auto, onnx or sentence-transformers."""
    embed_batch: Annotated[int, Range(1, 1024)] = 32
    """Shards per embedding batch."""
    bm25_k1: Annotated[float, Range(0, 10)] = 1.5
    """BM25 term-frequency saturation (rank_bm25 default)."""
    bm25_b: Annotated[float, Range(0, 1)] = 0.75
    """BM25 length normalisation (rank_bm25 default)."""
    bm25_epsilon: Annotated[float, Range(0, 1)] = 0.25
    """Floor for negative IDF, as a fraction of the mean IDF (rank_bm25 default)."""
    debounce_ms: Annotated[int, Range(0, 60_000)] = 300
    """Quiet period that closes a batch of file changes."""
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
    shards_per_entry: Annotated[int, Range(1, 50)] = 3
    """Context shards kept per entry."""
    rrf_k: Annotated[int, Range(0, 100_000)] = 60
    """RRF constant."""
    fusion: Annotated[str, OneOf("auto", "rrf", "score")] = "auto"
    """How rankings combine: rrf (reciprocal ranks), score (each ranking's raw scores normalised
    to 0-1 from its best: BM25 / best, cosine from the 0.25 floor of unrelated texts), or auto:
    score fusion in a vault that holds conversation turns (agent memory), RRF elsewhere."""
    bm25_weight: Annotated[float, Range(0, 100)] = 1.0
    """Weight of the BM25 ranking in RRF."""
    dense_weight: Annotated[float, Range(0, 100)] = 1.0
    """Weight of the embedding ranking in RRF."""
    query_weight: Annotated[float, Range(0, 100)] = 1.5
    """Weight of the query itself among the search terms."""
    term_weight: Annotated[float, Range(0, 100)] = 1.0
    """Weight of each generated search term."""
    term_retrievers: Annotated[str, OneOf("both", "bm25", "dense")] = "both"
    """Which retrievers search the generated terms: both, bm25 or dense (the query uses both)."""
    source_weights: Annotated[tuple[tuple[str, float], ...], Range(0, 100)] = (("fact", 1.5),)
    """Per source_type RRF weight; unnamed types weigh 1.0."""
    dense_threshold: Annotated[float, Range(-1, 1)] = 0.40
    """Cosine below this is no semantic match."""
    owner_weight: Annotated[float, Range(0, 100)] = 1.5
    """RRF weight of the notes of a person the query names (a turn's `speaker`, a `Users/<name>/`
    folder; see explorer.search.memory); the quality is then judged on those notes. 1 = off."""
    neighbour_weight: Annotated[float, Range(0, 10)] = 0.0
    """Dialog context: share of the best adjacent turn's fused score that a conversation-turn note
    gains (turn n +/- 1 of the same session; see explorer.search.memory). 0 = off: `dialog_words`
    and `dialog_vectors` read a turn with its neighbours, and this lift on top of them lowered
    LoCoMo recall (BENCHMARKS.md)."""
    date_weight: Annotated[float, Range(0, 10)] = 0.5
    """In vaults of conversation turns (score fusion): when the query names a day, a month, a year or
    a span next to a date ("on 8 May, 2023", "in June", "the weekend before 10 April"), a turn
    recorded then gains this share of the best fused score (explorer.search.when). 0 = off."""
    date_after_days: Annotated[float, Range(0, 3650)] = 7.0
    """Days after a named span over which a turn's date still fits, less and less (things are told
    after they happen)."""
    dialog_words: Annotated[float, Range(0, 10)] = 0.5
    """In vaults of conversation turns (score fusion): a turn's BM25 document also counts its
    adjacent turns' words at this share (term counts and length; 0 = its own words only)."""
    dialog_reach: Annotated[int, Range(1, 10)] = 2
    """How many turns away `dialog_words` reaches, its share multiplied at each step (2: the
    adjacent turns at 0.5, the next ones at 0.25)."""
    dialog_vectors: bool = True
    """In vaults of conversation turns (score fusion): a turn's cosine is the better of its own
    vector's and its dialog-context vector's (index.dialog_context)."""
    candidates: Annotated[int, Range(1, 100_000)] = 100
    """Depth of each per-term ranking, in notes."""
    feedback_shards: Annotated[int, Range(0, 50)] = 3
    """Best fused passages (one per note) whose vectors move the query vector for the dense
    feedback ranking (0 = no feedback ranking)."""
    feedback_beta: Annotated[float, Range(0, 100)] = 1.0
    """Weight of the feedback passages' mean vector added to the query vector."""
    feedback_weight: Annotated[float, Range(0, 100)] = 1.0
    """RRF weight of the dense feedback ranking."""
    feedback_list: Annotated[str, OneOf("all", "leave_one_out", "new")] = "all"
    """What the feedback ranking lists. all (default): every passage the moved query vector finds,
    its own passages near the top (their own vectors are in it); leave_one_out: each feedback
    passage re-placed by the query plus the other passages only; new: only passages the query's
    own dense ranking missed. The last two stop a passage from counting its dense match twice,
    but both lowered SciFact nDCG@10 (0.717 -> 0.708 / 0.712) and LoCoMo R@10 (BENCHMARKS.md)."""
    phrase_weight: float = 1.0
    """RRF weight of the ranking of passages that contain a query's quoted phrases exactly."""
    second_shard_weight: float = 0.0
    """A note scores as its best shard plus this times its second-best shard (0 = best shard only,
    the default: 0.3 lowered SciFact nDCG@10 from 0.712 to 0.681 and names at rank 1; BENCHMARKS.md)."""
    name_weight: float = 2.0
    """RRF weight of the name ranking: notes whose title, file name or alias the query names
    (0 = no name ranking)."""
    typo_tolerance: bool = True
    """A query word found nowhere in the vault also searches the vault's closest words (one
    edit for words of 4-7 letters, two from 8), in BM25 and the name ranking."""
    max_terms: Annotated[int, Range(0, 10)] = 5
    """Search terms besides the query, when an LLM writes them."""
    keyword_terms: Annotated[int, Range(0, 5)] = 0
    """Keyword-extracted terms besides the query when no LLM writes them (0-5). Off by default:
    on BEIR SciFact they lowered nDCG@10 from 0.718 to 0.634 (see BENCHMARKS.md)."""
    always_include: bool = True
    """Apply the always-include rules (preferences, latest turn, referenced notes)."""
    recency_half_life_days: Annotated[float, Range(0, 1_000_000)] = 0.0
    """A gentle preference for newer notes (explorer.search.notefilters): a note this many days older
    than today loses half of `recency_weight` of its score, a much older one all of it. 0 = off (the
    default); a query's `recent:30d` / `recent:off` overrides it."""
    recency_weight: Annotated[float, Range(0, 1)] = 0.1
    """The most a note's score can lose to its age under a recency preference: 0.1 left searches
    for a note's name as good as without it on sample_vault, 0.25 cost 12 points (BENCHMARKS.md)."""
    two_pass: bool = True
    """Run the analysis and, when it says REFINE, a second pass."""
    analyser: Annotated[str, OneOf("auto", "llm", "heuristic")] = "auto"
    """auto (LLM when configured, else heuristic), llm or heuristic."""
    pass1_entries: Annotated[int, Range(1, 1000)] = 10
    """ke of pass 1."""
    pass1_shards: Annotated[int, Range(1, 50)] = 3
    """kc of pass 1."""
    pass2_entries: Annotated[int, Range(1, 1000)] = 5
    """ke of pass 2."""
    pass2_shards: Annotated[int, Range(1, 50)] = 2
    """kc of pass 2."""
    knowledge_first: bool = True
    """Search knowledge notes first and return early when they suffice."""
    cache_size: Annotated[int, Range(0, 100_000)] = 64
    """Recent searches kept in memory."""


@dataclass(frozen=True, slots=True)
class RerankSettings:
    """The multi-pass reranker (explorer.search.rerank): gate pass, early exit, precision pass."""

    enabled: bool = False
    """Rerank fused results (`--rerank` / `--no-rerank` override it per search). Off by default:
    on BEIR SciFact it lowered the default pipeline's nDCG@10 from 0.719 to 0.702 (BENCHMARKS.md)."""
    backend: Annotated[str, OneOf("local", "cross-encoder", "llm", "none")] = "local"
    """local (bundled MiniLM: best shard, then sentence windows), cross-encoder, llm or none."""
    cross_encoder: str = ""
    """Local folder of a sentence-transformers cross-encoder (backend cross-encoder)."""
    pass1_candidates: Annotated[int, Range(1, 10_000)] = 30
    """Results scored by the gate pass."""
    pass1_timeout_ms: Annotated[int, Range(0, 600_000)] = 80
    """Budget of the gate pass; 0 means no limit. On timeout the fused order stays."""
    pass2_candidates: Annotated[int, Range(0, 10_000)] = 100
    """Results scored by the precision pass; 0 disables it."""
    pass2_timeout_ms: Annotated[int, Range(0, 600_000)] = 150
    """Budget of the precision pass; 0 means no limit. On timeout the gate pass's order stays."""
    early_exit_ratio: Annotated[float, Range(0, 1000)] = 1.5
    """Skip pass 2 when the gate's top score / runner-up score (0-1 scale) exceeds this."""
    early_exit_gap: Annotated[float, Range(0, 1)] = 0.3
    """Skip pass 2 when the gate's top score minus runner-up score (0-1 scale) exceeds this."""
    blend: Annotated[float, Range(0, 1)] = 0.7
    """final = blend * rerank score + (1 - blend) * fused score / best fused score."""


@dataclass(frozen=True, slots=True)
class LLMSettings:
    """An OpenAI-compatible endpoint; off when base_url and model are empty."""

    base_url: str = ""
    """Endpoint, e.g. http://127.0.0.1:8080/v1."""
    api_key: str = ""
    """Key; many local servers accept any."""
    model: str = ""
    """Model name."""
    temperature: Annotated[float, Range(0, 2)] = 0.4
    """Sampling temperature for term generation."""
    timeout_s: Annotated[float, Range(0.1, 3600)] = 10.0
    """Per request."""
    max_tokens: Annotated[int, Range(1, 1_000_000)] = 200
    """Per completion."""
    token_budget: Annotated[int, Range(0, 100_000_000)] = 4000
    """Tokens one search may spend."""
    rerank: bool = False
    """Use the LLM to rerank when quality is below high."""

    @property
    def configured(self) -> bool:
        """True when an endpoint and a model are set."""
        return bool(self.base_url and self.model)


@dataclass(frozen=True, slots=True)
class UISettings:
    """The terminal app."""

    theme: str = "explorer-dark"
    """Theme name (from themes/ or Textual's built-ins)."""
    debounce_ms: Annotated[int, Range(0, 10_000)] = 150
    """Typing pause before a live search."""
    context_chars: Annotated[int, Range(10, 1_000_000)] = 600
    """Characters each side of the cursor in the context pane."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything configurable, grouped as in config.toml."""

    vault: VaultSettings = field(default_factory=VaultSettings)
    index: IndexSettings = field(default_factory=IndexSettings)
    search: SearchSettings = field(default_factory=SearchSettings)
    rerank: RerankSettings = field(default_factory=RerankSettings)
    llm: LLMSettings = field(default_factory=LLMSettings)
    ui: UISettings = field(default_factory=UISettings)

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

    Raises:
        ConfigError: naming the file, the key, the value and what is allowed, when a value has
            the wrong type, is out of range, not finite or not one of the allowed words.
    """
    settings = Settings()
    path = config_file or (vault / ".explorer" / "config.toml" if vault else None)
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
    settings = _apply(
        settings,
        _from_environ(environ if environ is not None else os.environ),
        "environment",
        from_text=True,
        warn=warn,
    )
    if flags:
        settings = settings.with_overrides(flags)
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
        if key not in specs:
            _unknown(f"unknown key '{section}.{key}'", key, list(specs), origin, warn)
            continue
        kind, rule = specs[key]
        updates[key] = _coerce(raw, kind, rule, f"{section}.{key}", origin, from_text)
    return dataclasses.replace(current, **updates)


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
