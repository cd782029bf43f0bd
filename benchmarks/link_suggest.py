r"""Link suggestions while writing: are the notes a paragraph links to in the writer's top 5?

Run with ``python -m benchmarks.link_suggest [VAULT ...]`` (quality),
``python -m benchmarks.link_suggest --diagnose [VAULT ...]`` (what bounds "links removed") and
``python -m benchmarks.link_suggest --latency [--size 10000]`` (speed).

**Quality.** On the generated Obsidian vault (benchmarks.obsidian_vault, seeded) and on every
vault named on the command line, each paragraph that links to other notes is taken from its note
and its links are hidden, in two variants:

- A, link words kept: ``[[Note|words]]`` -> ``words``, ``[[Note]]`` -> ``Note``, ``[text](Note.md)``
  -> ``text`` (the writer has typed the words but not the brackets);
- B, links removed (the writer has not named the note at all).

For every distinct note the paragraph links to, the cursor is put where that link stood and the
writer's own call runs on the note's text (``LinkSuggester.suggest(text, cursor, path=...)``, the
hybrid pipeline of the index behind it, embeddings on). Recall@5 is the share of links whose note
is in the first five suggestions. Beside it: the writer's former call (the pipeline on the
paragraph, one pass, the note itself left out) and plain BM25 on the same paragraph (notes by
their best shard). Embeds and links to missing notes or to the note itself do not count. The
related notes come in the search's order here: the scorer the writer fits on a vault's own links
(``LinkSuggester.prepare``) is measured, fitted on the other paragraphs, by
``benchmarks.link_suggest_learned``.

What the related search reads (``QUERY_SCOPE``: the paragraph, the sentence at the cursor, or both)
and the weights of the mention ranking (``SENTENCE_WEIGHT``, ``FUZZY_FACTOR``) are chosen on a grid by
leave-one-out over five folds of paragraphs (by a hash of the note path and paragraph number):
each fold is scored with the weights best on the other four; the left-out recall is printed beside
the in-sample one (the grid's best on all paragraphs).

**Latency.** On the 10k-note vault of benchmarks.speed (stand-in vectors, real query model), a
person types at the end of a paragraph: one word is added, then the list is asked for, as the
writer does after a pause; eight words go into one paragraph before the next is picked. Picking
a paragraph opens its note as the writer does (``LinkSuggester.prepare`` embeds its sentences
ahead; that CPU time is reported on its own, and ``--no-prepare`` leaves it out, so the first word
embeds its paragraph); the CPU time of the first word's call is reported on its own too. Timed: the suggestion call (mentions + one hybrid pass) and, paired in
the same loop (alternating which runs first), the former related-only call; reported as median
and p95, and the time from the pause to the list: ``RELATED_DELAY`` + the mentions (the named
notes show then) and ``RELATED_DELAY`` + the whole call (the list complete); after a key that ends a
word the writer waits ``WORD_END_DELAY`` instead (reported too). No search is answered
from the cache of recent searches (every typed word changes the paragraph).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import re
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import obsidian_vault
from benchmarks.common import (
    DEFAULT_OUT,
    log,
    machine,
    markdown_table,
    offline_environment,
    pct,
    summary,
    write_json,
)

K = 5
FOLDS = 5
#: Latency: words typed at the end of one paragraph before moving to another.
WORDS_PER_PARAGRAPH = 8
GRID_SENTENCE = (1.0, 1.5, 2.0, 3.0, 5.0)
GRID_FUZZY = (0.5, 0.8, 1.0)
GRID_SCOPE = ("paragraph", "sentence", "both")


class MemoPipeline:
    """The pipeline with its answers kept by call, so a grid of weights re-ranks without searching again."""

    def __init__(self, pipeline: Any) -> None:
        self.pipeline = pipeline
        self.index = pipeline.index
        self._memo: dict[tuple, Any] = {}

    def search(self, query: str, k: int | None = None, **kwargs: Any) -> Any:
        key = (query, k, tuple(sorted((n, v) for n, v in kwargs.items() if n != "cancelled")))
        if key not in self._memo:
            self._memo[key] = self.pipeline.search(query, k, **kwargs)
        return self._memo[key]


def _paragraphs(text: str, start: int) -> list[tuple[int, int]]:
    """(start, end) of the blank-line separated paragraphs of text[start:]."""
    out = []
    for m in re.finditer(r"(?:[^\n]|\n(?!\s*\n))+", text[start:]):
        out.append((start + m.start(), start + m.end()))
    return out


def hide_links(text: str, links: Sequence[Any], keep_words: bool) -> tuple[str, list[int]]:
    """`text` with `links` replaced by their words (or by nothing), and each link's end offset in the result."""
    from explorer.search.writing.suggest import remove_links

    return remove_links(text, links, keep_words)


