"""The wall time a command has taken since its process started, interpreter start and imports
included (what the ``query`` and ``shell`` footers report), and a process end that adds little
to it."""

from __future__ import annotations

import atexit
import gc
import os
import time
from pathlib import Path

_LOADED = time.monotonic()  # the fallback's origin: the CLI package imports this module first


def seconds_since_start() -> float:
    """Wall seconds since this process started: the kernel's start time of the process against
    the boot clock (Linux, 10 ms resolution), else since the ``cli`` package was imported (which
    leaves out the interpreter's own start, a few tens of milliseconds)."""
    try:
        stat = Path("/proc/self/stat").read_text(encoding="ascii")
        ticks = int(stat.rpartition(")")[2].split()[19])  # field 22, starttime (field 3 follows ")")
        return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):  # not Linux
        return time.monotonic() - _LOADED


def end_without_final_collection() -> None:
    """Let the process end without the interpreter's last garbage collections over every object
    the libraries made (pandas, SQLAlchemy, pydantic: over a second after a ``query``, on a busy
    2-core machine). Registered first among exit handlers, so it runs last, after theirs; by then
    a command has closed what it opened, and nothing is left for a collection to finalize."""
    atexit.unregister(gc.freeze)  # once per process, however many commands it runs
    atexit.register(gc.freeze)
