"""Stage ① on the event loop, before any route: who is asking (API keys) and whether they may (the
rate limit per key). The body's cap is the middleware's (serve/app.py); the queue and the token
limit are the gate's (serve/gate.py), taken when a call starts.
"""

from __future__ import annotations

import hmac
import math
import time

from llmcli.serve.config import ServeConfig
from llmcli.serve.errors import ApiError

OPEN = "-"  # the one identity when the server has no keys


class Door:
    def __init__(self, config: ServeConfig) -> None:
        from limits import RateLimitItemPerMinute
        from limits.storage import MemoryStorage
        from limits.strategies import FixedWindowRateLimiter

        self._keys = [key.encode("utf-8") for key in config.api_keys]
        self._limiter = FixedWindowRateLimiter(MemoryStorage())
        self._requests = RateLimitItemPerMinute(config.rate_limit) if config.rate_limit else None

    def identify(self, authorization: str | None, x_api_key: str | None) -> str:
        """The caller's identity for the limits: the index of its key (never the key itself)."""
        if not self._keys:
            return OPEN
        given = x_api_key
        if authorization is not None:
            scheme, _, token = authorization.partition(" ")
            given = token.strip() if scheme.lower() == "bearer" else None
        if not given:
            raise ApiError(
                401, "this server needs an API key: send `Authorization: Bearer KEY` or `x-api-key: KEY`"
            )
        data = given.encode("utf-8", "surrogateescape")
        found = None
        for i, key in enumerate(self._keys):  # every key is compared, found or not: constant time
            if hmac.compare_digest(data, key):
                found = i
        if found is None:
            raise ApiError(401, "the API key is not valid for this server")
        return f"key{found}"

    def count(self, who: str) -> None:
        """One more request against the key's rate limit (every route but /health and /metrics)."""
        if self._requests is not None and not self._limiter.hit(self._requests, who):
            raise ApiError(
                429,
                f"over {self._requests.amount} requests a minute for this key; wait and try again",
                retry_after=self._retry_after(self._requests, who),
            )

    def _retry_after(self, item, who: str) -> int:
        reset = self._limiter.get_window_stats(item, who).reset_time
        return max(1, math.ceil(reset - time.time()))
