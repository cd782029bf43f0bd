r"""Typo correction on sample_vault: real words kept, typos corrected, by the word list used.

Run with ``nice -n 10 python -m benchmarks.typo_words [--lists DIR]``. A labelled list of query
words, each searched alone against sample_vault's BM25 vocabulary (explorer.search.core.typos.Speller):

    real     English words a person types that no note of sample_vault holds (`proof`, `knead`):
             any correction is a false one
    typo1    a vault word of 4-7 letters with one typo (seeded: delete, insert, replace or swap
             two neighbours), and a few typed by hand (`sourdoguh`)
    typo2    a vault word of 8+ letters with two typos (seeded), and a few by hand (`attachmnet`)

A generated typo is left out when it is itself a word of at least two of the English lists (a
real word typed is no typo for a speller without context) or a word of the vault. A typo is
corrected right when its word's folded form is the first candidate searched.

Rows: ``before`` with ``--before FILE`` (an older typos.py, e.g. ``git show main:...``), ``vault
only`` (no word list), ``pyspellchecker`` (the shipped default: its whole English list), and with
``--lists DIR`` the other lists measured (JSON word -> count or zipf files: ``ps_en`` (words seen
100+ times), ``ss_en`` (symspellpy), ``wf_en`` (wordfreq, zipf >= 3 and >= 2.5)). Output: a table per row (false corrections of real
words, typos corrected right, wrong and left, precision of the corrections made) and the lists'
load times.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import re
import string
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import markdown_table, offline_environment
from explorer.search.core.typos import Lexicon, Speller, read_words
from explorer.text.tokenize import fold_word, is_stopword

ROOT = Path(__file__).resolve().parent.parent

#: Real English words absent from sample_vault (checked at run time: one the vault holds is dropped).
REAL = """proof proofing knead kneading loaf crust oven dough yeast rye bake baking pastry flour
mortgage invoice receipt lawyer dentist plumber insurance pension refund landlord
kitten puppy leash vet parrot goldfish aquarium saddle pony
umbrella raincoat blanket pillow mattress curtain carpet ladder hammer screwdriver
bridge tunnel highway airport luggage passport visa ticket
violin trumpet drummer concert lyrics chorus
galaxy comet nebula telescope eclipse
glacier volcano earthquake drought monsoon
cough fever allergy vaccine bandage
spreadsheet laptop keyboard printer router password
homework teacher classroom exam diploma
wedding birthday funeral anniversary
tennis soccer swimming marathon referee
garlic onion pepper cinnamon vinegar mustard
spinach cabbage lettuce cucumber pumpkin
lemon cherry banana mango grape
chimney roof porch balcony garage
""".split()

#: Typos a person makes, typed by hand, with the vault word meant.
HAND_TYPOS = {
    "sourdoguh": "sourdough",
    "hamstr": "hamster",
    "hamsetr": "hamster",
    "fermentaiton": "fermentation",
    "espreso": "espresso",
    "espersso": "espresso",
    "telescpoe": "telescope",
    "bycicle": "bicycle",
    "recipie": "recipe",
    "cofee": "coffee",
    "garedn": "garden",
    "photgraphy": "photography",
    "astronmoy": "astronomy",
    "budgte": "budget",
    "meetnig": "meeting",
    "jounral": "journal",
    "climte": "climate",
    "foldr": "folder",
}


def vault_words(vault: Path) -> dict[str, int]:
    """The vault's words (lower case, letters only) and how many notes hold each."""
    counts: dict[str, int] = {}
    for path in sorted(vault.rglob("*.md")):
        if ".explorer" in path.parts:
            continue
        for w in set(re.findall(r"[a-z]+", path.read_text(encoding="utf-8", errors="replace").lower())):
            counts[w] = counts.get(w, 0) + 1
    return counts


def typo(rng: random.Random, word: str, edits: int) -> str:
    """`word` with `edits` seeded typos (delete, insert, replace, swap neighbours)."""
    w = word
    for _ in range(edits):
        i = rng.randrange(1, len(w) - 1)  # people seldom miss the first letter
        op = rng.choice(("insert", "delete", "replace", "swap"))
        if op == "insert":
            w = w[:i] + rng.choice(string.ascii_lowercase) + w[i:]
        elif op == "delete":
            w = w[:i] + w[i + 1 :]
        elif op == "replace":
            w = w[:i] + rng.choice([c for c in string.ascii_lowercase if c != w[i]]) + w[i + 1 :]
        elif w[i] != w[i + 1]:
            w = w[:i] + w[i + 1] + w[i] + w[i + 2 :]
    return w


