"""Sizes of MCP answers as an agent receives them: the default (brief) `search` answer against the full
one (`detail=true`, the answer every `search` gave before), `recent` and `why_not`, over the real MCP
SDK client and `explorer mcp` on stdio.

    python -m benchmarks.mcp_answers [VAULT] [--queries FILE]

Prints a Markdown table of characters per answer (median and max over the queries) for k = 10 and
k = 50, with how many results the brief answer kept and whether it said it was cut.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUERIES = [
    "hamster wheel size",
    "how fine should I grind for espresso",
    "what did Alice say about her hamster's weight",
    "tag:pets bedding",
    "meteor showers this year",
    "index funds vs bonds",
    "sourdough starter feeding",
    "git rebase or merge",
    "sleep and caffeine",
    "the martian",
    "Ming dynasty northern frontier",
    "bike chain cleaning",
    "quantum chromodynamics lattice",
    "Biscuit",
    "things to do in Kyoto in autumn",
]


async def measure(vault: Path, queries: list[str]) -> list[dict]:
    from mcp import Client, StdioServerParameters

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "explorer", "mcp", str(vault), "--no-watch"],
        env=env,
        cwd=str(vault),
    )
    rows = []
    async with Client(params) as client:
        for q in queries:
            row = {"query": q}
            for k in (10, 50):
                brief = (await client.call_tool("search", {"query": q, "k": k})).content[0].text
                full = (
                    (await client.call_tool("search", {"query": q, "k": k, "detail": True})).content[0].text
                )
                data = json.loads(brief)
                row[f"brief{k}"] = len(brief)
                row[f"full{k}"] = len(full)
                row[f"kept{k}"] = len(data["results"])
                row[f"cut{k}"] = "cut" in data
            rows.append(row)
        recent = (await client.call_tool("recent", {})).content[0].text
        rows.append({"recent": len(recent)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("vault", nargs="?", type=Path, default=ROOT / "sample_vault")
    parser.add_argument("--queries", type=Path)
    args = parser.parse_args()
    queries = args.queries.read_text().splitlines() if args.queries else QUERIES
    rows = asyncio.run(measure(args.vault.resolve(), [q for q in queries if q.strip()]))
    recent = rows.pop()["recent"]
    print(f"{len(rows)} queries on {args.vault.name}\n")
    print("| answer | k | median chars | max chars | results kept (median) | said cut |")
    print("|---|---|---|---|---|---|")
    for k in (10, 50):
        full = [r[f"full{k}"] for r in rows]
        brief = [r[f"brief{k}"] for r in rows]
        kept = [r[f"kept{k}"] for r in rows]
        print(
            f"| full (`detail=true`; the old default) | {k} | {statistics.median(full):,.0f} | {max(full):,} | - | - |"
        )
        print(
            f"| brief (default) | {k} | {statistics.median(brief):,.0f} | {max(brief):,} | "
            f"{statistics.median(kept):.0f} | {sum(r[f'cut{k}'] for r in rows)} of {len(rows)} |"
        )
    print(f"\n`recent` (5 turns): {recent:,} characters")


if __name__ == "__main__":
    main()
