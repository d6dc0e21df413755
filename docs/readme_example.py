"""Regenerate the README's "A real result" JSON from a real run of the command it shows.

    python docs/readme_example.py            # after `make demo`; rewrites the block in README.md
    python docs/readme_example.py --check    # exit 1 if the README's block is not current

Long strings are shortened with "…", executed nodes after the first few are elided, floats are
rounded to 4 places, and node timings and the invocation row id (which differ per run) are
masked, so the block changes only when the result itself does.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[1] / "README.md"
COMMAND = (
    'lookup-knowledge query "Who must approve a refund above 500 EUR?" --json '
    "--set context.budget_chars=700 --set retrieval.return_n=2"
)
BLOCK = re.compile(r"(<!-- readme-example:start -->\n```json\n)(.*?)(```\n<!-- readme-example:end -->)", re.S)
MAX_STRING = 160
SHOWN_NODES = 4


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
    if key in {"ms", "id"} and isinstance(value, int | float):
        return "…"
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, str) and len(value) > MAX_STRING:
        return value[: MAX_STRING - 1] + "…"
    return value


def main() -> int:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--check", action="store_true", help="only check that the README is current")
    parser.add_argument("--cli", default="lookup-knowledge", help="the lookup-knowledge executable")
    args = parser.parse_args()
    readme = README.read_text(encoding="utf-8")
    match = BLOCK.search(readme)
    if match is None:
        sys.exit("README.md has no readme-example block")
    fresh = example_json(args.cli)
    if args.check:
        if match[2] != fresh:
            print("README.md's example is stale: run python docs/readme_example.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(readme[: match.start(2)] + fresh + readme[match.end(2) :], encoding="utf-8")
    print(f"updated the example in {README}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
