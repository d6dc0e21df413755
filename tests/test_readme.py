"""The README is code: every shell command and Python snippet in it runs as written after
`make demo`, its JSON parses, and the example result it links (docs/example-result.md) is the one
a real run gives today; so do the framework examples of docs/integrations.md."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
EXAMPLE_DOC = (ROOT / "docs" / "example-result.md").read_text(encoding="utf-8")
INTEGRATIONS_DOC = (ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
VENV = Path(sys.prefix)
pytestmark = pytest.mark.slow


def readme_blocks(language: str, text: str = README) -> list[str]:
    return [body for lang, body in FENCE.findall(text) if lang == language]


def demo_recipe() -> list[str]:
    """The commands of the Makefile's `demo` target, as a shell would run them."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = re.search(r"^demo:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert recipe, "the Makefile has no demo target"
    return [line.strip().replace("$(LK)", "lookup-knowledge") for line in recipe[1].splitlines()]


def readme_example():
    """``docs/readme_example.py``, the generator and checker of the README's example result."""
    spec = importlib.util.spec_from_file_location("readme_example", ROOT / "docs" / "readme_example.py")
    assert spec and spec.loader
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def run_shell(script: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(VENV)}
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True, text=True
    )


@pytest.fixture(scope="module")
def demo_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder laid out like a checkout after `make demo`: the package, the virtualenv and the
    store the demo target ingests (its own recipe, run here)."""
    root = tmp_path_factory.mktemp("readme")
    (root / "lookup_knowledge").symlink_to(ROOT / "lookup_knowledge")
    (root / ".venv").symlink_to(VENV)
    done = run_shell("\n".join(demo_recipe()), root)
    assert done.returncode == 0, done.stderr
    return root


def test_the_readme_has_the_blocks_this_test_runs() -> None:
    assert len(readme_blocks("bash")) >= 5
    assert len(readme_blocks("python")) >= 4
    assert "make demo" in readme_blocks("bash")[0]


def test_every_shell_command_runs_as_written(demo_checkout: Path) -> None:
    """Blocks run in README order (later ones use what earlier ones wrote). The quickstart block
    itself (`make demo`, `make test`) is what CI runs; the fixture runs the demo recipe."""
    for block in readme_blocks("bash")[1:]:
        done = run_shell(block, demo_checkout)
        assert done.returncode == 0, f"README block failed:\n{block}\n{done.stderr[-3000:]}"
        assert "Traceback" not in done.stdout + done.stderr, block


@pytest.mark.parametrize("snippet", readme_blocks("python"), ids=lambda s: s.splitlines()[0][:40])
def test_every_python_snippet_runs_as_written(snippet: str, demo_checkout: Path) -> None:
    done = subprocess.run(
        [str(VENV / "bin" / "python"), "-c", snippet], cwd=demo_checkout, capture_output=True, text=True
    )
    assert done.returncode == 0, f"README snippet failed:\n{snippet}\n{done.stderr[-3000:]}"


def test_the_framework_examples_run_as_written(demo_checkout: Path) -> None:
    """docs/integrations.md's examples, each in a namespace of its own, in one process (one
    start-up for the five)."""
    blocks = readme_blocks("python", INTEGRATIONS_DOC)
    assert len(blocks) == 5
    run_each = "import sys\nfor block in sys.argv[1:]:\n    exec(block, {'__name__': '__main__'})\n"
    done = subprocess.run(
        [str(VENV / "bin" / "python"), "-c", run_each, *blocks],
        cwd=demo_checkout,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "payments-refund-policy#chunk-2" in done.stdout


def test_the_readme_is_a_reference_not_a_run_log() -> None:
    """At most 300 lines; no one run's timings (they differ by machine and go stale)."""
    assert len(README.splitlines()) <= 300
    assert not re.search(r"\d+ min \d+ s|\btook \d", README)


def test_every_json_block_parses() -> None:
    for block in readme_blocks("json"):
        json.loads(block)


def test_the_example_result_is_what_a_real_run_gives(demo_checkout: Path) -> None:
    example = readme_example()
    committed = example.BLOCK.search(EXAMPLE_DOC)
    assert committed, "docs/example-result.md has no readme-example block"
    fresh = example.example_json(str(VENV / "bin" / "lookup-knowledge"), cwd=demo_checkout)
    changed = example.stale(committed[2], fresh)
    assert changed == [], "README example is stale: run `python docs/readme_example.py`"


def test_the_example_check_tolerates_cpu_float_noise_but_not_a_stale_result() -> None:
    """What varies by CPU (the fourth decimal of a score, more in the figures read against the
    probe null: margin, percentile, the store's bar) passes; a changed score, key, string or list
    length fails."""
    example = readme_example()
    committed = {"score": 2.3607, "normalizedScore": 0.6965, "n": 2, "found": True, "keys": ["a#chunk-1"]}
    assert example.differences(committed, {**committed, "score": 2.36, "normalizedScore": 0.6959}) == []
    attempt = {"hitKeys": ["a#chunk-1", "b#chunk-2"]}
    assert example.differences(attempt, {"hitKeys": ["b#chunk-2", "a#chunk-1"]}) == []
    assert example.differences(attempt, {"hitKeys": ["b#chunk-2", "c#chunk-1"]})
    assert example.differences(committed, {**committed, "normalizedScore": 0.71})
    assert example.differences(committed, {**committed, "keys": ["a#chunk-2"]})
    assert example.differences(committed, {**committed, "keys": []})
    assert example.differences(committed, {**committed, "n": 3})
    assert example.differences(committed, {**committed, "extra": None})
    verdict = {"margin": 8.9956, "densePercentile": 1.0, "denseTop": 0.6965}
    assert example.differences(verdict, {**verdict, "margin": 9.1685, "densePercentile": 0.9773}) == []
    assert example.differences(verdict, {**verdict, "margin": 7.2})  # amplified, not unbounded
    assert example.differences(verdict, {**verdict, "denseTop": 0.7065})
    bar = {"strictness": 2.4112, "ownQuestionsP5": 2.4112}  # the store's bar, as one CPU reads it
    assert example.differences(bar, {"strictness": 2.3835, "ownQuestionsP5": 2.3835}) == []  # another
    assert example.differences(bar, {**bar, "strictness": 2.1})  # a bar that moved: stale
    assert example.differences(bar, {**bar, "ownQuestionsP5": 2.7})
    assert example.differences(bar, {**bar, "ownQuestionsP5": None})  # the raise switched off
