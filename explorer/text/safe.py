"""Terminal-safe text: the one sanitiser every string from the vault, the index, a file name or an LLM passes
before it reaches a terminal (CLI output, app widgets, titles, notifications), and JSON that escapes the same
characters.

A note can carry escape sequences that clear the screen, retitle the window or write the clipboard
(OSC 52), C1 controls that some terminals obey as escapes (U+009B is CSI), and bidirectional overrides
that make text read differently from what it is. Like `less` and `git`, Explorer shows such characters
as visible escapes instead of sending them:

- C0 controls other than newline and tab in caret notation: ESC is `^[`, NUL `^@`, DEL `^?`;
  a carriage return is kept only as part of a CRLF line end, a lone one is `^M`;
- C1 controls, bidirectional embeddings/overrides/isolates and the line/paragraph separators
  as `<U+009B>`.

Nothing is removed, so what was hidden stays visible. Textual/Rich markup in the text is not a
concern of this function: the app builds `Content` objects from it and never parses it as markup.
"""

from __future__ import annotations

import json
import re
from typing import Any

# C0 except \t \n \r, DEL, a CR not followed by LF, C1, bidi controls, LS/PS.
_UNSAFE = re.compile(
    r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x80-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]|\r(?!\n)"
)
# The same set minus what JSON itself escapes (C0, including CR): only these can reach a terminal raw.
_JSON_UNSAFE = re.compile(r"[\x7f\x80-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def _visible(ch: str) -> str:
    code = ord(ch)
    if code < 0x20:
        return "^" + chr(code + 0x40)
    if code == 0x7F:
        return "^?"
    return f"<U+{code:04X}>"


def _escape(m: re.Match[str]) -> str:
    return _visible(m.group(0))


# What `plain_input` drops: whole terminal escape sequences (CSI, OSC, two-character ESC ones), then C0
# controls but tab and newline (CR and form feeds are handled first), DEL and C1 controls.
_INPUT_ESCAPE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]|(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)|\x1b[@-Z\\-_]"
)
_INPUT_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def plain_input(text: str) -> str:
    """Text an agent or a user writes into the vault, without the control characters that would
    make the note unreadable as text (a NUL makes it binary): terminal escape sequences (colours,
    titles) are dropped whole, line ends become `\\n`, vertical tab and form feed a space, other C0
    controls, DEL and C1 controls are dropped, and a lone surrogate (not encodable as UTF-8)
    becomes U+FFFD. Tab and newline are kept."""
    if text.isprintable():
        return text
    text = _INPUT_ESCAPE.sub("", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x0b", " ").replace("\x0c", " ")
    return _SURROGATE.sub("\ufffd", _INPUT_CONTROL.sub("", text))


def safe_text(text: object) -> str:
    """`text` (any object, via `str`) with every control character shown as a visible escape.

    Newlines, tabs and CRLF line ends are kept; everything else that a terminal could act on
    becomes plain printable text (`\\x1b]0;owned\\x07` -> `^[]0;owned^G`). Safe to apply twice:
    the result contains no character it would change.
    """
    s = text if isinstance(text, str) else str(text)
    if s.isprintable():  # the common case: nothing to do, no regex pass
        return s
    return _UNSAFE.sub(_escape, s)


# Characters whose width terminals disagree on: variation selectors (❤️ is 1 cell in tmux, 2 in
# kitty), zero-width joiners (👨‍👩‍👧 is 2 cells in some terminals, 6 in others), skin-tone
# modifiers and emoji tag characters. Without them every terminal and Rich count the same cells.
_CELL_AMBIGUOUS = re.compile("[\ufe0e\ufe0f\u200d\U0001f3fb-\U0001f3ff\U000e0020-\U000e007f]")


def cell_stable(text: str) -> str:
    """`text` without the few characters whose cell width terminals disagree on (emoji variation
    selectors, zero-width joiners, skin-tone modifiers, tag characters), for screens that pad and
    draw borders: what the app computes as a line's width is then what every terminal draws.

    Each emoji stays visible (a joined sequence shows as its parts); nothing else changes.
    """
    if text.isascii() or _CELL_AMBIGUOUS.search(text) is None:
        return text
    return _CELL_AMBIGUOUS.sub("", text)


# What can act on a terminal from inside a line: C0 but tab, DEL, C1, bidi controls, LS/PS.
_CONTROLS = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]"
)


def has_controls(text: str) -> bool:
    """True when `text` holds a character a terminal could act on (line ends and tabs aside)."""
    return _CONTROLS.search(text.replace("\r\n", "\n").replace("\r", "\n")) is not None


def without_controls(text: str) -> str:
    """`text` on one line with every control character removed (for values typed or pasted into a box)."""
    return _CONTROLS.sub("", text.replace("\n", " ").replace("\t", " ").replace("\r", " "))


def is_safe(text: str) -> bool:
    """True when `safe_text` would leave `text` unchanged."""
    return _UNSAFE.search(text) is None


def safe_json(data: Any, indent: int | None = 2) -> str:
    """`data` as JSON (UTF-8 kept readable) whose text holds no raw control character.

    `json` already writes C0 controls as `\\u001b`; DEL, C1 controls and the bidi and separator
    characters are escaped the same way here, so the output is valid JSON that decodes to the
    exact original strings and is still safe to print.
    """
    text = json.dumps(data, ensure_ascii=False, indent=indent)
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


# Select Graphic Rendition (colour, bold): the only escape sequence Explorer's own CLI output writes.
_SGR = re.compile(r"\x1b\[[0-9;]*m")


class SafeStream:
    """A text stream wrapper that passes everything written through `safe_text`.

    The command line wraps stdout and stderr in it, so a string that reached a `print` without
    being made safe still cannot act on the terminal. With `allow_sgr`, complete colour/bold
    sequences (`ESC [ ... m`, which Explorer's renderers emit on a terminal) pass unchanged; the
    renderers make vault text safe before inserting it, so no such sequence comes from a note.
    """

    def __init__(self, stream: Any, allow_sgr: bool = False) -> None:
        self._stream = stream
        self._allow_sgr = allow_sgr

    def write(self, text: str) -> int:
        """Write `text` with control characters made visible; returns len(text) like a stream."""
        if self._allow_sgr and "\x1b" in text:
            out, pos = [], 0
            for m in _SGR.finditer(text):
                out.append(safe_text(text[pos : m.start()]))
                out.append(m.group(0))
                pos = m.end()
            out.append(safe_text(text[pos:]))
            self._stream.write("".join(out))
        else:
            self._stream.write(safe_text(text))
        return len(text)

    @property
    def raw(self) -> Any:
        """The wrapped stream, for output that is Explorer's own (a progress bar's carriage return)."""
        return self._stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
