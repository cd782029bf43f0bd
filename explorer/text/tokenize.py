"""The one tokenizer of every lexical index: Unicode aware, case- and accent-folded, English-stemmed, CJK bigrams."""

from __future__ import annotations

import re
import unicodedata
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


def fold_word(word: str) -> str:
    """The folded form of one word, as `tokenize` would give it."""
    return _fold(word)


def is_stopword(word: str) -> bool:
    """True for a common English function word."""
    return word.casefold() in STOPWORDS
