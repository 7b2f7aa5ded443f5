"""Text from a file or a server, made safe to show on a terminal: one line, no escape sequences.

A manifest name, a model id or a file name may hold ANSI escapes, newlines or bidi overrides; shown
raw they could rewrite the screen or fake a line of output. Library code may use this: it only
builds strings.
"""

from __future__ import annotations

import unicodedata

# Categories that move the cursor, change colours or reorder text when printed: controls (C0, C1,
# DEL), format characters (bidi overrides, zero-width marks), line and paragraph separators,
# unassigned code points and lone surrogates (undecodable bytes).
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Cn", "Co"})
DISPLAY_LIMIT = 200


def printable(text: str, limit: int = DISPLAY_LIMIT) -> str:
    """`text` with every unsafe character written as a Python escape (\\x1b, \\n, \\u202e), cut at `limit`."""
    shown = text if len(text) <= limit else text[:limit]
    out = "".join(
        ch.encode("unicode_escape").decode("ascii") if unicodedata.category(ch) in UNSAFE_CATEGORIES else ch
        for ch in shown
    )
    return out if shown is text else out + f"… ({len(text)} characters)"
