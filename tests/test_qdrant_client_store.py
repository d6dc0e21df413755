"""The server store's collection layout: the configured shards, replicas and write consistency
reach ``create_collection``.

qdrant-client's local mode accepts these arguments and drops them (its collection info reports
none), and no Qdrant server runs here: so the seam is ``QdrantClient.create_collection`` itself,
wrapped to record its arguments while the real local-mode call still creates the collection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import make_config
from qdrant_client import QdrantClient

from lookup_knowledge.stores import open_store

LAYOUT = {"shard_number": 6, "replication_factor": 3, "write_consistency_factor": 2}


@pytest.fixture
def created(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The keyword arguments of every ``create_collection`` call, each passed on to the real one."""
    calls: list[dict[str, Any]] = []
    real = QdrantClient.create_collection

    def recording(self: QdrantClient, collection_name: str, **kwargs: Any) -> bool:
        calls.append(kwargs)
        return real(self, collection_name, **kwargs)

    monkeypatch.setattr(QdrantClient, "create_collection", recording)
    return calls


def server_config(path: Path, **layout: int):  # noqa: ANN201
    return make_config(path, store__backend="qdrant", **{f"store__{k}": v for k, v in layout.items()})


def test_a_new_collection_is_created_with_the_configured_layout(
    tmp_path: Path, created: list[dict[str, Any]]
) -> None:
    store = open_store(server_config(tmp_path, **LAYOUT), dimension=8)
    try:
        assert store.count() == 0  # the real local-mode collection exists
    finally:
        store.close()
    assert len(created) == 1
    assert {key: created[0][key] for key in LAYOUT} == LAYOUT


def test_an_unset_layout_leaves_every_setting_to_the_server(
    tmp_path: Path, created: list[dict[str, Any]]
) -> None:
    open_store(server_config(tmp_path), dimension=8).close()
    assert [created[0][key] for key in LAYOUT] == [None, None, None]


def test_an_existing_collection_keeps_its_layout(tmp_path: Path, created: list[dict[str, Any]]) -> None:
    open_store(server_config(tmp_path, shard_number=2), dimension=8).close()
    open_store(server_config(tmp_path, shard_number=4), dimension=8).close()
    assert [call["shard_number"] for call in created] == [2]  # reopened, never created again
