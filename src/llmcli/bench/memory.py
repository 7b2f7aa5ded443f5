"""Peak resident memory per measured model, on one long-lived process.

getrusage's ru_maxrss only ever grows, so the second model of a run would inherit the first
one's peak. Linux lets a process reset its own high-water mark (writing "5" to
/proc/self/clear_refs), which makes "peak RSS while this model ran" measurable per row.
Elsewhere we fall back to the process-wide maximum, which is still an upper bound.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def reset_peak_rss() -> bool:
    """Start a new peak-RSS window; False where the OS cannot (then peaks are process-wide)."""
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """The peak resident set since the last reset (or since the process started)."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # the kernel reports kB
    except (OSError, ValueError, IndexError):
        pass
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is kilobytes on Linux, bytes on macOS.
    return maxrss if sys.platform == "darwin" else maxrss * 1024
