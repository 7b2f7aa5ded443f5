"""One way to print a size, for every command.

Decimal units (kB, MB, GB = 10^3, 10^6, 10^9 bytes). The numbers a user compares ours with are
decimal: the file sizes on a Hugging Face model page, `ollama list`, and `df -H`. llama.cpp's own
logs and `ls -h` use binary units (MiB, GiB), which are 5-7% smaller for the same file; we chose
one convention so that a file shows the same size in `list`, `show`, `pull`, `convert` and `bench`.
"""

from __future__ import annotations

# largest unit first; GB is the last step, so a terabyte reads "1200.0 GB" rather than switching unit
UNITS: tuple[tuple[str, int], ...] = (("GB", 10**9), ("MB", 10**6), ("kB", 10**3))


def format_bytes(n: int) -> str:
    """98_432_000 -> '98.4 MB'; below a kilobyte, whole bytes: '512 B'."""
    for unit, scale in UNITS:
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
