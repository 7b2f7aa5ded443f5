"""The gate of stage ②: whether there is room (the bounded queue: a place in flight from admission
until the request leaves), and each key's token limit.

A generation reserves, at admission, the most tokens it could use: its prompt and its max_tokens
(or the server's cap). It is refused with 429 when that does not fit in what its key has left of the
last minute, and pays, when it ends however it ends, what it used (the Outcome's prompt and
completion tokens, a cancelled or timed-out one's included); the rest goes back. What all of a key's
requests can spend in a minute is then at most --token-limit, however many run at once.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmcli.serve.config import ServeConfig
from llmcli.serve.errors import ApiError

if TYPE_CHECKING:
    from llmcli.serve.metrics import ServeMetrics
    from llmcli.serve.protocol import Generation

WINDOW_S = 60.0  # --token-limit counts the tokens of the last minute (a moving window)
# Admission comes before the prompt is rendered and tokenized (in the render thread), so it reserves
# an estimate, the prompt's characters / 4 (the usual average for text and code), and the exact count
# replaces it when the engine has queued the request (Started), before any byte of the answer: a
# request the exact count no longer fits is refused then, so the estimate decides nothing alone. It
# only holds a place for the prompt meanwhile and refuses a key that is plainly over before its
# prompt is rendered; it is low rather than high (a chat's template adds tokens) so that admission
# seldom refuses what fits.
CHARS_PER_TOKEN = 4
INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class Need:
    """The most tokens a request can use: its prompt's and its reply's."""

    prompt: int
    reply: int  # its max_tokens, or the server's cap
    asked: bool  # the request gave max_tokens
    exact: bool  # the prompt is tokenized (else estimated)
    choices: int = 1  # OpenAI's n: each choice may use max_tokens, the prompt is shared
    field: str = "max_tokens"  # the request's word for it (Ollama's options.num_predict)

    @property
    def total(self) -> int:
        return self.prompt + self.reply * self.choices

    def words(self) -> str:
        reply = f"its {self.field}" if self.asked else "the server's --max-tokens"
        times = f" x {self.choices} choices" if self.choices > 1 else ""
        return f"its prompt ({'' if self.exact else 'about '}{self.prompt}) and {reply} ({self.reply}){times}"

    @staticmethod
    def estimate(gen: Generation, n_ctx: int) -> Need:
        """At admission; n_ctx: the pool, which a reply without its own max_tokens never outgrows."""
        chars = len(gen.prompt or "") + sum(len(m.content) for m in gen.messages or ())
        reply = gen.max_tokens if gen.max_tokens is not None else min(gen.params.max_tokens, n_ctx or INT_MAX)
        asked = gen.max_tokens is not None or gen.cap_asked
        return Need(chars // CHARS_PER_TOKEN, reply, asked, False, gen.n, gen.reply_field)


@dataclass(eq=False)
class Reservation:
    """One request's tokens against its key's limit, from the moment it was admitted: first what it
    reserved, then what it used. `final` once the engine has said what it used."""

    who: str
    t: float  # time.monotonic() at admission: it counts until t + WINDOW_S
    tokens: int
    final: bool = False
    field: str = "max_tokens"  # the request's word for its reply's cap, for the hint a 429 gives
    asked: bool = False  # the request gave that cap (else the server's --max-tokens is the reply's)


class TokenLedger:
    """Each key's reservations of the last minute, oldest first.

    Not the `limits` library (used for --rate-limit): its moving window keeps one timestamp per unit
    of cost and has no way to take some back, and its fixed window can give back (decr) only into
    whatever window is current when the request ends, which may be a later one that was never charged.
    A reservation here keeps the time it was admitted and changes its amount in place: a refund or a
    correction stays in the minute it belongs to.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._reservations: dict[str, deque[Reservation]] = {}

    def _live(self, who: str, now: float) -> deque[Reservation]:
        reservations = self._reservations.setdefault(who, deque())
        while reservations and reservations[0].t <= now - WINDOW_S:
            reservations.popleft()
        return reservations

    def free(self, who: str, now: float, besides: Reservation | None = None) -> int:
        """What the key has left of its minute; `besides`: a reservation not to count (being resized)."""
        reservations = self._live(who, now)
        return self.limit - sum(t.tokens for t in reservations if t is not besides)

    def wait_s(self, who: str, need: int, now: float, besides: Reservation | None = None) -> int:
        """Seconds until `need` fits, as the oldest reservations leave the window (requests in flight may
        give some back sooner: an upper bound)."""
        short = need - self.free(who, now, besides)
        for reservation in self._live(who, now):
            if reservation is not besides:
                short -= reservation.tokens
                if short <= 0:
                    return max(1, math.ceil(reservation.t + WINDOW_S - now))
        return math.ceil(WINDOW_S)

    def reserve(self, who: str, tokens: int, now: float) -> Reservation:
        reservation = Reservation(who, now, tokens)
        self._live(who, now).append(reservation)
        return reservation


