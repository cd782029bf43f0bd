r"""Features for LoCoMo's "no good match" flag, measured offline and chosen leaving one conversation out.

Run with ``python -m benchmarks.locomo_flag RECORDS.jsonl`` on the per-question records of
``python -m benchmarks.locomo --rows explorer --candidates 100`` (no pipeline run, seconds). Each
question's first 100 results (dialog ids) are joined with the conversation's turns (speaker, text)
and these features are computed for a question naming one speaker (the words asked: the query's
folded content words without the speakers' names; IDF over the conversation's turns):

    named_cov_k   best IDF-weighted coverage of the asked words by one of the named speaker's
                  turns among the first k results (k = 3, 10, 100)
    other_cov_k   the same for the other speaker's turns among the first k results
    rare_named    1 when the rarest asked word occurs in a named speaker's turn among the first 100
    rare_other    1 when it occurs in the other speaker's turn among the first 100
    margin        (score of result 1 - score of result 2) / score of result 1

    named_said_k  as named_cov_k on the turns' statements (explorer.search.memory.stated: questions and
    other_said_k  sentences said to the other person left out), as the pipeline reads them

Rules (each flags "no good match"): the recorded one (`named_coverage - w * other_coverage < L or
matched < W`) and the same with extra conditions OR-ed in, each chosen on four conversations and
scored on the fifth. Two ways of choosing (``--choice``): `most`, the gate of locomo_loo (at most
20 % of answerable questions whose evidence is in the top 5 flagged, as many adversarial ones as
possible), and `balanced`, the values farthest inside both gates (<= 20 % of those answerable,
>= 70 % of adversarial ones): the larger the smaller of the two distances, the better.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.locomo import DEFAULT_DATA, load_conversations
from benchmarks.locomo_loo import ANSWERABLE_FLAG_MAX, _load, _mean, loo
from explorer.search.memory.stated import stated_tokens
from explorer.search.quality import TURN_MEDIUM, coverage, token_idf
from explorer.text.tokenize import tokenize
from explorer.vault.windows import query_words


def features(records: list[dict[str, Any]], data: Path) -> None:
    """Add `feat` (a dict) to each record that names a speaker."""
    convs = {c.sample_id: c for c in load_conversations(data)}
    for conv in convs.values():
        toks = {t.dia_id: set(tokenize(t.text)) for t in conv.turns}
        said = {t.dia_id: stated_tokens(t.text) for t in conv.turns}
        speaker = {t.dia_id: t.speaker for t in conv.turns}
        df: dict[str, int] = {}
        for ts in toks.values():
            for w in ts:
                df[w] = df.get(w, 0) + 1
        n = len(toks)
        people = sorted({t.speaker for t in conv.turns})
        name_toks = {p: set(tokenize(p)) for p in people}
        conv.cache = (toks, said, speaker, df, n, people, name_toks)  # type: ignore[attr-defined]
    for r in records:
        conv = convs[r["conv"]]
        toks, said, speaker, df, n, people, name_toks = conv.cache  # type: ignore[attr-defined]
        words = query_words(r["question"])
        named = [p for p in people if name_toks[p] & set(tokenize(r["question"]))]
        names = set().union(*name_toks.values())
        asked = [w for w in dict.fromkeys(words) if w not in names]
        r["feat"] = None
        if len(named) != 1 or not asked:
            continue

        def idf(w: str, n: int = n, df: dict[str, int] = df) -> float:
            return token_idf(n, df.get(w, 0))

        cands = [c[0] for c in r.get("candidates", [])]
        scores = [c[1] for c in r.get("candidates", [])]
        f: dict[str, float] = {}
        for k in (3, 5, 10, 20, 50, 100):
            mine = [d for d in cands if speaker.get(d) == named[0]][:k]
            other = [d for d in cands if speaker.get(d) not in (None, named[0])][:k]
            f[f"named_cov_{k}"] = max((coverage(asked, toks[d], idf) for d in mine), default=0.0)
            f[f"other_cov_{k}"] = max((coverage(asked, toks[d], idf) for d in other), default=0.0)
            f[f"named_said_{k}"] = max((coverage(asked, said[d], idf) for d in mine), default=0.0)
            f[f"other_said_{k}"] = max((coverage(asked, said[d], idf) for d in other), default=0.0)
        rare = max(asked, key=idf)
        f["rare_named"] = float(any(rare in toks[d] for d in cands if speaker.get(d) == named[0]))
        f["rare_other"] = float(any(rare in toks[d] for d in cands if speaker.get(d) not in (None, named[0])))
        f["margin"] = (scores[0] - scores[1]) / scores[0] if len(scores) > 1 and scores[0] else 0.0
        f["first_named"] = float(speaker.get(cands[0]) == named[0]) if cands else 0.0
        r["feat"] = f


def part(r: dict[str, Any], key: str) -> float:
    return r.get("quality_parts", {}).get(key, 0.0 if key == "other_coverage" else 1.0)


#: Gate: share of adversarial questions the flag should say "no good match" for.
ADVERSARIAL_FLAG_MIN = 0.70


def _most(m: dict[str, float]) -> tuple:
    """The most adversarial questions flagged among the choices within the answerable gate."""
    ok = m["answerable_top5"] <= ANSWERABLE_FLAG_MAX
    return (ok, m["adversarial"] if ok else -m["answerable_top5"], -m["answerable_top5"])


def _balanced(m: dict[str, float]) -> tuple:
    """The choice farthest inside both gates (the smaller of its two distances to them, largest)."""
    inside = min(ANSWERABLE_FLAG_MAX - m["answerable_top5"], m["adversarial"] - ADVERSARIAL_FLAG_MIN)
    return (inside, m["adversarial"])


#: How a rule's values are chosen on the training conversations.
CHOICES = {"most": _most, "balanced": _balanced}


def study(
    records: list[dict[str, Any]], choices: Sequence[str] = ("most",), only: str = ""
) -> dict[str, Any]:
    ans = [r for r in records if r["category"] in (1, 2, 3, 4) and r["evidence"] and r["hit@5"] == 1]
    adv = [r for r in records if r["category"] == 5]
    every = [r for r in records if r["category"] in (1, 2, 3, 4)]
    groups = sorted({r["conv"] for r in records})
    report: dict[str, Any] = {}

    def run(name: str, grid: list[Any], flagged: Any) -> None:
        if only and not name.startswith(only):
            return
        memo: dict[tuple[str, Any], bool] = {}

        def fl(r: dict[str, Any], c: Any) -> bool:
            key = (r["qid"], c)
            if key not in memo:
                memo[key] = flagged(r, c)
            return memo[key]

        def score(c: Any, group: str | None, held_out: bool) -> dict[str, float]:
            sel = (
                (lambda rs: [r for r in rs if (r["conv"] == group) == held_out]) if group else (lambda rs: rs)
            )
            return {
                "answerable_top5": _mean(fl(r, c) for r in sel(ans)),
                "adversarial": _mean(fl(r, c) for r in sel(adv)),
                "answerable": _mean(fl(r, c) for r in sel(every)),
            }

        for choice in choices:
            per, ins = loo(groups, grid, score, CHOICES[choice])
            key = name if choice == "most" else f"{name} [{choice}]"
            report[key] = {
                "left_out": {
                    "answerable_top5": _mean(fl(r, per[r["conv"]]["chosen"]) for r in ans),
                    "adversarial": _mean(fl(r, per[r["conv"]]["chosen"]) for r in adv),
                    "answerable": _mean(fl(r, per[r["conv"]]["chosen"]) for r in every),
                },
                "per_fold": {g: {"chosen": list(v["chosen"]), **v["left_out"]} for g, v in per.items()},
                "in_sample": {"chosen": list(ins), **score(ins, None, False)},
            }
            print(key, json.dumps(report[key]["left_out"]), json.dumps(report[key]["in_sample"]), flush=True)

    def base(r: dict[str, Any], c: tuple[float, float, float]) -> bool:
        w, lead, weak = c
        if not r.get("named", True):
            return part(r, "matched") < TURN_MEDIUM
        return part(r, "named_coverage") - w * part(r, "other_coverage") < lead or part(r, "matched") < weak

    leads = [round(-0.2 + 0.02 * i, 2) for i in range(36)]
    weights = [0.0, 0.4, 0.6, 0.8, 1.0]
    weaks = [0.0, 0.1, 0.2, 0.3]
    run("recorded", [(w, e, k) for w in weights for e in leads for k in weaks], base)

    def on_features(
        named_key: str, other_key: str
    ) -> Callable[[dict[str, Any], tuple[float, float, float]], bool]:
        """The recorded form on the features `named_key` and `other_key` (the recorded rule where a
        row has no features)."""

        def form(r: dict[str, Any], c: tuple[float, float, float]) -> bool:
            w, lead, weak = c
            f = r.get("feat")
            if not r.get("named", True) or f is None:
                return (
                    base(r, (0.8, 0.08, 0.2))
                    if f is None and r.get("named", True)
                    else part(r, "matched") < TURN_MEDIUM
                )
            return f[named_key] - w * f[other_key] < lead or part(r, "matched") < weak

        return form

    grid = [(w, e, k) for w in weights for e in leads for k in weaks]
    # The same form on features of k results each side.
    for kn, ko in (
        (3, 5),
        (3, 10),
        (5, 10),
        (10, 10),
        (3, 100),
        (5, 100),
        (10, 20),
        (10, 50),
        (10, 100),
        (20, 100),
        (100, 100),
    ):
        run(f"cov named {kn} / other {ko}", grid, on_features(f"named_cov_{kn}", f"other_cov_{ko}"))

    # The same form on the turns' statements (explorer.search.memory.stated: questions and sentences said
    # to the other person left out), as the pipeline now reads them.
    for kn, ko in ((3, 5), (3, 10), (5, 5), (10, 10)):
        run(f"statements: named {kn} / other {ko}", grid, on_features(f"named_said_{kn}", f"other_said_{ko}"))

    # Recorded rule OR the rarest asked word held by the other speaker and not the named one.
    def rare(r: dict[str, Any], c: tuple[float, float, float, int]) -> bool:
        w, lead, weak, use = c
        f = r.get("feat")
        extra = bool(use and f is not None and f["rare_other"] and not f["rare_named"])
        return base(r, (w, lead, weak)) or extra

    run(
        "recorded + rare word only elsewhere",
        [(w, e, k, u) for w in weights for e in leads for k in weaks for u in (0, 1)],
        rare,
    )

    def margin(r: dict[str, Any], c: tuple[float, float, float, float]) -> bool:
        w, lead, weak, m = c
        f = r.get("feat")
        return base(r, (w, lead, weak)) or bool(f is not None and f["margin"] < m)

    run(
        "recorded + small margin",
        [
            (w, e, k, m)
            for w in (0.6, 0.8, 1.0)
            for e in leads
            for k in weaks
            for m in (0.0, 0.01, 0.02, 0.05)
        ],
        margin,
    )

    def with_match(r: dict[str, Any], c: tuple[float, float, float, float]) -> bool:
        w, lead, weak, v = c
        if not r.get("named", True):
            return part(r, "matched") < TURN_MEDIUM
        value = part(r, "named_coverage") - w * part(r, "other_coverage") + v * (part(r, "named_match") - 0.5)
        return value < lead or part(r, "matched") < weak

    run(
        "named_lead + v * (named_match - 0.5)",
        [
            (w, e, k, v)
            for w in (0.6, 0.8, 1.0)
            for e in leads
            for k in weaks
            for v in (0.0, 0.1, 0.2, 0.3, 0.5)
        ],
        with_match,
    )

    def rare_none(r: dict[str, Any], c: tuple[float, float, float, float]) -> bool:
        w, lead, weak, x = c
        f = r.get("feat")
        extra = bool(f is not None and not f["rare_named"] and not f["rare_other"] and part(r, "matched") < x)
        return base(r, (w, lead, weak)) or extra

    run(
        "recorded + rarest word in nobody's results",
        [
            (w, e, k, x)
            for w in (0.6, 0.8, 1.0)
            for e in leads
            for k in weaks
            for x in (0.0, 0.3, 0.4, 0.5, 0.6)
        ],
        rare_none,
    )
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.locomo_flag", description=__doc__.splitlines()[0]
    )
    parser.add_argument("records", type=Path, help="locomo jsonl with --candidates")
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="the LoCoMo file the records came from"
    )
    parser.add_argument("--out", type=Path, default=None, help="write the report here as JSON")
    parser.add_argument(
        "--choice",
        action="append",
        choices=sorted(CHOICES),
        default=None,
        help="how values are chosen on the training conversations: most (the most adversarial "
        "questions flagged within the answerable gate) or balanced (farthest inside both gates); "
        "repeat for both (default most)",
    )
    parser.add_argument("--only", default="", help="only the rules whose name starts with this")
    args = parser.parse_args(argv)
    records = _load(args.records)
    features(records, args.data)
    report = study(records, args.choice or ["most"], args.only)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
