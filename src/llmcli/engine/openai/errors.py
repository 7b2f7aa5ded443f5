"""What a remote server's failures raise: refusals exit 2, failures exit 1 (errors.py's classes).

Apart from client.py, which builds them from an answer, so that retry.py and whoever waits on a 503
can name them without importing the HTTP client.
"""

from __future__ import annotations

from llmcli.errors import RuntimeFailure, UsageError


class RemoteError(RuntimeFailure):
    """The server could not be reached or failed while the request was fine (exit 1)."""


class RemoteRefused(UsageError):
    """The server refused what we asked for: the key, the model, the request (exit 2)."""


class RemoteTimeout(RemoteError):
    pass


class RemoteDropped(RemoteError):
    """The connection ended before the reply did."""


class RemoteUnavailable(RemoteError):
    """503: the server cannot serve now (still loading its model, or on its way down)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after  # seconds the server asked us to wait; None: it did not say
