"""The command line from a cold process, side by side: ``--help``'s wall time, a ``query``'s wall
time next to what its footer reports, and where the import time goes (``python -X importtime``).

Every measurement is a fresh process, as a person's command is. Each round runs every checkout's
commands back to back, so all see the same machine load; figures are medians over the rounds.
A query's wall time is measured from outside (``subprocess.run``, process start to exit); its
footer counts from the process's start to the footer, its last line (this checkout), or only
the model load and the lookup (a checkout before the footer counted its start-up); the wall it
leaves out is the process's end. The import profile of a query (``-X importtime`` over the whole
command, self time summed by top-level package) says where the start-up goes; importtime's own
overhead inflates it, so read it as shares, not as wall time.

    python benchmarks/cli_startup.py [--baseline CHECKOUT] [--rounds 5] [--store DIR] [--out FILE.json]

``--baseline``: another checkout with its own ``.venv`` (e.g. a worktree of main), measured the
same way on the same store.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from machine import machine
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
QUERY = "Who must approve a refund above 500 EUR?"
FOOTER = re.compile(
    r"(?P<total>[\d.]+) s: start-up (?P<start_up>[\d.]+) s, model load (?P<model>[\d.]+) s, "
    r"lookup (?P<lookup>\d+) ms"
)
OLD_FOOTER = re.compile(r"lookup (?P<lookup>\d+) ms, after a (?P<model>[\d.]+) s cold start")
TOP_PACKAGES = 12
RUN_CLI = "from lookup_knowledge.cli.app import app; app()"  # the console script's work, under -X importtime
ENV = {**os.environ, "COLUMNS": "200"}  # the footer on one line


def wall(command: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Seconds from starting ``command`` to its exit, and what it printed."""
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=ENV, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr}")
    return seconds, done


def footer(stderr: str) -> dict[str, float]:
    """What a query's footer reports: its total (this checkout's footer), start-up, model load
    and lookup in seconds; ``reported`` is the figure it gives for the command as a whole."""
    text = " ".join(stderr.split())
    if match := FOOTER.search(text):
        parts = {k: float(v) for k, v in match.groupdict().items()}
        parts["lookup"] /= 1000
        return {**parts, "reported": parts["total"]}
    if match := OLD_FOOTER.search(text):
        model, lookup = float(match["model"]), float(match["lookup"]) / 1000
        return {"model": model, "lookup": lookup, "reported": model + lookup}
    raise SystemExit(f"no footer in:\n{stderr}")