def cases(index: Any) -> list[dict[str, Any]]:
    """Every (note, paragraph, linked note) of the vault, with both hidden texts and cursors."""
    graph = index.links()
    out = []
    for path in sorted(index.note_titles()):
        note = index.note(path)
        if note is None:
            continue
        for p_no, (lo, hi) in enumerate(_paragraphs(note.text, note.body_start)):
            links = [ln for ln in note.links if lo <= ln.start < hi and not ln.embed]
            if not links:
                continue
            fold = int(hashlib.blake2b(f"{path}#{p_no}".encode(), digest_size=4).hexdigest(), 16) % FOLDS
            variants = {}
            for name, keep in (("A", True), ("B", False)):
                hidden, ends = hide_links(note.text, links, keep)
                variants[name] = (hidden, ends)
            seen: set[str] = set()
            for i, ln in enumerate(sorted(links, key=lambda x: x.start)):
                target = graph.resolve(ln.target, path, ln.markdown) if ln.target else None
                if target is None or target == path or target in seen or not target.lower().endswith(".md"):
                    continue
                seen.add(target)
                out.append(
                    {
                        "note": path,
                        "paragraph": p_no,
                        "fold": fold,
                        "target": target,
                        "A": (variants["A"][0], variants["A"][1][i]),
                        "B": (variants["B"][0], variants["B"][1][i]),
                    }
                )
    return out


def bm25_top(index: Any, query: str, own: str, k: int = K) -> list[str]:
    """Plain BM25 on `query`: notes by their best shard, the own note left out."""
    from explorer.text.tokenize import tokenize

    paths: list[str] = []
    for node_id, _score in index.bm25.top(tokenize(query), 200):
        shard = index.shards.get(node_id)
        if shard is None or shard.path == own or shard.path in paths:
            continue
        paths.append(shard.path)
        if len(paths) == k:
            break
    return paths


