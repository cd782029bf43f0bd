"""Relevance marks: "this result was right / wrong for this query", kept in `.explorer/judgments.jsonl`.

One JSON object per line: `query`, `node_id`, `path`, `mark` (`relevant` or `not_relevant`),
`time` (ISO 8601, UTC) and `generation` (the index version when it was marked). Lines are only
appended; a later mark of the same (query, note) wins. Lines that do not parse are skipped and
counted, never fatal. `explorer eval` replays the marks as a personal benchmark.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

FILE = "judgments.jsonl"
MARKS = ("relevant", "not_relevant")
#: Longest query kept with a mark.
MAX_QUERY_CHARS = 2000


@dataclass(frozen=True, slots=True)
class Judgment:
    """One relevance mark."""

    query: str
    """The query as typed."""
    node_id: str
    """The marked result's best shard."""
    path: str
    """The marked note."""
    mark: str
    """`relevant` or `not_relevant`."""
    time: str
    """When, ISO 8601 UTC."""
    generation: int
    """Index version at the time of marking."""


def judgments_file(cache_dir: Path) -> Path:
    """Where the marks of an index live."""
    return Path(cache_dir) / FILE


def make_judgment(query: str, node_id: str, path: str, mark: str, generation: int) -> Judgment:
    """A validated mark stamped with the current time."""
    if mark not in MARKS:
        raise ValueError(f"mark must be one of {MARKS}, got {mark!r}")
    query = " ".join(query.split())[:MAX_QUERY_CHARS]
    if not query or not path:
        raise ValueError("a mark needs a query and a note")
    now = datetime.now(UTC).isoformat(timespec="seconds")
    return Judgment(query, node_id, path, mark, now, int(generation))


def append_judgment(cache_dir: Path, judgment: Judgment) -> Path:
    """Append one mark as one line (a single write of a whole line, flushed to disk)."""
    path = judgments_file(cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(asdict(judgment), ensure_ascii=False) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def load_judgments(cache_dir: Path) -> tuple[list[Judgment], int]:
    """(marks in file order, lines skipped because they do not parse)."""
    path = judgments_file(cache_dir)
    out: list[Judgment] = []
    bad = 0
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    continue
                try:
                    d = json.loads(line)
                    j = Judgment(
                        str(d["query"]),
                        str(d.get("node_id") or d["path"]),
                        str(d["path"]),
                        str(d["mark"]),
                        str(d.get("time") or ""),
                        int(d.get("generation") or 0),
                    )
                except (ValueError, KeyError, TypeError):
                    bad += 1
                    continue
                if j.mark not in MARKS or not j.query.strip():
                    bad += 1
                    continue
                out.append(j)
    except FileNotFoundError:
        pass
    return out, bad


def latest_marks(judgments: Iterable[Judgment]) -> dict[str, dict[str, Judgment]]:
    """query -> note path -> its latest mark."""
    out: dict[str, dict[str, Judgment]] = {}
    for j in judgments:
        out.setdefault(j.query, {})[j.path] = j
    return out


def marked_relevant(cache_dir: Path, query: str) -> list[str]:
    """Paths marked relevant for `query` (latest marks), for the why-not view."""
    marks = latest_marks(load_judgments(cache_dir)[0]).get(" ".join(query.split()), {})
    return sorted(p for p, j in marks.items() if j.mark == "relevant")


def score_query(relevant: set[str], ranked: Sequence[str], k: int = 10) -> dict[str, float]:
    """nDCG@k (binary gains, ranx's definition) and MRR@k of one ranked list of note paths."""
    if not relevant:
        return {"ndcg@10": 0.0, "mrr@10": 0.0}
    top = list(ranked[:k])
    dcg = sum(1.0 / math.log2(i + 2) for i, p in enumerate(top) if p in relevant)
    idcg = sum(1.0 / math.log2(i + 2) for i in range(min(len(relevant), k)))
    rr = next((1.0 / (i + 1) for i, p in enumerate(top) if p in relevant), 0.0)
    return {"ndcg@10": dcg / idcg, "mrr@10": rr}
