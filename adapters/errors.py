"""The store's error family: every store adapter raises only :class:`StoreError` and its
subclasses, so the dataflow, the CLI and the agent catch one family whatever the engine."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .redaction import mask_secrets
from .text import first_line


class StoreError(RuntimeError):
    """The knowledge store failed; every adapter raises only subclasses of this. Its message has
    the credentials of any URL in it masked (:func:`~.redaction.mask_secrets`)."""

    def __init__(self, message: object = "") -> None:
        super().__init__(mask_secrets(str(message)))


class StoreUnavailableError(StoreError):
    """The store cannot be opened or reached: a server down or not answering in time."""


class StoreMissingError(StoreUnavailableError):
    """There is no store (or collection) at the configured place: ingest first."""


class StoreLockedError(StoreUnavailableError):
    """Another process holds the store."""


class StoreOutdatedError(StoreUnavailableError):
    """The store was built by an older release (dense vectors only, no BM25): ingest again."""

    def __init__(self, where: str) -> None:
        super().__init__(
            f"the knowledge store at {where} was ingested before hybrid retrieval (it has no BM25 "
            "vectors); delete it and run `lookup-knowledge ingest` again"
        )


class StoreBackendError(StoreError):
    """The store was reached but an operation failed (a server error, a corrupt segment)."""


class PointGoneError(StoreBackendError):
    """A point a search returned was not given back when its text was read: deleted since (a
    write of this process between the two calls), or unreadable."""


@contextmanager
def backend_errors(action: str) -> Iterator[None]:
    """Translate an engine's own exceptions raised while doing ``action`` into :class:`StoreBackendError`."""
    try:
        yield
    except StoreError:
        raise
    except Exception as exc:
        raise StoreBackendError(f"{action} failed: {first_line(exc)}") from exc
