"""Stage ① on the event loop: who is asking (API keys), whether they may (rate and token limits per
key), whether there is room (the bounded queue), and the body (capped)."""

from __future__ import annotations

import hmac
import math
import time

from llmcli.serve.config import ServeConfig
from llmcli.serve.errors import ApiError

OPEN = "-"  # the one identity when the server has no keys


class Gate:
    def __init__(self, config: ServeConfig) -> None:
        from limits import RateLimitItemPerMinute
        from limits.storage import MemoryStorage
        from limits.strategies import FixedWindowRateLimiter

        self._keys = [key.encode("utf-8") for key in config.api_keys]
        self._limiter = FixedWindowRateLimiter(MemoryStorage())
        self._requests = RateLimitItemPerMinute(config.rate_limit) if config.rate_limit else None
        self._tokens = RateLimitItemPerMinute(config.token_limit) if config.token_limit else None
        self.capacity = config.parallel + config.max_queue  # requests in flight at most
        self.in_flight = 0

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

    def admit(self, who: str) -> None:
        """A generation: the token limit, then room in the queue; 429 or 503 with Retry-After, at once."""
        if self._tokens is not None and not self._limiter.test(self._tokens, who):
            raise ApiError(
                429,
                f"over {self._tokens.amount} tokens a minute for this key; wait and try again",
                retry_after=self._retry_after(self._tokens, who),
            )
        if self.in_flight >= self.capacity:
            raise ApiError(
                503,
                f"the server is busy ({self.in_flight} requests in flight, the queue is full); try again",
                retry_after=1,
            )

    def charge(self, who: str, tokens: int) -> None:
        """A finished request's prompt + completion tokens count against its key's token limit."""
        if self._tokens is not None and tokens > 0:
            self._limiter.hit(self._tokens, who, cost=tokens)

    def _retry_after(self, item, who: str) -> int:
        reset = self._limiter.get_window_stats(item, who).reset_time
        return max(1, math.ceil(reset - time.time()))
