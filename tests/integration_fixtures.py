"""Shared by the framework integration tests (``tests/test_integration_*.py``): the questions, a
sample store whose refund policy only ``finance`` may see (the ``restricted_agent`` fixture of
conftest records calls over it), a store outage, and the
framework import that skips where its extra is absent (fails instead where CI sets
``LOOKUP_KNOWLEDGE_REQUIRE_EXTRAS``: CI installs every extra)."""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest

from lookup_knowledge import AgentLookup, ingest, sample_knowledge_base
from lookup_knowledge.adapters.embedder import Embedder
from lookup_knowledge.config import Config
from lookup_knowledge.extras import missing_modules

REFUND_QUESTION = "Who must approve a refund above 500 EUR?"
REFUND_DOC = "payments-refund-policy"
REFUND_KEY = "payments-refund-policy#chunk-2"  # the block that answers it
NO_EVIDENCE_QUESTION = "What is the airspeed velocity of an unladen swallow?"
FINANCE, SUPPORT = ["finance"], ["support"]  # the refund policy's reader, and a caller it is hidden from


def integration(extra: str, module: str) -> ModuleType:
    """``lookup_knowledge.integrations.<module>``, or a skip naming the extra it needs (a failure
    when ``LOOKUP_KNOWLEDGE_REQUIRE_EXTRAS`` is set)."""
    if missing := missing_modules(extra):
        reason = f"the '{extra}' extra is not installed ({', '.join(missing)})"
        if os.environ.get("LOOKUP_KNOWLEDGE_REQUIRE_EXTRAS"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason, allow_module_level=True)
    return importlib.import_module(f"lookup_knowledge.integrations.{module}")


def restrict_refund_policy(store_config: Config, embedder: Embedder, workdir: Path) -> None:
    """Ingest the sample knowledge base again with ``access: [finance]`` on its refund policy
    (only that document changes: the others are skipped as unchanged)."""
    source = shutil.copytree(sample_knowledge_base(), workdir / "sample-kb")
    policy = source / "payments" / "refund-policy.md"
    policy.write_text(policy.read_text(encoding="utf-8").replace("---\n", "---\naccess: [finance]\n", 1))
    ingest(source, store_config, embedder=embedder)


@contextmanager
def store_down(agent: AgentLookup) -> Iterator[None]:
    """The store's searches fail (a fault, injected) while in the block: lookups are ``retrieval_failed``."""
    with pytest.MonkeyPatch.context() as patch:
        for method in ("search", "search_batch"):
            patch.setattr(agent.tool.search_port, method, _raise_store_down)
        yield


def _raise_store_down(*_: object) -> None:
    raise ConnectionError("the store is down")
