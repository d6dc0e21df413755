"""A Dask cluster for ingest: the connection to its scheduler, and an embedder whose model runs on
its workers while the caller keeps the store writes (the ``dask`` extra).

>>> with connect("tcp://scheduler:8786") as client:  # doctest: +SKIP
...     embedder = DaskEmbedder(client, functools.partial(build_embedder, config), "all-MiniLM-L6-v2")
...     ingest("knowledge/", config, embedder=embedder)
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .embedder import Embedder, EmbedderError
from .redaction import mask_secrets
from .text import first_line

PACKAGE = "lookup-knowledge"
EmbedderFactory = Callable[[], Embedder]
WorkerTask = Callable[[EmbedderFactory, list[str]], np.ndarray]


class ClusterUnavailableError(RuntimeError):
    """No Dask scheduler at the address, one without workers, or workers that cannot run
    lookup-knowledge's tasks (the message is one line)."""


def connect(address: str) -> Any:
    """A client of the Dask scheduler at ``address`` that has a worker, or
    :class:`ClusterUnavailableError` within Dask's connect timeout
    (``distributed.comm.timeouts.connect``, e.g. ``DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=10s``)."""
    import dask
    from dask.distributed import Client

    where = mask_secrets(address)
    timeout = dask.config.get("distributed.comm.timeouts.connect")
    try:
        client = Client(address, set_as_default=False)
    except (OSError, ValueError, TypeError) as exc:  # refused, timed out, not an address
        raise ClusterUnavailableError(f"no Dask scheduler at {where}: {first_line(exc)}") from None
    try:
        client.wait_for_workers(1, timeout=timeout)
        _check_versions(client)
    except TimeoutError:
        client.close()
        raise ClusterUnavailableError(
            f"the Dask scheduler at {where} has no workers (waited {timeout}): start one with "
            f"`dask worker {where}`"
        ) from None
    except BaseException:
        client.close()
        raise
    return client


def _check_versions(client: Any) -> None:
    """Refuse workers that do not run this lookup-knowledge version: a worker without the package
    cannot even read a task of it (its connection fails, the task waits forever), and another
    version may embed differently. Asked with a standard-library function, which every worker
    can read."""
    mine = installed_version()
    found = client.run(importlib.metadata.version, PACKAGE, on_error="return")
    other = {worker: "none" if isinstance(v, Exception) else v for worker, v in found.items() if v != mine}
    if other:
        listed = ", ".join(f"{worker} ({version})" for worker, version in sorted(other.items()))
        raise ClusterUnavailableError(
            f"Dask workers without {PACKAGE} {mine}: {listed}; install it on every worker "
            f"(pip install '{PACKAGE}[dask]=={mine}')"
        )


def installed_version() -> str:
    """This process's lookup-knowledge version, which every worker must run."""
    return importlib.metadata.version(PACKAGE)


class DaskEmbedder(Embedder):
    """Texts embedded on the Dask cluster behind ``client``: split in pieces run in parallel and
    returned in order, ``piece_size`` texts each (one model batch), smaller when that leaves
    worker threads idle. Each task builds its embedder on the worker with ``factory`` (cheap: the
    model loads once per worker process and stays loaded there); only texts go out and vectors
    come back."""

    def __init__(self, client: Any, factory: EmbedderFactory, model_name: str, piece_size: int = 64) -> None:
        if piece_size < 1:
            raise ValueError("piece_size must be at least 1")
        self.model_name = model_name
        self._client = client
        self._factory = factory
        self._piece_size = piece_size

    @functools.cached_property
    def dimension(self) -> int:
        return self._gathered([self._client.submit(_worker_dimension, self._factory, pure=False)])[0]

    @property
    def encodes_off_cpu(self) -> bool:
        """The cluster's workers encode while this process waits: ingest writes one group while
        the next is embedded."""
        return True

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._rows(_worker_documents, texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_queries([text])[0]

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._rows(_worker_queries, texts)

    def _rows(
        self, task: Callable[[EmbedderFactory, list[str]], np.ndarray], texts: Sequence[str]
    ) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        threads = sum(self._client.nthreads().values()) or 1
        size = max(1, min(self._piece_size, -(-len(texts) // threads)))  # a piece for every thread
        pieces = [list(texts[start : start + size]) for start in range(0, len(texts), size)]
        futures = self._client.map(task, [self._factory] * len(pieces), pieces, pure=False)
        return np.concatenate(self._gathered(futures))

    def _gathered(self, futures: list[Any]) -> list[Any]:
        """The futures' results; a failure on the cluster (the model, a lost worker, a worker
        without lookup-knowledge) is an :class:`EmbedderError`, as it is in this process."""
        try:
            return self._client.gather(futures)
        except EmbedderError:
            raise
        except Exception as exc:
            raise EmbedderError(
                f"embedding on the Dask cluster at {mask_secrets(str(self._client.scheduler.address))} "
                f"failed: {first_line(exc, with_type=True)}"
            ) from exc


def _worker_dimension(factory: EmbedderFactory) -> int:
    return factory().dimension


def _worker_documents(factory: EmbedderFactory, texts: list[str]) -> np.ndarray:
    return factory().embed_documents(texts)


def _worker_queries(factory: EmbedderFactory, texts: list[str]) -> np.ndarray:
    return factory().embed_queries(texts)
