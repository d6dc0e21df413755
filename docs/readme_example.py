"""Regenerate the example result (docs/example-result.md, linked from the README) from a real run
of the command it shows.

    python docs/readme_example.py            # after `make demo`; rewrites the block if it is stale
    python docs/readme_example.py --check    # exit 1 if the block is not current

Long strings are shortened with "…", executed nodes after the first few are elided, floats are
rounded to 4 places, and what differs per run or checkout is masked (node timings, the row id,
the cold start, the ingest time, the absolute source path). Scores differ between CPUs and
encoder backends in the fourth decimal (OpenVINO on an AMD EPYC against an Intel Xeon: 2.3600
vs 2.3607), which can swap two near-tied hits of a search
whose scores the trace does not show; so a block is current when every float is within
:data:`FLOAT_TOLERANCE` of a fresh run's, each attempt holds the same hit keys (in any order) and
everything else is equal. Only a stale block is rewritten.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parent / "example-result.md"
COMMAND = (
    'lookup-knowledge query "Who must approve a refund above 500 EUR?" --json '
    "--set context.budget_chars=700 --set retrieval.return_n=2"
)
BLOCK = re.compile(r"(<!-- readme-example:start -->\n```json\n)(.*?)(```\n<!-- readme-example:end -->)", re.S)
MAX_STRING = 160
SHOWN_NODES = 4
# what differs per run or per checkout: timings, the row id, the ingest time, the absolute path
RUN_SPECIFIC = {"ms", "id", "coldStartMs", "ingestedAt", "sourcePath"}
FLOAT_TOLERANCE = 5e-3  # absolute, and relative to the larger value: what varies by CPU and backend
# Figures read against the probe null amplify that noise: the margin divides by the probes' spread
# (at least 0.01), a probe whose top score moves crosses the lookup's in the percentile, and the
# store's bar (``strictness``, raised to ``ownQuestionsP5``, its own questions' 5th-percentile
# margin) is such a margin too (margin 8.9956 on an AMD EPYC, 9.1685 on an Intel Xeon; bar 2.3835
# on one CPU, 2.4112 on another).
AMPLIFIED = {"margin": 0.05, "densePercentile": 0.05, "strictness": 0.05, "ownQuestionsP5": 0.05}


def example_json(cli: str = "lookup-knowledge", cwd: str | Path | None = None) -> str:
    """The shortened JSON of a real run of :data:`COMMAND` in ``cwd`` (default: here)."""
    argv = [cli, *shlex.split(COMMAND)[1:]]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=cwd)
    return json.dumps(shorten(json.loads(done.stdout)), indent=2, ensure_ascii=False) + "\n"


def shorten(value: Any, key: str = "") -> Any:
    """The result with long strings cut, executed nodes elided and run-specific numbers masked."""
    if isinstance(value, dict):
        return {k: shorten(v, k) for k, v in value.items()}
    if isinstance(value, list):
        if key == "executedNodes":
            return [*(shorten(node) for node in value[:SHOWN_NODES]), {"name": "…", "ms": "…"}]
        return [shorten(item) for item in value]
    if key in RUN_SPECIFIC and value is not None:
        return "…"
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, str) and len(value) > MAX_STRING:
        return value[: MAX_STRING - 1] + "…"
    return value


def differences(committed: Any, fresh: Any, where: str = "$") -> list[str]:
    """Where two example results differ: any shape, key, string or flag, or a float beyond
    :data:`FLOAT_TOLERANCE` (:data:`AMPLIFIED` for the figures that magnify it) (JSON paths,
    empty when the committed block is current)."""
    if isinstance(committed, dict) and isinstance(fresh, dict):
        if committed.keys() != fresh.keys():
            return [f"{where}: keys {sorted(committed)} != {sorted(fresh)}"]
        return [d for key in committed for d in differences(committed[key], fresh[key], f"{where}.{key}")]
    if isinstance(committed, list) and isinstance(fresh, list):
        if where.endswith(".hitKeys"):  # a search's near-ties (scores not shown) swap places by CPU
            committed, fresh = sorted(committed), sorted(fresh)
        if len(committed) != len(fresh):
            return [f"{where}: {len(committed)} items != {len(fresh)}"]
        return [
            d
            for i, pair in enumerate(zip(committed, fresh, strict=True))
            for d in differences(*pair, f"{where}[{i}]")
        ]
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (committed, fresh))
    if numbers and (isinstance(committed, float) or isinstance(fresh, float)):
        tolerance = AMPLIFIED.get(where.rsplit(".", 1)[-1], FLOAT_TOLERANCE)
        close = math.isclose(committed, fresh, rel_tol=tolerance, abs_tol=tolerance)
        return [] if close else [f"{where}: {committed} != {fresh}"]
    return (
        []
        if committed == fresh and type(committed) is type(fresh)
        else [f"{where}: {committed!r} != {fresh!r}"]
    )


def stale(committed: str, fresh: str) -> list[str]:
    """:func:`differences` between the committed block and a fresh run's, both as JSON text."""
    return differences(json.loads(committed), json.loads(fresh))


def main() -> int:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--check", action="store_true", help="only check that the example is current")
    parser.add_argument("--cli", default="lookup-knowledge", help="the lookup-knowledge executable")
    args = parser.parse_args()
    readme = EXAMPLE.read_text(encoding="utf-8")
    match = BLOCK.search(readme)
    if match is None:
        sys.exit(f"{EXAMPLE} has no readme-example block")
    fresh = example_json(args.cli)
    if not (changed := stale(match[2], fresh)):
        print(f"{EXAMPLE.name} is current (floats within the CPU tolerance)")
        return 0
    if args.check:
        print(f"{EXAMPLE.name} is stale: run python docs/readme_example.py", file=sys.stderr)
        print("\n".join(changed[:20]), file=sys.stderr)
        return 1
    EXAMPLE.write_text(readme[: match.start(2)] + fresh + readme[match.end(2) :], encoding="utf-8")
    print(f"updated the example in {EXAMPLE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
