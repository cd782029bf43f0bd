"""“Why not?”: where a note the user expected ranked at each stage of a search, and where it dropped out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from explorer.index.targets import resolve_note as resolve_indexed_note
from explorer.search.schema import Ranking, SearchResults


@dataclass(frozen=True, slots=True)
class StageRow:
    """One stage of the search as the expected note lived through it."""

    stage: str
    """The stage: `bm25 “term”`, `dense “term”`, `fusion`, `final list`, …"""
    outcome: str
    """What happened to the note there, e.g. `#7 (8.436)` or `not retrieved`."""
    found: bool
    """True when the note was present at this stage."""


@dataclass(frozen=True, slots=True)
class WhyNotReport:
    """The answer to “why is this note not (higher) in the results?”."""

    name: str
    """What the user typed."""
    path: str | None
    """The note it resolved to (None: no such note)."""
    rows: tuple[StageRow, ...]
    """Stage by stage."""
    verdict: str
    """Where it dropped out, in a sentence."""


def resolve_note(index: Any, name: str) -> str | None:
    """The indexed note a user means by `name`: a path or link target (`explorer.index.targets.resolve_note`),
    else a title, else a unique part of a path or title."""
    name = name.strip().strip("[]").strip()
    if not name:
        return None
    target = resolve_indexed_note(index, name)
    if target is not None:
        return target
    titles = index.note_titles()
    low = name.lower()
    by_title = [p for p, title in titles.items() if title.lower() == low]
    if by_title:
        return sorted(by_title)[0]
    parts = [p for p in titles if low in p.lower()] or [p for p, title in titles.items() if low in title.lower()]
    if len(parts) == 1:
        return parts[0]
    return None


def why_not(index: Any, results: SearchResults, name: str) -> WhyNotReport:
    """Trace note `name` through the rankings, the fusion and the final list of `results`."""
    path = resolve_note(index, name)
    if path is None:
        reason = ""
        for skipped, why in index.skipped_files().items():
            if name.strip().lower() in skipped.lower():
                reason = f" ({skipped} is not indexed: {why})"
                break
        return WhyNotReport(name, None, (), f"No indexed note matches “{name}”{reason}.")
    settings = index.settings.search
    shard_ids = set(index.shard_ids(path))
    rows: list[StageRow] = []
    rankings: list[Ranking] = results.trace.rankings
    rankings2: list[Ranking] = results.trace.rankings_pass2
    final_pos = next((i for i, r in enumerate(results.results, 1) if r.document_path == path), None)
    if not rankings and not rankings2:
        mode = results.mode
        what = "a classic tool search" if mode.classic else "a filter-only listing" if mode.browse else "this search"
        verdict = (f"Ranked #{final_pos}." if final_pos else "Not in the results.") + f" No ranking trace for {what}."
        return WhyNotReport(name, path, (), verdict)

    def trace(ranks: list[Ranking], label: str) -> bool:
        any_hit = False
        for r in ranks:
            hit = next(((i, nid, s) for i, (nid, s) in enumerate(r.items, 1) if nid in shard_ids), None)
            stage = f"{label}{r.retriever} “{r.term}”"
            if hit is None:
                why = f"not in its {len(r.items)} results"
                if r.retriever in ("dense", "feedback"):
                    why += f" (cosine below {settings.dense_threshold:.2f} or deeper than {settings.candidates})"
                rows.append(StageRow(stage, why, False))
            else:
                any_hit = True
                rank, nid, score = hit
                rows.append(StageRow(stage, f"#{rank} ({score:.4g}) {nid}", True))
        return any_hit

    in_rankings = trace(rankings, "")
    if rankings2:
        in_rankings = trace(rankings2, "pass 2 ") or in_rankings

    # Pass 1's fused notes, as the fusion stage recorded them.
    entries = results.trace.entries
    entry_count = len(entries)
    entry_rank, fused_score = next(((i, score) for i, (p, score) in enumerate(entries, 1) if p == path), (None, 0.0))
    if entry_rank is not None:
        rows.append(StageRow("fusion (pass 1)", f"entry #{entry_rank} of {entry_count} (fused {fused_score:.5f})", True))
    else:
        rows.append(StageRow("fusion (pass 1)", f"absent from {entry_count} fused entries", False))
    k = len([r for r in results.results if r.source == "search"])
    if final_pos is not None:
        res = results.results[final_pos - 1]
        how = f"#{final_pos} of {len(results.results)}, pass {res.pass_}"
        if res.source != "search":
            how += f", always-include ({res.reason})"
        rows.append(StageRow("final list", how, True))
    else:
        rows.append(StageRow("final list", f"absent (list of {len(results.results)})", False))

    note = index.note(path)
    if final_pos is not None:
        moved = ""
        res = results.results[final_pos - 1]
        if res.explanation and res.explanation.rerank:
            moved = f"; rerank {res.explanation.rerank.to_dict()}"
        verdict = f"It is in the results at #{final_pos}{moved}."
    elif results.early_return and "fact" in results.searched_sources and note is not None and note.source_type != "fact":
        verdict = "Knowledge-first returned early: only knowledge notes were searched, and this note is not one."
    elif not in_rankings:
        verdict = ("No shard of it matched any search term: not in any BM25 list, and not similar enough "
                   f"(cosine ≥ {settings.dense_threshold:.2f}) in any embedding list.")
        if not results.mode.dense:
            verdict += " Embeddings were not used for this search."
        if results.filters:
            verdict += f" The filters {results.filters} may exclude it."
    elif entry_rank is not None and entry_rank > k:
        verdict = f"Retrieved, but fused to entry #{entry_rank}: the list keeps the top {k}."
    elif results.rerank is not None and results.rerank.applied:
        verdict = f"Fused to entry #{entry_rank}, then pushed out of the top {k} by reranking."
    else:
        verdict = "Retrieved only in the second pass, where it did not make the cut." if rankings2 else \
            f"Fused to entry #{entry_rank} but not kept."
    return WhyNotReport(name, path, tuple(rows), verdict)