def import_profile(checkout: Path, args: list[str]) -> tuple[float, Counter[str]]:
    """``python -X importtime`` over ``args`` in ``checkout`` (its own interpreter, and its own
    package: ``-c`` puts the working folder first on the path): the seconds of every import's
    self time summed, and by top-level package."""
    python = str(checkout / ".venv/bin/python")
    command = [python, "-X", "importtime", *args]
    done = subprocess.run(command, capture_output=True, text=True, env=ENV, cwd=checkout)
    by_package: Counter[str] = Counter()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "self [us]" not in line:
            self_us, _, name = line.removeprefix("import time:").split("|")
            by_package[name.strip().split(".")[0]] += int(self_us) / 1e6
    return sum(by_package.values()), by_package


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout with its own .venv")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--store", type=Path, default=ROOT / "benchmarks/.cache/cli-startup-store")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/cli_startup.json")
    args = parser.parse_args()
    console = Console()
    checkouts = {"this checkout": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    store = ["--set", f"store.path={args.store.resolve()}"]
    cli = {name: str(path / ".venv/bin/lookup-knowledge") for name, path in checkouts.items()}
    console.print(f"ingesting the sample knowledge base into {args.store} (skips unchanged documents) ...")
    wall([cli["this checkout"], "ingest", str(ROOT / "lookup_knowledge/sample-kb"), *store])

    keys = ["help_s", "query_s", "footer", "import_cli_s", "import_query_s", "import_query_by_package_s"]
    runs: dict[str, dict[str, list[Any]]] = {name: {key: [] for key in keys} for name in cli}
    for round_ in range(args.rounds):
        for name, command in cli.items():
            run = runs[name]
            run["help_s"].append(wall([command, "--help"])[0])
            seconds, done = wall([command, "query", QUERY, *store])
            run["query_s"].append(seconds)
            run["footer"].append(footer(done.stderr))
            run["import_cli_s"].append(
                import_profile(checkouts[name], ["-c", "import lookup_knowledge.cli.app"])[0]
            )
            total, by_package = import_profile(checkouts[name], ["-c", RUN_CLI, "query", QUERY, *store])
            run["import_query_s"].append(total)
            run["import_query_by_package_s"].append(by_package)
        console.print(f"round {round_ + 1}/{args.rounds} done")

    def median(name: str, key: str, part: str | None = None) -> float | None:
        values = [f.get(part) for f in runs[name][key]] if part else runs[name][key]
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    def packages(name: str) -> dict[str, float]:
        profiles = runs[name]["import_query_by_package_s"]
        names = Counter(sum(profiles, Counter())).most_common(TOP_PACKAGES)
        return {package: statistics.median(p.get(package, 0.0) for p in profiles) for package, _ in names}

    summary = {
        name: {
            "help_s": median(name, "help_s"),
            "query_wall_s": median(name, "query_s"),
            "footer_reported_s": median(name, "footer", "reported"),
            "query_wall_after_footer_s": statistics.median(
                wall_s - f["reported"]
                for wall_s, f in zip(runs[name]["query_s"], runs[name]["footer"], strict=True)
            ),
            "footer_start_up_s": median(name, "footer", "start_up"),
            "footer_model_load_s": median(name, "footer", "model"),
            "footer_lookup_s": median(name, "footer", "lookup"),
            "import_cli_module_s": median(name, "import_cli_s"),
            "import_query_s": median(name, "import_query_s"),
            "query_imports_by_package_s": packages(name),
        }
        for name in cli
    }
    table = Table(title=f"The command line from a cold process: medians of {args.rounds} rounds (seconds)")
    table.add_column("measure")
    for name in cli:
        table.add_column(name, justify="right")
    rows = [
        ("--help, wall", "help_s"),
        ("query, wall (process start to exit)", "query_wall_s"),
        ("query, what its footer reports", "footer_reported_s"),
        ("query, wall the footer leaves out", "query_wall_after_footer_s"),
        ("  footer: start-up", "footer_start_up_s"),
        ("  footer: model load and first search", "footer_model_load_s"),
        ("  footer: lookup", "footer_lookup_s"),
        ("imports loading the CLI (importtime)", "import_cli_module_s"),
        ("imports of a query (importtime)", "import_query_s"),
    ]
    for label, key in rows:
        table.add_row(label, *("-" if s[key] is None else f"{s[key]:.2f}" for s in summary.values()))
    console.print(table)
    by_package = Table(title="A query's imports by top-level package (importtime self time, median s)")
    for name in cli:
        by_package.add_column(name)
        by_package.add_column("s", justify="right")
    tops = [list(s["query_imports_by_package_s"].items()) for s in summary.values()]
    for i in range(TOP_PACKAGES):
        cells = [c for top in tops for c in ((top[i][0], f"{top[i][1]:.3f}") if i < len(top) else ("", ""))]
        by_package.add_row(*cells)
    console.print(by_package)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "query": QUERY,
                "rounds": args.rounds,
                "checkouts": {name: str(path) for name, path in checkouts.items()},
                "summary": summary,
                "runs": {
                    name: {k: v for k, v in run.items() if k != "import_query_by_package_s"}
                    for name, run in runs.items()
                },
                "machine": machine(),
                "python": sys.version.split()[0],
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            },
            indent=2,
        )
    )
    console.print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
