"""Access control under random assignments: does any lookup leak an invisible document?

Generated knowledge bases (``tests/access_fixtures.py``): ten documents each, whose id, source,
title, domain, entity and content carry markers of their own, a random access field per document
(unset, public, no one, one or two of four groups) and a random ``access.default`` (public or
deny). Random callers (any subset of the groups) ask random questions (topic words, and L0
keywords of some documents) through recorded ``AgentLookup`` calls that all share one session id.

A lookup leaks when the serialized result or its recorded ``tool_invocation`` row holds a marker
of a document the caller may not see, or (``count_leaks``) when it differs from the same lookup,
unrestricted, on a store holding only the documents the caller may see: the whole result in
dense mode (hit counts, cuts, completeness, verdict, context pack, session domains), the L0
hints and category filter in hybrid mode (BM25 scores read IDF over the whole collection there).
``unfiltered_would_leak`` counts how often the same lookup without the filter shows an invisible
document's marker: what the check would catch.

The real model (all-MiniLM-L6-v2, the default backends) embeds everything, each text once:
bag-of-words test vectors tie, and the engine orders equal scores by where points lie, which
would make the two stores differ.

    python benchmarks/access_leaks.py [--lookups 20000] [--corpora 40] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the fixture corpus

from access_fixtures import check_lookups  # noqa: E402

from lookup_knowledge import load_config  # noqa: E402
from lookup_knowledge.stores import build_embedder  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--lookups", type=int, default=20_000)
    parser.add_argument(
        "--corpora", type=int, default=40, help="random knowledge bases (half dense, half hybrid)"
    )
    parser.add_argument(
        "--unfiltered-every", type=int, default=10, help="also run every n-th lookup unfiltered"
    )
    parser.add_argument(
        "--compare-every", type=int, default=1, help="compare every n-th session with the callers' own stores"
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/access_leaks.json"))
    args = parser.parse_args()
    embedder = build_embedder(load_config())  # the default model and backends (auto)
    per_corpus = -(-args.lookups // args.corpora)
    totals: dict[str, int] = {}
    failures: list[dict] = []
    runs = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.corpora):
            mode = "dense" if seed % 2 == 0 else "hybrid"
            t0 = time.perf_counter()
            figures = check_lookups(
                Path(tmp) / f"kb-{seed}",
                seed,
                per_corpus,
                mode,
                embedder,
                unfiltered_every=args.unfiltered_every,
                compare_every=args.compare_every,
            )
            failures += figures.pop("failures")
            runs.append(
                {"seed": seed, "mode": mode, **figures, "seconds": round(time.perf_counter() - t0, 1)}
            )
            for key, value in figures.items():
                totals[key] = totals.get(key, 0) + value
            print(json.dumps(runs[-1]), flush=True)
    summary = {
        **totals,
        "failures": failures,
        "corpora": args.corpora,
        "seconds": round(time.perf_counter() - started, 1),
        "runs": runs,
        "machine": {"python": sys.version.split()[0], "platform": platform.platform()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2))
    print(
        f"{totals['lookups']} lookups: {totals['leaks']} leaked a string, "
        f"{totals['count_leaks']} differed from "
        f"a store of the visible documents alone ({totals['compared']} compared); without the filter "
        f"{totals['unfiltered_would_leak']} of {totals['unfiltered_checked']} would have leaked; "
        f"{totals['found']} found evidence; {summary['seconds']:.0f} s; wrote {args.out}"
    )
    return 0 if totals["leaks"] == 0 and totals["count_leaks"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
