"""The public API is explicit: this pins the exported names."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import lookup_knowledge


def test_exported_names_are_pinned() -> None:
    assert lookup_knowledge.__all__ == [
        "AgentLookup",
        "AnswerVerdict",
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
        "verify_answer",
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


@pytest.mark.slow
def test_the_package_builds_without_warnings_and_ships_its_data(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(root)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "Warning" in line]
    assert warnings == [], "\n".join(warnings)
    (wheel,) = tmp_path.glob("lookup_knowledge-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert sum(name.startswith("lookup_knowledge/sample-kb/") for name in names) == 30
    assert "lookup_knowledge/sample-eval/qrels.tsv" in names
    assert "lookup_knowledge/configs/default.yaml" in names
    reader = {
        f"lookup_knowledge/models/answerability/{f}" for f in ("model.onnx", "tokenizer.json", "config.json")
    }
    assert reader <= set(names)  # the answerability reader's weights: no download
    assert {
        "lookup_knowledge/review/templates/base.html",
        "lookup_knowledge/review/static/review.css",
    } <= set(names)