class Gate:
    def __init__(self, config: ServeConfig, metrics: ServeMetrics | None = None) -> None:
        self._tokens = TokenLedger(config.token_limit) if config.token_limit else None
        self._metrics = metrics
        self.capacity = config.parallel + config.max_queue  # requests in flight at most
        self.in_flight = 0  # admitted and not yet left: admit counts one, leave gives it back

    def admit(self, who: str, need: Need) -> Reservation | None:
        """A generation: its tokens reserved against the key's limit, then a place in the queue (one
        more in flight, until `leave`); 429 or 503 with Retry-After, at once. The reservation (None
        without --token-limit) is the request's to resize, settle or release."""
        now = time.monotonic()
        if self._tokens is not None:
            self._check_fits(who, need, now)
        if self.in_flight >= self.capacity:
            raise ApiError(
                503,
                f"the server is busy ({self.in_flight} requests in flight, the queue is full); try again",
                retry_after=1,
            )
        self.in_flight += 1
        if self._tokens is None:
            return None
        reservation = self._tokens.reserve(who, min(need.total, self._tokens.limit), now)
        reservation.field, reservation.asked = need.field, need.asked
        return reservation

    def leave(self) -> None:
        """An admitted request has ended: its place in the queue is free."""
        self.in_flight -= 1

    def resize(self, reservation: Reservation | None, need: Need) -> ApiError | None:
        """The exact reservation, once the prompt is tokenized: the 429 to answer if it no longer fits
        (the reservation is then void), else None."""
        if reservation is None or reservation.final:
            return None
        try:
            named = dataclasses.replace(need, field=reservation.field, asked=need.asked or reservation.asked)
            self._check_fits(reservation.who, named, time.monotonic(), reservation)
        except ApiError as refused:
            self.settle(reservation, 0)
            return refused
        reservation.tokens = need.total
        return None

    def release(self, reservation: Reservation | None) -> None:
        """A request that ended before the engine had started it (Started): it has used nothing so far.
        If the engine had taken it after all, its Outcome settles the reservation in turn."""
        if reservation is not None and not reservation.final:
            reservation.tokens = 0

    def settle(self, reservation: Reservation | None, used: int) -> None:
        """What the request used, once the engine says (its Outcome; 0 when refused): the reservation's
        final amount, the rest of the reservation back to its key."""
        if reservation is None or reservation.final:
            return
        reservation.tokens, reservation.final = used, True
        if self._metrics is not None:
            self._metrics.limit_settled.inc()
            self._metrics.limit_charged.inc(used)

    def _check_fits(self, who: str, need: Need, now: float, besides: Reservation | None = None) -> None:
        assert self._tokens is not None
        limit = self._tokens.limit
        if need.total > limit:  # waiting would not help: no Retry-After
            if not need.exact:
                # The tokenized prompt decides (resize): a hint from the estimate was refused again
                # once the template's tokens were counted.
                return
            room = (limit - need.prompt) // need.choices
            fix = f"send {need.field} of at most {room}" if room > 0 else "send a shorter prompt"
            raise ApiError(
                429,
                f"this request could use {need.total} tokens, {need.words()}, over this key's {limit} "
                f"tokens a minute; {fix}",
                need.field if room > 0 else None,
            )
        free = self._tokens.free(who, now, besides)
        if need.total > free:
            raise ApiError(
                429,
                f"over {limit} tokens a minute for this key: this request could use {need.total}, "
                f"{need.words()}, and {max(free, 0)} are left; wait and try again",
                retry_after=self._tokens.wait_s(who, need.total, now, besides),
            )
