"""Source files as ingest saw them, and whether each is still so: the freshness of evidence.

A chunk's payload keeps its file's absolute path, version (the hash of its bytes), modification
time and size at ingest. A check stats the file first and hashes it only when the time or size
differ, so an unchanged file costs one ``stat``.

>>> stamp = SourceFile.read(Path("kb/guide.md"))  # doctest: +SKIP
>>> is_stale(stamp)  # doctest: +SKIP
False
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lookup_knowledge.adapters.payload import SOURCE_FILE_FIELD, SourceFilePayload
from lookup_knowledge.adapters.text import printable_path


@dataclass(frozen=True, slots=True)
class SourceFile:
    """A source file as ingest read it."""

    path: str
    version: str
    mtime_ns: int
    size: int

    @classmethod
    def read(cls, path: Path) -> tuple[SourceFile, bytes]:
        """The stamp of ``path`` and its bytes; stat before reading, so a write in between reads
        as a change, never as the old version."""
        stat = path.stat()
        raw = path.read_bytes()
        return cls(str(path.absolute()), bytes_version(raw), stat.st_mtime_ns, stat.st_size), raw

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> SourceFile | None:
        """The stamp a chunk's payload carries; ``None`` for no file source or an older store."""
        stamp = payload.get(SOURCE_FILE_FIELD)
        if not isinstance(stamp, Mapping):
            return None
        try:
            path = os.fsdecode(bytes.fromhex(stamp["path_bytes"])) if "path_bytes" in stamp else stamp["path"]
            return cls(str(path), str(stamp["version"]), int(stamp["mtime_ns"]), int(stamp["size"]))
        except (KeyError, TypeError, ValueError):
            return None

    @property
    def display_path(self) -> str:
        """The path as text any JSON writer takes: undecodable bytes of the file name (read as
        surrogates) shown as ``\\xff`` escapes."""
        return printable_path(self.path)

    def payload(self) -> SourceFilePayload:
        """The stamp as the payload keeps it; a file name that is not UTF-8 also as its bytes
        (hex), so the stale check still finds the file."""
        fields = SourceFilePayload(
            path=self.path, version=self.version, mtime_ns=self.mtime_ns, size=self.size
        )
        if self.display_path != self.path:
            fields["path"], fields["path_bytes"] = self.display_path, os.fsencode(self.path).hex()
        return fields


def bytes_version(raw: bytes) -> str:
    """The version of a source file's content: the first 32 hex digits of its SHA-256."""
    return hashlib.sha256(raw).hexdigest()[:32]


def file_version(path: Path) -> str:
    """The version of the file at ``path`` now."""
    return bytes_version(path.read_bytes())


def is_stale(stamp: SourceFile) -> bool:
    """Whether the file changed (other bytes) or vanished since ``stamp``; same time and size
    count as unchanged without reading it."""
    try:
        stat = os.stat(stamp.path)
        if (stat.st_mtime_ns, stat.st_size) == (stamp.mtime_ns, stamp.size):
            return False
        return file_version(Path(stamp.path)) != stamp.version
    except OSError:  # vanished or unreadable: what the block says is no longer there to check
        return True
