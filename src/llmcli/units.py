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


# Parameter counts as llama.cpp's model type labels them ("135M", "1.5B"), largest unit first;
# "140K" for the tiny models tests build.
PARAM_UNITS: tuple[tuple[str, int, int], ...] = (("B", 10**9, 1), ("M", 10**6, 0), ("K", 10**3, 0))


def format_params(n: int | None) -> str:
    """134_515_008 -> '135M'; 1_543_714_304 -> '1.5B'; 140_000 -> '140K'; unknown (None or 0): '-'."""
    if not n:
        return "-"
    for unit, scale, digits in PARAM_UNITS:
        if n >= scale:
            return f"{n / scale:.{digits}f}{unit}"
    return str(n)
