"""A server that says "not now": its 503, and the `Retry-After` header that says how long to wait.

RFC 9110 allows a whole number of seconds or an HTTP date. The value is the server's, so it is
input: anything else (a fraction, a sign, a date without a zone, a number past a day) reads as
None, "no advice", and the caller falls back on its own pause. A date already past is 0.
"""

from __future__ import annotations

from datetime import datetime, timezone

LONGEST = 86_400.0  # seconds: a longer wait is no advice a client can follow


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """The header's value -> seconds from `now` (default: the clock), or None when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    seconds: float | None
    if text.isascii() and text.isdigit():  # isdigit alone takes "²" and other scripts' digits
        seconds = float(int(text[:12]))  # a 12-digit cap keeps int() cheap on a hostile header
    else:
        seconds = _seconds_until(text, now or datetime.now(timezone.utc))
    return seconds if seconds is not None and seconds <= LONGEST else None


def _seconds_until(text: str, now: datetime) -> float | None:
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": the zone is unknown, so is the moment
        return None
    return max((when - now).total_seconds(), 0.0)
