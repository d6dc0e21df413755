"""The framework integrations as packages: each module imports its own framework only, each is a
pip extra that ``all`` installs, and one whose extra is absent says what to install."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from lookup_knowledge.extras import EXTRAS, MissingExtraError

ROOT = Path(__file__).resolve().parents[1]
MODULES = {  # module of lookup_knowledge.integrations -> its extra
    "langchain": "langchain",
    "llamaindex": "llamaindex",
    "haystack": "haystack",
    "openai_agents": "openai-agents",
    "pydantic_ai": "pydantic-ai",
}
FRAMEWORKS = {"langchain_core", "llama_index", "haystack", "agents", "pydantic_ai"}


def imported_top_level(statement: str) -> set[str]:
    """The top-level packages a fresh interpreter imports to run ``statement``."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement], capture_output=True, text=True, check=True
    )
    return {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines()}


def test_the_shared_part_imports_no_framework() -> None:
    assert not imported_top_level("import lookup_knowledge.integrations.common") & FRAMEWORKS


@pytest.mark.parametrize("module", sorted(MODULES))
def test_each_module_imports_its_own_framework_only(module: str) -> None:
    extra = MODULES[module]
    if any(importlib.util.find_spec(name.split(".")[0]) is None for name in EXTRAS[extra]):
        pytest.skip(f"the '{extra}' extra is not installed")
    imported = imported_top_level(f"import lookup_knowledge.integrations.{module}") & FRAMEWORKS
    assert imported == {EXTRAS[extra][0].split(".")[0]}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_missing_framework_names_its_extra(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    extra = MODULES[module]
    monkeypatch.setitem(sys.modules, EXTRAS[extra][0], None)  # not importable, as if not installed
    monkeypatch.delitem(sys.modules, f"lookup_knowledge.integrations.{module}", raising=False)
    with pytest.raises(MissingExtraError, match=rf"pip install 'lookup-knowledge\[{extra}\]'"):
        importlib.import_module(f"lookup_knowledge.integrations.{module}")


def test_every_integration_is_an_extra_that_all_installs() -> None:
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    everything = optional["all"][0].split("[", 1)[1].rstrip("]").split(",")
    for extra in MODULES.values():
        assert optional[extra] and extra in everything
