"""Vault, index and LLM text as Textual `Content` that is never parsed as markup and never carries a control character."""

from __future__ import annotations

from rich.text import Text
from textual.content import Content, Span
from textual.widgets import Input

from explorer.text.safe import cell_stable, is_safe, safe_text, without_controls


def screen_text(text: object) -> str:
    """`text` as the app shows it: control characters made visible (`safe_text`) and the characters
    whose cell width terminals disagree on dropped (`cell_stable`), so borders never break."""
    return cell_stable(safe_text(text))


class SafeInput(Input):
    """An Input whose value never holds a control character, however it was set (typed, pasted,
    restored from history, filled in from a note): they are removed before it is shown."""

    def validate_value(self, value: str) -> str:
        """Drop control characters from every new value."""
        return without_controls(value)


def plain(text: object, style: str = "") -> Content:
    """`text` as literal Content (markup in it is shown, not applied), control characters made visible."""
    return Content.styled(screen_text(text), style) if style else Content(screen_text(text))


def plain_rich(text: object) -> Text:
    """The same for widgets that still take Rich `Text` (Tree labels, DataTable cells); laid out as
    those widgets lay out a plain string (no wrapping, no line end)."""
    return Text(screen_text(text), no_wrap=True, end="")


def safe_content(content: Content) -> Content:
    """`content` with control characters made visible, its styles kept on the same characters.

    Used on Content assembled from vault text (titles, paths, snippets, terms) just before a
    widget shows it; escapes are longer than the characters they stand for, so spans are moved.
    The CR of a CRLF line end is dropped here (Textual would drop it without moving the spans), and
    so are the characters of uncertain cell width (`cell_stable`).
    """
    text = content.plain
    if is_safe(text) and "\r" not in text and cell_stable(text) is text:
        return content
    # new_offset[i] is where old character i starts in the new text.
    pieces: list[str] = []
    new_offset = [0] * (len(text) + 1)
    pos = 0
    for i, ch in enumerate(text):
        new_offset[i] = pos
        out = "" if ch == "\r" and text[i + 1 : i + 2] == "\n" else cell_stable(safe_text(ch))
        pieces.append(out)
        pos += len(out)
    new_offset[len(text)] = pos
    end = len(text)
    spans = [
        Span(new_offset[min(max(s.start, 0), end)], new_offset[min(max(s.end, 0), end)], s.style)
        for s in content.spans
    ]
    return Content("".join(pieces), spans)