def quality(
    vault: Path, cache: Path, scope: str | None = None, sentence_vectors: bool | None = None
) -> dict[str, Any]:
    """All rows of the quality table for one vault."""
    from benchmarks.quality import open_vault_index
    from explorer.engine import make_pipeline
    from explorer.search.writing.suggest import LinkSuggester, paragraph_bounds, plain_query

    index, settings, info = open_vault_index(vault, {"index.cache_dir": str(cache)}, embeddings=True)
    base = make_pipeline(index, settings)
    pipeline = MemoPipeline(base)
    todo = cases(index)
    sug = (
        LinkSuggester(base)
        if sentence_vectors is None
        else LinkSuggester(base, sentence_vectors=sentence_vectors)
    )
    scopes = GRID_SCOPE if scope is None else (scope,)
    sug.related = MemoPipeline(sug.related)
    log(f"{vault.name}: {len(todo)} links in {len({(c['note'], c['paragraph']) for c in todo})} paragraphs")
    hits: dict[str, dict[str, list[int]]] = {}
    grid = [(sc, s, f) for sc in scopes for s in GRID_SENTENCE for f in GRID_FUZZY]
    grid_hits: dict[tuple[str, float, float], dict[str, list[int]]] = {g: {"A": [], "B": []} for g in grid}
    misses: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for n, case in enumerate(todo):
        for variant in ("A", "B"):
            text, cursor = case[variant]
            for g in grid:
                sug.scope, sug.sentence_weight, sug.fuzzy_factor = g
                top = [s.path for s in sug.suggest(text, cursor, path=case["note"]).items[:K]]
                grid_hits[g][variant].append(int(case["target"] in top))
            start, end = paragraph_bounds(text, cursor)
            query = plain_query(text[start:end])
            old = pipeline.search(query, k=9, dense=True, two_pass=False, rerank=False, record=False)
            old_top = [r.document_path for r in old.results if r.document_path != case["note"]][:K]
            hits.setdefault(f"former writer call / {variant}", {}).setdefault("all", []).append(
                int(case["target"] in old_top)
            )
            hits.setdefault(f"BM25 / {variant}", {}).setdefault("all", []).append(
                int(case["target"] in bm25_top(index, query, case["note"]))
            )
        if n % 200 == 0:
            log(f"  {n}/{len(todo)} ({time.perf_counter() - t0:.0f} s)")
    folds = [c["fold"] for c in todo]

    def total(g: tuple[str, float, float], keep: Any) -> int:
        return sum(h for v in ("A", "B") for h, f in zip(grid_hits[g][v], folds) if keep(f))

    best_all = max(grid, key=lambda g: (total(g, lambda f: True), g == _default()))
    left_out: dict[str, list[int]] = {"A": [], "B": []}
    chosen = {}
    for fold in range(FOLDS):
        best = max(grid, key=lambda g, held=fold: (total(g, lambda f: f != held), g == _default()))
        chosen[fold] = best
        for v in ("A", "B"):
            left_out[v].extend(h for h, f in zip(grid_hits[best][v], folds) if f == fold)
    default = _default() if scope is None else (scope, *_default()[1:])
    for c, hit_a in zip(todo, grid_hits[default]["A"]):
        if not hit_a:
            misses.append({"note": c["note"], "target": c["target"], "variant": "A"})
    n_links = len(todo)
    rows = {
        "suggest (shipped weights)": {v: _rate(grid_hits[default][v]) for v in ("A", "B")},
        "suggest, in-sample best weights": {v: _rate(grid_hits[best_all][v]) for v in ("A", "B")},
        "suggest, weights left out (5 folds)": {v: _rate(left_out[v]) for v in ("A", "B")},
        "former writer call": {v: _rate(hits[f"former writer call / {v}"]["all"]) for v in ("A", "B")},
        "BM25": {v: _rate(hits[f"BM25 / {v}"]["all"]) for v in ("A", "B")},
    }
    index.close()
    return {
        "links": n_links,
        "paragraphs": len({(c["note"], c["paragraph"]) for c in todo}),
        "rows": rows,
        "shipped": default,
        "in_sample_best": best_all,
        "fold_choices": {str(k): v for k, v in chosen.items()},
        "grid": {"/".join(map(str, g)): {v: _rate(grid_hits[g][v]) for v in ("A", "B")} for g in grid},
        "misses_A": misses[:40],
        "index": info,
    }


def leave_one_vault_out(results: dict[str, dict[str, Any]]) -> list[tuple[str, str, dict[str, float | None]]]:
    """For each vault (when there are several): the grid point best on the other vaults (links found,
    both variants) and this vault's recall there."""
    out: list[tuple[str, str, dict[str, float | None]]] = []
    if len(results) < 2:
        return out
    default = "/".join(map(str, _default()))
    for name, res in results.items():
        others = [r for n, r in results.items() if n != name]
        best = max(
            res["grid"],
            key=lambda g: (
                sum(r["links"] * (r["grid"][g]["A"] + r["grid"][g]["B"]) for r in others),
                g == default,
            ),
        )
        out.append((name, best, res["grid"][best]))
    return out


def _default() -> tuple[str, float, float]:
    from explorer.search.writing.suggest import FUZZY_FACTOR, QUERY_SCOPE, SENTENCE_WEIGHT

    return (QUERY_SCOPE, SENTENCE_WEIGHT, FUZZY_FACTOR)


def _rate(hits: Sequence[int]) -> float | None:
    return round(sum(hits) / len(hits), 4) if hits else None


