"""Conversation turns matched word by word: each query word's best match among a turn's token vectors.

A turn's one vector (the mean of its tokens) places "Yeah, I play clarinet! Started when I was
young" far from "What instruments does Melanie play?", but the model's vector of the token
"clarinet" in that sentence lies near the vector of "instruments" in the question (late
interaction). `token_scores` gives each turn, for each content word of the query (not a stop word,
not a name of a speaker), the best cosine among the turn's contextual token vectors other than the
word itself (BM25 already counts the word), averaged with the word's inverse document frequency
among the turns scored as its weight, and the share of the words the turn writes itself;
`word_matches` places both between 0 and 1 for the turn model (explorer.search.memory.rescore), which reads
them as two of its features.

The token vectors come from the embedding model (`encode_tokens`, one run per turn text); a
`TokenVectors` keeps those of the texts met last, so the turns of a vault run through the model
once per engine session.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

from explorer.text.tokenize import STOPWORDS

__all__ = ["CACHE_TEXTS", "EncodeTokens", "TokenVectors", "token_scores", "turn_text", "word_matches"]

#: Texts whose token vectors a TokenVectors keeps (float16: a 40-token turn takes 30 KB, so at most about 60 MB).
CACHE_TEXTS = 2048

Tokens = tuple[tuple[str, ...], np.ndarray]
"""One text's word pieces (special tokens left out) and their L2-normalised vectors, one row each."""
EncodeTokens = Callable[[Sequence[str]], list[Tokens]]


class TokenVectors:
    """The token vectors of the texts met last (at most `limit`), shared by the searches of one session."""

    def __init__(self, limit: int = CACHE_TEXTS) -> None:
        self._limit = limit
        self._kept: OrderedDict[str, Tokens] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def limit(self) -> int:
        """How many texts are kept at most."""
        return self._limit

    def missing(self, texts: Sequence[str]) -> list[str]:
        """The texts of `texts` whose vectors are not kept (each once, in order)."""
        with self._lock:
            return [t for t in dict.fromkeys(texts) if t not in self._kept]

    def get(self, encode: EncodeTokens, texts: Sequence[str]) -> list[Tokens]:
        """Each text's token vectors, running the model (`encode`) once for the texts not kept."""
        unique = list(dict.fromkeys(texts))
        with self._lock:
            # taken now: another search may push them out while the model runs for the others
            have = {t: self._kept[t] for t in unique if t in self._kept}
        missing = [t for t in unique if t not in have]
        # kept as float16, and given as kept: a search reads the same values whether they were made now or before
        if missing:
            have.update((t, (p, v.astype(np.float16))) for t, (p, v) in zip(missing, encode(missing)))
        with self._lock:
            for text in texts:  # kept again, or made: the newest now
                self._kept[text] = have[text]
                self._kept.move_to_end(text)
            while len(self._kept) > self._limit:
                self._kept.popitem(last=False)
        return [have[t] for t in texts]


def _query_words(pieces: Sequence[str], names: set[str]) -> list[int]:
    """Positions of the query's content words (the first piece of each): not stop words, not a speaker's name."""
    out = []
    for i, p in enumerate(pieces):
        if p.startswith("##"):
            continue
        end = i + 1
        while end < len(pieces) and pieces[end].startswith("##"):
            end += 1
        word = p + "".join(x[2:] for x in pieces[i + 1 : end])
        if word.isalpha() and len(word) > 1 and word not in STOPWORDS and word not in names:
            out.append(i)
    return out


def token_scores(query: Tokens, turns: Sequence[Tokens], names: set[str]) -> np.ndarray | None:
    """Per turn, two scores over the query's content words, each word weighted by its idf among `turns`.

    Column 0, the word matches: for each word, the best cosine among the turn's token vectors other
    than the word itself (at least 0): what the turn says *about* the word beyond repeating it.
    Column 1, the words present: the share of the words the turn writes itself (the same word piece).
    None when the query has no content word.
    """
    pieces, qvecs = query
    keep = _query_words(pieces, names)
    if not keep or not turns:
        return None
    n = len(turns)
    words = [pieces[i] for i in keep]
    sets = [set(p) for p, _ in turns]
    idf = np.array(
        [math.log(1.0 + (n - (df := sum(w in s for s in sets)) + 0.5) / (df + 0.5)) for w in words]
    )
    idf /= idf.sum()
    q = qvecs[keep].astype(np.float32)
    out = np.zeros((n, 2))
    for j, (turn_pieces, vecs) in enumerate(turns):
        if not len(vecs):
            continue
        same = np.array([[w == p for p in turn_pieces] for w in words])
        sims = np.where(same, -1.0, q @ vecs.astype(np.float32).T)
        out[j, 0] = float(np.maximum(sims.max(axis=1), 0.0) @ idf)
        out[j, 1] = float(same.any(axis=1) @ idf)
    return out


def turn_text(text: str, owner: str | None) -> str:
    """A turn's text without a leading `<speaker>:`."""
    body = text.strip()
    head, sep, rest = body.partition(":")
    if sep and owner is not None and head.strip().casefold() == owner:
        return rest.strip()
    return body


def word_matches(
    query: str, texts: Sequence[str], names: set[str], encode: EncodeTokens, vectors: TokenVectors
) -> np.ndarray | None:
    """Per text, its two `token_scores` each placed between the lowest (0) and the highest (1) of `texts`.

    None when there are fewer than two texts or the query has no content word.
    """
    if len(texts) < 2:
        return None
    got = vectors.get(encode, [query, *texts])
    scores = token_scores(got[0], got[1:], names)
    if scores is None:
        return None
    lo, hi = scores.min(axis=0), scores.max(axis=0)
    return np.divide(scores - lo, hi - lo, out=np.zeros_like(scores), where=hi > lo)
