"""Keep llama.cpp's log off the terminal, but remember its errors for our messages.

llama.cpp writes its load log to stderr unless a callback is set, and bench's stderr is for our
progress lines only. The callback runs only while llama.cpp logs (loading, failures), never in
the decode loop, so a Python callback costs nothing measurable.
"""

from __future__ import annotations

import ctypes
from collections import deque

_ERROR = 3  # GGML_LOG_LEVEL_ERROR
_errors: deque[str] = deque(maxlen=4)
_callback = None  # a reference, so ctypes does not free the function llama.cpp holds


def quiet() -> None:
    global _callback
    if _callback is not None:
        return
    import llama_cpp.llama_cpp as L

    @L.llama_log_callback
    def _log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        if level == _ERROR and text:
            _errors.append(text.decode("utf-8", "replace").strip())

    _callback = _log
    L.llama_log_set(_callback, ctypes.c_void_p(0))


def last_error_suffix() -> str:
    """': <llama.cpp's last error>' or '' when it said nothing."""
    return f": {_errors[-1]}" if _errors else ""