# -- what bounds "links removed" ----------------------------------------------------------------
def diagnose(vault: Path, cache: Path) -> dict[str, Any]:
    """For links removed (B): where the linked note ranks in the writer's list, and whether the text
    around the removed link names it at all (a word of one of its names in the sentence at the
    cursor, in the paragraph). Read beside recall: a vault whose link sentences rarely hold such a
    word says less about the linked note than people's text does."""
    from benchmarks.quality import open_vault_index
    from explorer.engine import make_pipeline
    from explorer.search.writing.suggest import LinkSuggester, paragraph_bounds, sentence_bounds
    from explorer.text.tokenize import tokenize

    index, settings, info = open_vault_index(vault, {"index.cache_dir": str(cache)}, embeddings=True)
    sug = LinkSuggester(make_pipeline(index, settings))
    with index.snapshot() as snap:
        names = {
            p: frozenset().union(*snap.name_tokens(n)) for p, n in snap.notes.items() if snap.name_tokens(n)
        }
    ranks: list[int] = []
    in_sentence: list[int] = []
    in_paragraph: list[int] = []
    for case in cases(index):
        text, cursor = case["B"]
        order = [s.path for s in sug.suggest(text, cursor, path=case["note"], k=60).items]
        ranks.append(order.index(case["target"]) + 1 if case["target"] in order else 0)
        lo, hi = paragraph_bounds(text, cursor)
        s_lo, s_hi = sentence_bounds(text, cursor, lo, hi)
        own = names.get(case["target"], frozenset())
        in_sentence.append(int(bool(own & set(tokenize(text[s_lo:s_hi])))))
        in_paragraph.append(int(bool(own & set(tokenize(text[lo:hi])))))
    index.close()
    missed = [r for r in ranks if not 1 <= r <= K]
    buckets = {
        "6-10": sum(6 <= r <= 10 for r in missed),
        "11-20": sum(11 <= r <= 20 for r in missed),
        "21-60": sum(21 <= r <= 60 for r in missed),
        "not in the first 60": sum(r == 0 for r in missed),
    }
    hit = [i for i, r in enumerate(ranks) if 1 <= r <= K]
    miss = [i for i, r in enumerate(ranks) if not 1 <= r <= K]

    def share(flags: list[int], among: list[int]) -> float | None:
        return round(sum(flags[i] for i in among) / len(among), 3) if among else None

    return {
        "links": len(ranks),
        "recall_at_5_removed": _rate([int(1 <= r <= K) for r in ranks]),
        "missed_by_rank": buckets,
        "name_word_in_sentence": {
            "all": share(in_sentence, list(range(len(ranks)))),
            "found": share(in_sentence, hit),
            "missed": share(in_sentence, miss),
        },
        "name_word_in_paragraph": {
            "all": share(in_paragraph, list(range(len(ranks)))),
            "found": share(in_paragraph, hit),
            "missed": share(in_paragraph, miss),
        },
        "index": info,
    }


# -- latency ------------------------------------------------------------------------------------
def _stand_in_links(index: Any, rng: random.Random, n: int) -> list[tuple[str, str, int, str]]:
    """`n` links as `suggest.training_links` gives them, for a vault whose links name no note: the
    end of a random paragraph of a random note, and a random note as the linked one."""
    paths = sorted(index.note_titles())
    out: list[tuple[str, str, int, str]] = []
    while len(out) < n:
        note = index.note(rng.choice(paths))
        paras = _paragraphs(note.text, note.body_start) if note is not None else []
        if note is not None and paras:
            out.append((note.path, note.text, rng.choice(paras)[1], rng.choice(paths)))
    return out


