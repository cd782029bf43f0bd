"""What a person's note states of their own: its sentences less the questions and those said to someone else.

In a conversation both speakers use the same words about one thing, but only one of them did it:
"I ran a charity race last Saturday" (Melanie) and "That charity race sounds great, Mel! I'm proud
of you" or "What motivated you to run it?" (Caroline). A question about what Caroline did after
*her* charity race finds her turns holding its words, yet they only ask about or answer to what
Melanie did. The agent-memory parts of the quality judgement (explorer.search.memory.signals
`named_coverage`, `other_coverage`) therefore read a note's *statements*: its sentences that are
not questions and not addressed to someone else (second-person words without first-person ones).
The pronoun lists are English, as the folded tokens of explorer.text.tokenize spell them.
"""

from __future__ import annotations

import re

from explorer.text.tokenize import tokenize

#: First-person words (folded): a sentence holding one speaks of the speaker too.
FIRST_PERSON = frozenset(
    {
        "i",
        "im",
        "ive",
        "id",
        "ill",
        "me",
        "my",
        "mine",
        "myself",
        "we",
        "weve",
        "us",
        "our",
        "ours",
        "ourselves",
    }
)
#: Second-person words (folded; "you're" folds to "your"): a sentence holding only these speaks to someone.
SECOND_PERSON = frozenset(
    {"you", "your", "yours", "yourself", "yourselves", "youv", "youll", "youd", "yall", "u", "ur"}
)
#: Sentence ends: after ., ! or ? and a space, or at a blank line.
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n\s*\n")
#: Closing characters read past when asking whether a sentence ends with a question mark.
_CLOSERS = " \t\r\n)]}\"'*_"


def is_question(sentence: str) -> bool:
    """True when the sentence ends with a question mark (closing brackets and quotes read past)."""
    return sentence.rstrip(_CLOSERS).endswith("?")


def addressed(tokens: set[str]) -> bool:
    """True when a sentence's tokens hold second-person words and no first-person ones."""
    return bool(tokens & SECOND_PERSON) and not tokens & FIRST_PERSON


def stated_tokens(text: str) -> set[str]:
    """The folded tokens of `text`'s statements: every sentence but questions and addressed ones.

    >>> sorted(stated_tokens("Caroline: That race sounds great! Did you win? I'm proud of you."))
    ['carolin', 'great', 'im', 'of', 'proud', 'race', 'sound', 'that', 'you']
    """
    out: set[str] = set()
    for sentence in _SENTENCE.split(text):
        tokens = set(tokenize(sentence))
        if tokens and not is_question(sentence) and not addressed(tokens):
            out |= tokens
    return out
