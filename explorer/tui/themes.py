"""Themes as data: TOML or JSON files turned into `textual.theme.Theme`, with every failure collected."""

from __future__ import annotations

import json
import os
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textual.color import Color, ColorParseError
from textual.theme import Theme


def _shipped_themes_dir() -> Path:
    """The top-level `themes/` folder of a source checkout, else where a wheel installed it."""
    source = Path(__file__).resolve().parent.parent.parent / "themes"
    if source.is_dir():
        return source
    return Path(sys.prefix) / "share" / "explorer" / "themes"


#: The themes shipped with the explorer (the top-level `themes/` folder; installed with the
#: package under `<prefix>/share/explorer/themes`).
SHIPPED_THEMES_DIR = _shipped_themes_dir()

#: Colour keys a theme file may set (all optional but `primary`).
COLOR_KEYS = (
    "primary",
    "secondary",
    "warning",
    "error",
    "success",
    "accent",
    "foreground",
    "background",
    "surface",
    "panel",
    "boost",
)
#: Other keys a theme file may set.
OTHER_KEYS = ("name", "dark", "luminosity_spread", "text_alpha", "variables")

THEME_SUFFIXES = (".toml", ".json")


class ThemeFileError(ValueError):
    """A theme file cannot be turned into a Theme; the message names the key."""


@dataclass(frozen=True, slots=True)
class ThemeLoad:
    """What loading the theme folders produced."""

    themes: tuple[Theme, ...] = ()
    """Themes that loaded, in file-name order (later folders win on equal names)."""
    errors: tuple[str, ...] = field(default_factory=tuple)
    """One line per file that failed: `file: reason`."""


def user_themes_dir() -> Path:
    """`$XDG_CONFIG_HOME/explorer/themes` (default `~/.config/explorer/themes`)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "explorer" / "themes"


def theme_from_mapping(data: dict[str, Any], default_name: str = "") -> Theme:
    """Build a Theme from a parsed theme file.

    Raises:
        ThemeFileError: on a missing `primary`, an unknown key or a colour that does not parse.
    """
    unknown = sorted(set(data) - set(COLOR_KEYS) - set(OTHER_KEYS))
    if unknown:
        raise ThemeFileError(f"unknown key(s) {', '.join(unknown)}")
    name = data.get("name", default_name)
    if not isinstance(name, str) or not name.strip():
        raise ThemeFileError("'name' must be a non-empty string")
    if "primary" not in data:
        raise ThemeFileError("'primary' colour is required")
    colors: dict[str, str] = {}
    for key in COLOR_KEYS:
        if key in data:
            colors[key] = _color(key, data[key])
    dark = data.get("dark", True)
    if not isinstance(dark, bool):
        raise ThemeFileError("'dark' must be true or false")
    variables = data.get("variables", {})
    if not isinstance(variables, dict) or not all(isinstance(v, str) for v in variables.values()):
        raise ThemeFileError("'variables' must be a table of strings")
    extra: dict[str, Any] = {}
    for key in ("luminosity_spread", "text_alpha"):
        if key in data:
            if not isinstance(data[key], (int, float)) or isinstance(data[key], bool):
                raise ThemeFileError(f"'{key}' must be a number")
            extra[key] = float(data[key])
    options: dict[str, Any] = {**colors, **extra}
    return Theme(name=name.strip(), dark=dark, variables={str(k): v for k, v in variables.items()}, **options)


def _color(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ThemeFileError(f"'{key}' must be a colour string")
    try:
        Color.parse(value)
    except ColorParseError:
        raise ThemeFileError(f"'{key}' = {value!r} is not a colour") from None
    return value


def load_theme_file(path: Path) -> Theme:
    """Read one `.toml` or `.json` theme file.

    Raises:
        ThemeFileError: when the file cannot be read or holds a bad theme.
    """
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ThemeFileError(f"cannot read: {exc}") from None
    try:
        data = tomllib.loads(raw) if path.suffix == ".toml" else json.loads(raw)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ThemeFileError(f"not valid {path.suffix[1:].upper()}: {exc}") from None
    if not isinstance(data, dict):
        raise ThemeFileError("must hold a table of keys")
    return theme_from_mapping(data, default_name=path.stem)


def load_themes(dirs: list[Path] | tuple[Path, ...]) -> ThemeLoad:
    """Every theme file of `dirs` (missing folders are fine), with one error line per bad file."""
    themes: dict[str, Theme] = {}
    errors: list[str] = []
    for folder in dirs:
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if path.suffix not in THEME_SUFFIXES or path.name.startswith("."):
                continue
            try:
                theme = load_theme_file(path)
            except ThemeFileError as exc:
                errors.append(f"{path.name}: {exc}")
                continue
            themes[theme.name] = theme
    return ThemeLoad(tuple(themes.values()), tuple(errors))
