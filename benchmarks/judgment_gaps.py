"""Whether Cranfield's judgments miss the paper each question was written from.

    python benchmarks/judgment_gaps.py [--trust benchmarks/results/trust.json]
                                       [--out benchmarks/results/judgment_gaps.json]

Cranfield's questions were written by the authors of papers in the collection; the paper a
question came from is not among its judged documents. If the tool's unjudged top documents are
often those source papers, their collection numbers rise with the question numbers (both were
numbered in the order the papers were collected), so the longest increasing chain of (question
number, unjudged top document number) is far longer than the ~2 sqrt(n) a chance order gives.
Reads the per-lookup records ``benchmarks/trust.py`` wrote; prints the chain against chance and
``relevanceLevel``'s calibration as judged and with the chain's documents counted relevant.
"""

from __future__ import annotations

import argparse
import bisect
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table
from trust_stores import judged_sets

SET = "classic-aeronautics"
CHANCE_TRIALS = 1000


def _number(identifier: str) -> int:
    return int(re.sub(r"\D", "", identifier))


def longest_chain(points: list[tuple[int, int]]) -> list[int]:
    """Indexes of a longest chain of ``points`` increasing in both coordinates (points sorted by
    the first; O(n^2), n is a few hundred)."""
    best, before = [1] * len(points), [-1] * len(points)
    for i, (x, y) in enumerate(points):
        for k in range(i):
            if points[k][0] < x and points[k][1] < y and best[k] + 1 > best[i]:
                best[i], before[i] = best[k] + 1, k
    chain, i = [], int(np.argmax(best)) if points else -1
    while i >= 0:
        chain.append(i)
        i = before[i]
    return chain[::-1]


def chance_chain(n: int, seed: int = 0) -> float:
    """Mean longest increasing run of a random order of ``n`` values."""
    rng = np.random.default_rng(seed)
    lengths = []
    for _ in range(CHANCE_TRIALS):
        tails: list[int] = []
        for value in rng.permutation(n):
            at = bisect.bisect_left(tails, value)
            tails[at : at + 1] = [value]
        lengths.append(len(tails))
    return float(np.mean(lengths))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trust", type=Path, default=Path("benchmarks/results/trust.json"))
    parser.add_argument("--cache", type=Path, default=Path("benchmarks/.cache"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/judgment_gaps.json"))
    args = parser.parse_args()
    records = pd.DataFrame(json.loads(args.trust.read_text())["sets"][SET]["records"])
    questions = next(s for s in judged_sets(args.cache) if s.name == SET).questions
    ids = {json.loads(line)["text"]: json.loads(line)["_id"] for line in (questions / "queries.jsonl").open()}
    looked = records[(records["group"] == "answerable") & records["found"]].copy()
    looked["question"] = looked["text"].map(ids)
    unjudged = looked[~looked["top_relevant"].astype(bool)].copy()
    unjudged["q"] = unjudged["question"].map(_number)
    unjudged["d"] = unjudged["top_doc"].map(_number)
    unjudged = unjudged.sort_values(["q", "d"])
    chain = unjudged.iloc[longest_chain(list(zip(unjudged["q"], unjudged["d"], strict=True)))]
    looked["source_paper"] = looked.index.isin(chain.index)
    looked["relevant_or_source"] = looked["top_relevant"].astype(bool) | looked["source_paper"]
    levels = (
        looked.groupby("level")
        .agg(
            lookups=("text", "size"),
            as_judged=("top_relevant", "mean"),
            source=("source_paper", "mean"),
            with_source=("relevant_or_source", "mean"),
        )
        .reindex(["high", "medium", "low"])
    )
    result = {
        "set": SET,
        "unjudged_tops": len(unjudged),
        "chain": len(chain),
        "chance_chain": round(chance_chain(len(unjudged)), 1),
        "chain_pairs": list(zip(chain["question"], chain["top_doc"], strict=True)),
        "levels": levels.round(3).to_dict("index"),
    }
    console = Console()
    console.print(
        f"{SET}: {result['unjudged_tops']} answerable lookups with an unjudged top document; the longest "
        f"increasing chain holds {result['chain']} (chance: {result['chance_chain']})"
    )
    table = Table("level", "lookups", "top relevant as judged", "top is the chain's", "either")
    for level, row in levels.iterrows():
        shares = (f"{share:.3f}" for share in (row.as_judged, row.source, row.with_source))
        table.add_row(str(level), str(row.lookups), *shares)
    console.print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
