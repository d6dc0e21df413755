"""The wall time a command has taken since its process started, interpreter start and imports
included: what the ``query`` and ``shell`` footers report."""

from __future__ import annotations

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
