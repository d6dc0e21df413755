"""The public API is explicit: this pins the exported names."""

import os
import subprocess
import sys
from pathlib import Path

import lookup_knowledge


def test_exported_names_are_pinned() -> None:
    assert lookup_knowledge.__all__ == [
        "AgentLookup",
        "Config",
        "ConfigError",
        "EvidenceBlock",
        "IngestReport",
        "KnowledgeTool",
        "LookupResult",
        "ingest",
        "load_config",
        "sample_knowledge_base",
        "tool_definition",
    ]


def test_every_exported_name_exists() -> None:
    for name in lookup_knowledge.__all__:
        assert getattr(lookup_knowledge, name) is not None


def test_no_generic_top_level_packages_are_installed(tmp_path: Path) -> None:
    probe = (
        "import importlib.util as u; "
        "print(*(bool(u.find_spec(name)) for name in "
        "('lookup_knowledge.dataflows', 'lookup_knowledge.adapters', 'dataflows', 'adapters')))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["True", "True", "False", "False"]