def latency(
    size: int,
    out: Path,
    edits: int,
    seed: int = 5,
    prepare: bool = True,
    learn: bool = True,
    during_fit: bool = False,
) -> dict[str, Any]:
    """Time the writer's call after a typed word, at `size` notes, paired with the former call.

    With `prepare`, moving to a paragraph opens its note as the writer does (`LinkSuggester.prepare`
    embeds the note's sentences ahead, timed on its own); without, the first word typed in a
    paragraph embeds every sentence of it. With `learn`, the related notes' scorer is fitted first
    (as the writer's first `prepare` does; its wall and CPU time reported), and the same call
    without a scorer runs in the same loop too (`plain`: what the scorer costs, paired). With
    `during_fit`, every other paragraph is typed while the fit's calls run in a thread
    (`training_groups` on stand-in links), against the paragraphs typed without it."""
    import threading

    from benchmarks import speed
    from explorer.config import load_settings
    from explorer.engine import make_pipeline, open_index
    from explorer.search.writing.suggest import LinkSuggester, paragraph_bounds, plain_query
    from explorer.tui.screens.writer import RELATED_DELAY, WORD_END_DELAY

    vocab = speed.vocabulary()
    vault = speed.ensure_vault(size, out, vocab)
    wordvecs = speed.word_vectors(vocab, out)
    # Every typed word changes the paragraph: no call may be answered from the cache of recent searches.
    settings = load_settings(vault, {"experimental.cache_size": 0})
    t = time.perf_counter()
    index, _report = open_index(vault, settings)
    opened = round(time.perf_counter() - t, 1)
    standin = speed.install_standin_vectors(index, wordvecs, vocab) if index.pending() else None
    index.embedder()
    pipeline = make_pipeline(index, settings)
    suggester = LinkSuggester(pipeline, learn=learn)
    plain = LinkSuggester(pipeline, learn=False) if learn else None
    fitted: dict[str, Any] = {}
    if learn:
        t, c = time.perf_counter(), time.process_time()
        scorer = suggester.fit_scorer()
        fitted = {
            "wall_s": round(time.perf_counter() - t, 2),
            "cpu_s": round(time.process_time() - c, 2),
            "rows": scorer.rows if scorer else 0,
            "positives": scorer.positives if scorer else 0,
            "weights": scorer.as_dict() if scorer else None,
        }
        if scorer is None:
            # Nothing to fit on (this vault's links name no note): time what the fit asks, 200 links'
            # worth of calls on paragraphs not seen before, and rank with a stand-in scorer.
            import numpy as np

            from explorer.search.writing.linkrank import FEATURES, LinkScorer
            from explorer.search.writing.suggest import TRAIN_LINKS

            probe = random.Random(seed + 1)
            t, c = time.perf_counter(), time.process_time()
            suggester.training_groups(_stand_in_links(index, probe, TRAIN_LINKS))
            fitted["stand_in"] = {
                "calls": TRAIN_LINKS,
                "wall_s": round(time.perf_counter() - t, 2),
                "cpu_s": round(time.process_time() - c, 2),
            }
            n = len(FEATURES)
            suggester.scorer = LinkScorer(np.zeros(n), np.ones(n), np.ones(n), 0.0)
        log(f"  scorer fitted: {fitted}")
    rng = random.Random(seed)
    paths = sorted(index.note_titles())
    words = vocab[100:5000]
    t = time.perf_counter()
    suggester.refresh()
    build_ms = (time.perf_counter() - t) * 1000
    new_ms: list[float] = []
    old_ms: list[float] = []
    mention_ms: list[float] = []
    new_cpu: list[float] = []  # CPU time of this process: what the call costs whatever the other processes do
    old_cpu: list[float] = []
    cold_cpu: list[float] = []  # the first word typed in a paragraph
    prepare_cpu: list[float] = []  # opening the note: its sentences embedded ahead
    plain_ms: list[float] = []  # the same call without the scorer
    plain_cpu: list[float] = []
    text, cursor, path = "", 0, ""
    busy_ms: list[float] = []  # the call while the fit's calls run beside it (during_fit)
    idle_ms: list[float] = []
    stop_fit = threading.Event()
    fit_thread: threading.Thread | None = None

    def fit_beside() -> None:
        probe = random.Random(seed + 2)
        while not stop_fit.is_set():
            suggester.training_groups(_stand_in_links(index, probe, 20), cancelled=stop_fit.is_set)

    for i in range(edits + 5):
        if during_fit and i % WORDS_PER_PARAGRAPH == 0:
            if fit_thread is not None:
                stop_fit.set()
                fit_thread.join()
                fit_thread = None
            if (i // WORDS_PER_PARAGRAPH) % 2 == 0:
                stop_fit.clear()
                fit_thread = threading.Thread(target=fit_beside, daemon=True)
                fit_thread.start()
        if i % WORDS_PER_PARAGRAPH == 0:
            # A person moves to another paragraph and types WORDS_PER_PARAGRAPH words at its end.
            while True:
                path = rng.choice(paths)
                note = index.note(path)
                text = note.text if note is not None else ""
                paras = _paragraphs(text, note.body_start if note is not None else 0)
                if paras:
                    break
            _lo, cursor = rng.choice(paras)
            if prepare:
                c = time.process_time()
                suggester.prepare(text, cursor)
                if i >= 5:
                    prepare_cpu.append((time.process_time() - c) * 1000)
                if plain is not None:
                    plain.prepare(text, cursor)
        add = " " + rng.choice(words)
        text = text[:cursor] + add + text[cursor:]
        cursor += len(add)
        # Rotate which call runs first, so none always meets a warm cache.
        calls = ["new", "old"] if plain is None else ["new", "old", "plain"]
        calls = calls[i % len(calls) :] + calls[: i % len(calls)]
        for which in calls:
            t = time.perf_counter()
            c = time.process_time()
            if which == "new":
                res = suggester.suggest(text, cursor, path=path)
                took = (time.perf_counter() - t) * 1000
                if i >= 5:
                    new_ms.append(took)
                    (busy_ms if fit_thread is not None else idle_ms).append(took)
                    new_cpu.append((time.process_time() - c) * 1000)
                    mention_ms.append(res.timings_ms["mentions"])
                    if i % WORDS_PER_PARAGRAPH == 0:
                        cold_cpu.append(new_cpu[-1])
            elif which == "plain" and plain is not None:
                plain.suggest(text, cursor, path=path)
                if i >= 5:
                    plain_ms.append((time.perf_counter() - t) * 1000)
                    plain_cpu.append((time.process_time() - c) * 1000)
            else:
                start, end = paragraph_bounds(text, cursor)
                pipeline.search(plain_query(text[start:end]), k=9, two_pass=False, rerank=False, record=False)
                if i >= 5:
                    old_ms.append((time.perf_counter() - t) * 1000)
                    old_cpu.append((time.process_time() - c) * 1000)
    if fit_thread is not None:
        stop_fit.set()
        fit_thread.join()
    ratios = [a / b for a, b in zip(new_ms, old_ms) if b > 0]
    scorer_ratios = [a / b for a, b in zip(new_cpu, plain_cpu) if b > 0]
    delay_ms = RELATED_DELAY * 1000
    report = {
        "notes": index.note_count(),
        "open_s": opened,
        "standin_vectors": standin,
        "name_table_build_ms": round(build_ms, 1),
        "suggest_ms": summary(new_ms),
        "mentions_ms": summary(mention_ms),
        "former_call_ms": summary(old_ms),
        "ratio_median": round(statistics.median(ratios), 3) if ratios else None,
        "suggest_cpu_ms": summary(new_cpu),
        "suggest_cpu_first_word_ms": summary(cold_cpu),
        "prepare": prepare,
        "prepare_cpu_ms": summary(prepare_cpu),
        "former_call_cpu_ms": summary(old_cpu),
        "scorer_fit": fitted,
        "while_fitting_ms": summary(busy_ms) if during_fit and busy_ms else None,
        "not_fitting_ms": summary(idle_ms) if during_fit and idle_ms else None,
        "without_scorer_ms": summary(plain_ms) if plain_ms else None,
        "without_scorer_cpu_ms": summary(plain_cpu) if plain_cpu else None,
        "cpu_ratio_to_without_scorer_median": round(statistics.median(scorer_ratios), 3)
        if scorer_ratios
        else None,
        "related_delay_ms": delay_ms,
        "pause_to_list_ms": {
            "median": round(delay_ms + statistics.median(new_ms), 1),
            "p95": round(delay_ms + summary(new_ms)["p95"], 1),
        },
        "word_end_delay_ms": WORD_END_DELAY * 1000,
        "word_end_to_list_ms": {
            "median": round(WORD_END_DELAY * 1000 + statistics.median(new_ms), 1),
            "p95": round(WORD_END_DELAY * 1000 + summary(new_ms)["p95"], 1),
        },
        "pause_to_named_ms": {
            "median": round(delay_ms + statistics.median(mention_ms), 1),
            "p95": round(delay_ms + summary(mention_ms)["p95"], 1),
        },
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "runtime": index.runtime,
        "model_state": index.model_state,
    }
    index.close()
    return report


def add_vault_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments `vaults_of` reads: vaults named, output folder, seed, no generated vault."""
    parser.add_argument(
        "vaults",
        nargs="*",
        type=Path,
        help="more vaults to measure (read only; the index goes to the work folder)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default bench-out/)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the generated vault")
    parser.add_argument("--no-generated", action="store_true", help="skip the generated vaults")


def vaults_of(
    args: argparse.Namespace, work: Path, styles: Sequence[str] | None = None
) -> list[tuple[str, Path]]:
    """The generated vaults (of link `styles`, by default as `--links` asks; written under `work`), then
    the vaults named on the command line; (name, resolved path) each."""
    vaults: list[tuple[str, Path]] = []
    if not args.no_generated:
        if styles is None:
            styles = obsidian_vault.LINK_STYLES if args.links == "both" else (args.links,)
        for style in styles:
            generated = work / f"obsidian-vault-{args.seed}-{style}"
            obsidian_vault.write(generated, args.seed, links=style)
            vaults.append((f"generated, {style} links (seed {args.seed})", generated.resolve()))
    vaults.extend((v.name, v.resolve()) for v in args.vaults)
    return vaults


def vault_key(vault: Path) -> str:
    """A short key of a vault's path: its index cache is `cache-<key>` in the work folder."""
    return hashlib.blake2b(str(vault).encode(), digest_size=4).hexdigest()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.link_suggest", description=__doc__.splitlines()[0]
    )
    add_vault_arguments(parser)
    parser.add_argument(
        "--links",
        choices=("random", "text", "both"),
        default="both",
        help="which generated vaults: random links, links that follow the text, or both (default)",
    )
    parser.add_argument("--latency", action="store_true", help="measure the latency at --size notes instead")
    parser.add_argument(
        "--diagnose",
        action="store_true",
        help="links removed: where the linked note ranks, and whether the text around the link names it",
    )
    parser.add_argument("--size", type=int, default=10_000, help="notes of the latency vault")
    parser.add_argument(
        "--no-prepare",
        action="store_true",
        help="latency: no sentences embedded ahead when a note is opened (the first word embeds its paragraph)",
    )
    parser.add_argument(
        "--no-learn",
        action="store_true",
        help="latency: no scorer fitted on the vault's links (the related search's order, as before)",
    )
    parser.add_argument(
        "--during-fit",
        action="store_true",
        help="latency: every other paragraph typed while the scorer's fit runs beside it",
    )
    parser.add_argument("--edits", type=int, default=100, help="typed words timed in the latency run")
    parser.add_argument(
        "--scope",
        choices=("paragraph", "sentence", "both"),
        help="only this related-search scope (default: the grid of all three)",
    )
    parser.add_argument(
        "--whole-text-vectors",
        action="store_true",
        help="the related search embeds its whole query at each call (not sentence by sentence)",
    )
    parser.add_argument(
        "--related",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting of the related search besides RELATED_SETTINGS (e.g. experimental.feedback_shards=0)",
    )
    parser.add_argument("--tag", default="", help="suffix of the output file name")
    args = parser.parse_args(argv)
    offline_environment()
    if args.related:
        import json

        from explorer.search.writing import suggest

        for item in args.related:
            key, _, value = item.partition("=")
            suggest.RELATED_SETTINGS[key.strip()] = json.loads(value)
    work = args.out / "link-suggest"
    report: dict[str, Any] = {"machine": machine()}
    if args.latency:
        res = latency(
            args.size,
            args.out,
            args.edits,
            prepare=not args.no_prepare,
            learn=not args.no_learn,
            during_fit=args.during_fit,
        )
        report["latency"] = res
        print(
            markdown_table(
                [
                    "notes",
                    "call median / p95 ms",
                    "former call median / p95",
                    "ratio (median)",
                    "pause -> named notes median / p95",
                    "pause -> whole list median / p95",
                    "after a finished word -> whole list",
                    "load",
                ],
                [
                    [
                        res["notes"],
                        f"{res['suggest_ms']['median']} / {res['suggest_ms']['p95']}",
                        f"{res['former_call_ms']['median']} / {res['former_call_ms']['p95']}",
                        res["ratio_median"],
                        f"{res['pause_to_named_ms']['median']} / {res['pause_to_named_ms']['p95']}",
                        f"{res['pause_to_list_ms']['median']} / {res['pause_to_list_ms']['p95']}",
                        f"{res['word_end_to_list_ms']['median']} / {res['word_end_to_list_ms']['p95']}",
                        res["load_average"][0],
                    ]
                ],
            )
        )
        print(
            f"CPU time per call (this process, all its threads): suggest {res['suggest_cpu_ms']['median']} / "
            f"{res['suggest_cpu_ms']['p95']} ms (first word in a paragraph "
            f"{res['suggest_cpu_first_word_ms'].get('median')} / {res['suggest_cpu_first_word_ms'].get('p95')}; "
            f"opening a note, sentences embedded ahead: {res['prepare_cpu_ms'].get('median')} / "
            f"{res['prepare_cpu_ms'].get('p95')}), "
            f"former call {res['former_call_cpu_ms']['median']} / "
            f"{res['former_call_cpu_ms']['p95']} ms (median / p95)"
        )
        for key in (
            "scorer_fit",
            "without_scorer_cpu_ms",
            "cpu_ratio_to_without_scorer_median",
            "while_fitting_ms",
            "not_fitting_ms",
        ):
            if res.get(key):
                print(f"{key}: {res[key]}")
    elif args.diagnose:
        rows = []
        for name, vault in vaults_of(args, work):
            res = diagnose(vault, work / f"cache-{vault_key(vault)}")
            report[name] = res
            rows.append(
                [
                    name,
                    res["links"],
                    pct(res["recall_at_5_removed"]),
                    " / ".join(f"{k}: {v}" for k, v in res["missed_by_rank"].items()),
                    " / ".join(pct(res["name_word_in_sentence"][k]) for k in ("all", "found", "missed")),
                    " / ".join(pct(res["name_word_in_paragraph"][k]) for k in ("all", "found", "missed")),
                ]
            )
        print(
            markdown_table(
                [
                    "vault",
                    "links",
                    "recall@5, links removed",
                    "missed links by the linked note's place",
                    "a word of its name in the sentence: all / found / missed",
                    "in the paragraph: all / found / missed",
                ],
                rows,
            )
        )
    else:
        vaults = vaults_of(args, work)
        table = []
        for name, vault in vaults:
            res = quality(
                vault,
                work / f"cache-{vault_key(vault)}",
                args.scope,
                False if args.whole_text_vectors else None,
            )
            report[name] = res
            for row, rates in res["rows"].items():
                table.append([name, res["links"], row, pct(rates["A"]), pct(rates["B"])])
            log(
                f"{name}: shipped weights {res['shipped']}, in-sample best {res['in_sample_best']}, per fold {res['fold_choices']}"
            )
        for name, chosen, rates in leave_one_vault_out({n: report[n] for n, _ in vaults}):
            report[name]["rows"]["suggest, weights chosen on the other vaults"] = rates
            report[name]["other_vaults_choice"] = chosen
            table.append(
                [
                    name,
                    report[name]["links"],
                    f"suggest, weights chosen on the other vaults {chosen}",
                    pct(rates["A"]),
                    pct(rates["B"]),
                ]
            )
        print(
            markdown_table(
                ["vault", "links", "row", "recall@5, link words kept (A)", "recall@5, links removed (B)"],
                table,
            )
        )
    path = args.out / (
        "link_suggest"
        + ("-latency" if args.latency else "-diagnose" if args.diagnose else "")
        + (f"-{args.tag}" if args.tag else "")
        + ".json"
    )
    write_json(path, report)
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
