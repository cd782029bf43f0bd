"""One Settings object: defaults, overridden by <vault>/.explorer/config.toml, the environment, then flags."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

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


@dataclass(frozen=True, slots=True)
class VaultSettings:
    """How the vault is read."""

    ignore: tuple[str, ...] = ()
    """Files and folders to skip, in gitignore syntax (vault-relative), added to DEFAULT_IGNORE."""
    max_note_bytes: int = 8_000_000
    """Notes larger than this are skipped with a reason."""
    max_note_shards: int = 2000
    """Shards one note may contribute; the rest of a longer note is left out with a recorded reason."""
    source_types: tuple[tuple[str, str], ...] = DEFAULT_SOURCE_TYPES
    """(glob, source_type) pairs; anything unmatched is `note`."""
    follow_symlinks: bool = True
    """Follow symlinked folders (loops are detected and skipped)."""


@dataclass(frozen=True, slots=True)
class IndexSettings:
    """How notes become shards, and how shards are indexed."""

    cache_dir: str = ""
    """Where the index lives; empty means `<vault>/.explorer`."""
    shard_tokens: int = 200
    """Size cap of a shard in estimated word pieces (the model window is 256)."""
    shard_overlap: int = 30
    """Estimated word pieces shared by consecutive pieces of a long section."""
    embeddings: bool = True
    """Compute and use dense vectors; off means BM25 only."""
    model: str = "all-MiniLM-L6-v2"
    """Embedding model: the bundled name or a local model folder."""
    runtime: str = "auto"
    """Embedding runtime: auto, onnx or sentence-transformers."""
    embed_batch: int = 32
    """Shards per embedding batch."""
    bm25_k1: float = 1.5
    """BM25 term-frequency saturation (rank_bm25 default)."""
    bm25_b: float = 0.75
    """BM25 length normalisation (rank_bm25 default)."""
    bm25_epsilon: float = 0.25
    """Floor for negative IDF, as a fraction of the mean IDF (rank_bm25 default)."""
    debounce_ms: int = 300
    """Quiet period that closes a batch of file changes."""


@dataclass(frozen=True, slots=True)
class SearchSettings:
    """How a query is answered."""

    top_k: int = 15
    """Entries (notes) returned."""
    shards_per_entry: int = 3
    """Context shards kept per entry."""
    rrf_k: int = 60
    """RRF constant."""
    bm25_weight: float = 1.0
    """Weight of the BM25 ranking in RRF."""
    dense_weight: float = 1.0
    """Weight of the embedding ranking in RRF."""
    query_weight: float = 1.5
    """Weight of the query itself among the search terms."""
    term_weight: float = 1.0
    """Weight of each generated search term."""
    term_retrievers: str = "both"
    """Which retrievers search the generated terms: both, bm25 or dense (the query uses both)."""
    source_weights: tuple[tuple[str, float], ...] = (("fact", 1.5),)
    """Per source_type RRF weight; unnamed types weigh 1.0."""
    dense_threshold: float = 0.40
    """Cosine below this is no semantic match."""
    candidates: int = 100
    """Depth of each per-term ranking, in notes."""
    feedback_shards: int = 3
    """Best fused passages (one per note) whose vectors move the query vector for the dense
    feedback ranking (0 = no feedback ranking)."""
    feedback_beta: float = 1.0
    """Weight of the feedback passages' mean vector added to the query vector."""
    feedback_weight: float = 1.0
    """RRF weight of the dense feedback ranking."""
    phrase_weight: float = 1.0
    """RRF weight of the ranking of passages that contain a query's quoted phrases exactly."""
    second_shard_weight: float = 0.3
    """A note scores as its best shard plus this times its second-best shard (0 = best shard only)."""
    name_weight: float = 2.0
    """RRF weight of the name ranking: notes whose title, file name or alias the query names
    (0 = no name ranking)."""
    typo_tolerance: bool = True
    """A query word found nowhere in the vault also searches the vault's closest words (one
    edit for words of 4-7 letters, two from 8), in BM25 and the name ranking."""
    max_terms: int = 5
    """Search terms besides the query, when an LLM writes them."""
    keyword_terms: int = 0
    """Keyword-extracted terms besides the query when no LLM writes them (0-5). Off by default:
    on BEIR SciFact they lowered nDCG@10 from 0.718 to 0.634 (see BENCHMARKS.md)."""
    always_include: bool = True
    """Apply the always-include rules (preferences, latest turn, referenced notes)."""
    two_pass: bool = True
    """Run the analysis and, when it says REFINE, a second pass."""
    analyser: str = "auto"
    """auto (LLM when configured, else heuristic), llm or heuristic."""
    pass1_entries: int = 10
    """ke of pass 1."""
    pass1_shards: int = 3
    """kc of pass 1."""
    pass2_entries: int = 5
    """ke of pass 2."""
    pass2_shards: int = 2
    """kc of pass 2."""
    knowledge_first: bool = True
    """Search knowledge notes first and return early when they suffice."""
    cache_size: int = 64
    """Recent searches kept in memory."""


