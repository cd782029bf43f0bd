"""The one tokenizer of every lexical index: Unicode aware, case- and accent-folded, English-stemmed, CJK bigrams."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Set as AbstractSet
from functools import lru_cache

import Stemmer

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+(?:['’][^\W_{_CJK}]+)*", re.UNICODE)
_CJK_RUN = re.compile(rf"^[{_CJK}]+$")
_ANY_CJK = re.compile(rf"[{_CJK}]")

#: Small English stop list used where words are *chosen* (search terms, highlights), never in BM25 itself.
STOPWORDS: frozenset[str] = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few find for from further get had has
    have having he her here hers herself him himself his how i if in into is it its itself just know let me
    more most my myself no nor not now of off on once only or other our ours ourselves out over own same
    she should so some such tell than that the their theirs them themselves then there these they this
    those through to too under until up very was we were what when where which while who whom why will
    with would you your yours yourself yourselves show give please need want like""".split()
)

_stemmer = Stemmer.Stemmer("english")


@lru_cache(maxsize=200_000)
def _fold(word: str) -> str:
    """Lower-case, strip accents and apostrophes, stem English-looking words."""
    if word.isascii():
        # What _fold_unicode gives for ASCII, without its Unicode passes: ASCII has no accents to
        # strip, casefold() is lower(), and the only apostrophe is '.
        w = word.lower().replace("'", "")
        return _stemmer.stemWord(w) if w.isalpha() else w
    return _fold_unicode(word)


def _fold_unicode(word: str) -> str:
    """`_fold` for any word: casefold, NFKD without combining marks, no apostrophes, stem if ASCII letters."""
    w = unicodedata.normalize("NFKD", word.casefold())
    w = "".join(c for c in w if not unicodedata.combining(c)).replace("'", "").replace("’", "")
    if w.isascii() and w.isalpha():
        w = _stemmer.stemWord(w)
    return w


def tokenize(text: str) -> list[str]:
    """Tokens of `text` for BM25 and the classic tools.

    Latin-script words are folded (`Café's` -> `cafe`, `hamsters` -> `hamster`); runs of CJK
    characters give their single characters and their bigrams, so 长城 matches 长城 and 长.
    """
    toks = _TOKEN.findall(text)
    if not _ANY_CJK.search(text):
        return list(map(_fold, toks))
    out: list[str] = []
    append = out.append
    for tok in toks:
        if tok[0] >= "\u3040" and _is_cjk(tok[0]):
            out.extend(tok)
            out.extend(tok[i : i + 2] for i in range(len(tok) - 1))
        else:
            append(_fold(tok))
    return out


def _is_cjk(ch: str) -> bool:
    o = ord(ch)
    return (
        0x3040 <= o <= 0x30FF
        or 0x3400 <= o <= 0x4DBF
        or 0x4E00 <= o <= 0x9FFF
        or 0xAC00 <= o <= 0xD7AF
        or 0xF900 <= o <= 0xFAFF
    )


def tokenize_spans(text: str) -> list[tuple[str, int, int]]:
    """Folded tokens with their character spans in `text` (CJK: one per character, no bigrams)."""
    out: list[tuple[str, int, int]] = []
    for m in _TOKEN.finditer(text):
        tok = m.group(0)
        if _CJK_RUN.match(tok):
            out.extend((c, m.start() + i, m.start() + i + 1) for i, c in enumerate(tok))
        else:
            out.append((_fold(tok), m.start(), m.end()))
    return out


#: One character a token of text without CJK is made of (`_TOKEN`'s class outside CJK runs).
_WORD_CHAR = re.compile(r"[^\W_]")
#: `_TOKEN` on ASCII text (there `[^\W_]` is `[A-Za-z0-9]` and the only apostrophe is ').
_ASCII_TOKEN = re.compile(r"[A-Za-z0-9]+(?:'[A-Za-z0-9]+)*")
_APOSTROPHES = "'’"


@lru_cache(maxsize=4096)
def _forms(text: str) -> dict[str, tuple[str, ...]] | None:
    """The distinct tokens of a text by folded form, {folded: (as written, ...)}; None with CJK.

    ASCII text is read lower-cased: its folding lower-cases first, and lower-casing ASCII keeps
    every offset. Kept for the latest texts: live search finds words in the same passages
    keystroke after keystroke.
    """
    if text.isascii():
        written = list(set(_ASCII_TOKEN.findall(text.lower())))
    elif _ANY_CJK.search(text):
        return None
    else:
        written = list(set(_TOKEN.findall(text)))
    folds = list(map(_fold, written))
    forms: dict[str, tuple[str, ...]] = dict(zip(folds, zip(written)))
    if len(forms) < len(written):  # some forms fold alike (gardens, garden)
        forms = {}
        for tok, raw in zip(folds, written):
            forms[tok] = (*forms.get(tok, ()), raw)
    return forms


def token_spans_of(text: str, folded: AbstractSet[str]) -> list[tuple[str, int, int]]:
    """The spans of `tokenize_spans(text)` whose folded token is in `folded`, in text order.

    Finding a few words in a passage need not fold every token of it: the distinct tokens are
    folded once each (`_forms`), and only the written forms of the wanted words are located
    (`str.find`), each occurrence kept when it is a whole token as `_TOKEN` cuts them: no word
    character, and no apostrophe joined to one, right before it or right after it.
    """
    if not folded:
        return []
    forms = _forms(text)
    if forms is None:
        return [span for span in tokenize_spans(text) if span[0] in folded]
    hay = text.lower() if text.isascii() else text
    word_char = _WORD_CHAR.match
    size = len(hay)
    out: list[tuple[str, int, int]] = []
    for tok in folded:
        for raw in forms.get(tok, ()):
            n = len(raw)
            i = hay.find(raw)
            while i >= 0:
                j = i + n
                joined_before = i > 0 and (
                    word_char(hay, i - 1) or (hay[i - 1] in _APOSTROPHES and i > 1 and word_char(hay, i - 2))
                )
                joined_after = j < size and (
                    word_char(hay, j) or (hay[j] in _APOSTROPHES and j + 1 < size and word_char(hay, j + 1))
                )
                if not joined_before and not joined_after:
                    out.append((tok, i, j))
                i = hay.find(raw, i + 1)
    out.sort(key=_start)
    return out


def _start(span: tuple[str, int, int]) -> int:
    return span[1]


def fold_word(word: str) -> str:
    """The folded form of one word, as `tokenize` would give it."""
    return _fold(word)


def is_stopword(word: str) -> bool:
    """True for a common English function word."""
    return word.casefold() in STOPWORDS