def labelled(
    vocab: Mapping[str, float], words: dict[str, int], english: Sequence[set[str]], seed: int = 5
) -> list[tuple[str, str, str]]:
    """(kind, query word, word meant or '') of the labelled list."""
    out = [("real", w, "") for w in REAL if fold_word(w) not in vocab]
    for t, meant in HAND_TYPOS.items():
        if fold_word(t) not in vocab:
            out.append(("typo2" if len(t) >= 8 else "typo1", t, meant))
    rng = random.Random(seed)
    pool = sorted(w for w, n in words.items() if n >= 2 and len(w) >= 4 and not is_stopword(w))
    rng.shuffle(pool)
    made: set[str] = set()
    for kind, lengths, edits, want in (("typo1", range(4, 8), 1, 60), ("typo2", range(8, 30), 2, 60)):
        n = 0
        for w in pool:
            if n >= want:
                break
            if len(w) not in lengths:
                continue
            t = typo(rng, w, edits)
            if t in made or fold_word(t) in vocab or sum(t in e for e in english) >= 2 or len(t) < 4:
                continue
            made.add(t)
            out.append((kind, t, w))
            n += 1
    return out


def measure(
    items: Sequence[tuple[str, str, str]],
    vocab: Any,
    doc_freq: Callable[[str], int],
    lex: Lexicon | None,
    speller: Any = None,
) -> dict[str, Any]:
    """Counts per kind: corrected right (the word meant searched first), corrected wrong, left as typed."""
    speller = speller or Speller(lambda _v: [lex] if lex is not None else [])
    rows: dict[str, dict[str, int]] = {}
    wrong: list[str] = []
    for kind, word, meant in items:
        row = rows.setdefault(kind, {"n": 0, "right": 0, "wrong": 0, "left": 0})
        row["n"] += 1
        found = speller.corrections(word, vocab, doc_freq)
        if not found:
            row["left"] += 1
        elif meant and found[0].candidates[0] == fold_word(meant):
            row["right"] += 1
        else:
            row["wrong"] += 1
            wrong.append(f"{word}->{'/'.join(getattr(found[0], 'shown', ()) or found[0].candidates)}")
    return {"rows": rows, "wrong": wrong}


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print the table."""
    offline_environment()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lists", type=Path, help="folder of other word lists as JSON (ps_en, ss_en, wf_en)")
    ap.add_argument(
        "--before", type=Path, help="an older explorer/search/core/typos.py to measure too (its Speller)"
    )
    args = ap.parse_args(argv)
    from explorer.config import load_settings
    from explorer.engine import open_index

    vault = ROOT / "sample_vault"
    index, _ = open_index(vault, load_settings(vault))
    try:
        with index.snapshot() as snap:
            vocab, doc_freq = snap.lexical.idf(), snap.lexical.doc_freq
            words = vault_words(vault)
            lists: dict[str, tuple[Lexicon | None, float]] = {"vault only": (None, 0.0)}
            t = time.perf_counter()
            shipped = Lexicon(read_words("en"))
            lists["pyspellchecker"] = (shipped, time.perf_counter() - t)
            english = [set(shipped.words)]
            if args.lists:
                for name, keep in (
                    ("ps_en", lambda n: n >= 100),
                    ("ss_en", lambda n: True),
                    ("wf_en", lambda n: n >= 3.0),
                    ("wf_en", lambda n: n >= 2.5),
                ):
                    t = time.perf_counter()
                    data = json.loads((args.lists / f"{name}.json").read_text())
                    listed = Lexicon(w for w, n in data.items() if keep(n))
                    label = {"ps_en": "pyspellchecker (100+)", "ss_en": "symspellpy", "wf_en": "wordfreq"}[
                        name
                    ]
                    if name == "wf_en":
                        label += " (zipf>=3)" if keep(2.9) is False else " (zipf>=2.5)"
                    lists[label] = (listed, time.perf_counter() - t)
                    if name != "wf_en" or keep(2.9) is False:
                        english.append(set(data) if name != "wf_en" else set(listed.words))
            items = labelled(vocab, words, english)
            table = []
            spellers: dict[str, Any] = {}
            if args.before:
                spec = importlib.util.spec_from_file_location("typos_before", args.before)
                assert spec is not None and spec.loader is not None
                old = importlib.util.module_from_spec(spec)
                sys.modules["typos_before"] = old
                spec.loader.exec_module(old)
                lists = {"before": (None, 0.0), **lists}
                spellers["before"] = old.Speller()
            for label, (lex, secs) in lists.items():
                got = measure(items, vocab, doc_freq, lex, spellers.get(label))
                rows = got["rows"]
                real, t1, t2 = rows.get("real", {}), rows.get("typo1", {}), rows.get("typo2", {})
                made = sum(r["right"] + r["wrong"] for r in rows.values())
                right = sum(r["right"] for r in rows.values())
                table.append(
                    [
                        label,
                        len(lex.words) if lex else 0,
                        f"{secs * 1000:.0f}",
                        f"{real.get('wrong', 0)}/{real.get('n', 0)}",
                        f"{t1.get('right', 0)}/{t1.get('n', 0)} ({t1.get('wrong', 0)} wrong)",
                        f"{t2.get('right', 0)}/{t2.get('n', 0)} ({t2.get('wrong', 0)} wrong)",
                        f"{right / made:.3f}" if made else "-",
                    ]
                )
                print(label, "wrong:", " ".join(got["wrong"][:40]))
            print()
            print(
                markdown_table(
                    [
                        "list",
                        "words",
                        "load ms",
                        "real words corrected",
                        "1-edit typos right",
                        "2-edit typos right",
                        "precision",
                    ],
                    table,
                )
            )
    finally:
        index.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