@dataclass(frozen=True, slots=True)
class RerankSettings:
    """The multi-pass reranker (explorer.search.rerank): gate pass, early exit, precision pass."""

    enabled: bool = False
    """Rerank fused results (`--rerank` / `--no-rerank` override it per search). Off by default:
    on BEIR SciFact it lowered the default pipeline's nDCG@10 from 0.719 to 0.702 (BENCHMARKS.md)."""
    backend: str = "local"
    """local (bundled MiniLM: best shard, then sentence windows), cross-encoder, llm or none."""
    cross_encoder: str = ""
    """Local folder of a sentence-transformers cross-encoder (backend cross-encoder)."""
    pass1_candidates: int = 30
    """Results scored by the gate pass."""
    pass1_timeout_ms: int = 80
    """Budget of the gate pass; 0 means no limit. On timeout the fused order stays."""
    pass2_candidates: int = 100
    """Results scored by the precision pass; 0 disables it."""
    pass2_timeout_ms: int = 150
    """Budget of the precision pass; 0 means no limit. On timeout the gate pass's order stays."""
    early_exit_ratio: float = 1.5
    """Skip pass 2 when the gate's top score / runner-up score (0-1 scale) exceeds this."""
    early_exit_gap: float = 0.3
    """Skip pass 2 when the gate's top score minus runner-up score (0-1 scale) exceeds this."""
    blend: float = 0.7
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
    temperature: float = 0.4
    """Sampling temperature for term generation."""
    timeout_s: float = 10.0
    """Per request."""
    max_tokens: int = 200
    """Per completion."""
    token_budget: int = 4000
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
    debounce_ms: int = 150
    """Typing pause before a live search."""
    context_chars: int = 600
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
        return _apply(self, sections, origin)


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
) -> Settings:
    """Build Settings from defaults, the vault's config.toml, the environment and flags.

    Args:
        vault: The vault root; its `.explorer/config.toml` is read when present.
        flags: Dotted overrides from the command line, e.g. {"search.top_k": 5}.
        environ: Environment (default os.environ). `EXPLORER_<SECTION>_<KEY>` sets a key;
            `OPENAI_BASE_URL`, `OPENAI_API_KEY` and `EXPLORER_LLM_MODEL` set the LLM.
        config_file: An explicit config file instead of the vault's.

    Raises:
        ConfigError: naming the file and key when a value is unknown or of the wrong type.
    """
    settings = Settings()
    path = config_file or (vault / ".explorer" / "config.toml" if vault else None)
    if path is not None and path.is_file():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        for section, values in data.items():
            if not isinstance(values, dict):
                raise ConfigError(f"{path}: '{section}' must be a [section] table")
        settings = _apply(settings, data, str(path))
    settings = _apply(settings, _from_environ(environ if environ is not None else os.environ), "environment")
    if flags:
        settings = settings.with_overrides(flags)
    return settings


def _from_environ(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    sections = {f.name: f.type for f in fields(Settings)}
    for name, value in environ.items():
        if not name.startswith("EXPLORER_"):
            continue
        rest = name[len("EXPLORER_"):].lower()
        for section in sections:
            if rest.startswith(section + "_"):
                out.setdefault(section, {})[rest[len(section) + 1:]] = value
                break
    llm = out.setdefault("llm", {})
    for env_name, key in (("OPENAI_BASE_URL", "base_url"), ("OPENAI_API_KEY", "api_key")):
        if env_name in environ and key not in llm:
            llm[key] = environ[env_name]
    if not llm:
        del out["llm"]
    return out


def _apply(settings: Settings, data: Mapping[str, Any], origin: str) -> Settings:
    changes: dict[str, Any] = {}
    section_fields = {f.name: f for f in fields(Settings)}
    for section, values in data.items():
        if section not in section_fields:
            known = ", ".join(section_fields)
            raise ConfigError(f"{origin}: unknown section '{section}' (known: {known})")
        current = getattr(settings, section)
        changes[section] = _apply_section(current, section, values, origin)
    return replace(settings, **changes)


def _apply_section(current: Any, section: str, values: Mapping[str, Any], origin: str) -> Any:
    by_name = {f.name: f for f in fields(current)}
    updates: dict[str, Any] = {}
    for key, raw in values.items():
        f = by_name.get(key)
        if f is None:
            raise ConfigError(f"{origin}: unknown key '{section}.{key}' (known: {', '.join(by_name)})")
        default = getattr(current, key)
        updates[key] = _coerce(raw, default, f"{section}.{key}", origin)
    return dataclasses.replace(current, **updates)


def _coerce(raw: Any, default: Any, key: str, origin: str) -> Any:
    """Convert a TOML/env/flag value to the type of the default, or raise ConfigError naming key."""
    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{origin}: '{key}' must be {expected}, got {raw!r}")

    if isinstance(default, bool):
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in {"1", "true", "yes", "on", "0", "false", "no", "off"}:
            return raw.strip().lower() in {"1", "true", "yes", "on"}
        raise bad("true or false")
    if isinstance(default, int):
        try:
            if isinstance(raw, float) and not raw.is_integer():
                raise ValueError
            value = int(raw)
        except (TypeError, ValueError):
            raise bad("a whole number") from None
        if value < 0:
            raise bad("zero or more")
        return value
    if isinstance(default, float):
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise bad("a number") from None
        return value
    if isinstance(default, str):
        if not isinstance(raw, str):
            raise bad("a string")
        return raw
    if isinstance(default, tuple):
        if isinstance(raw, str):
            raw = [part.strip() for part in raw.split(",") if part.strip()]
        if isinstance(raw, Mapping):
            raw = list(raw.items())
        if not isinstance(raw, (list, tuple)):
            raise bad("a list")
        if default and isinstance(default[0], tuple) or (raw and isinstance(raw[0], (list, tuple))):
            pairs = []
            for item in raw:
                if not isinstance(item, (list, tuple)) or len(item) != 2:
                    raise bad("a list of [pattern, value] pairs")
                pairs.append((str(item[0]), item[1]))
            return tuple(pairs)
        return tuple(str(item) for item in raw)
    return raw
