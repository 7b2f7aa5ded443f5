"""Prompt-lookup drafting: guess the next tokens from where the latest ones appeared before.

Shell jobs such as `cat app.py | llmcli chat "Add type hints."` copy most of their input into the
reply, so the few tokens that followed the reply's last n tokens in the prompt (or earlier in the
reply) are often the next ones. The model checks a draft in one batched forward pass (see
engine/speculative.py); this module only proposes drafts and decides how long they should be.

Whether a draft pays depends on two numbers. On a CPU, verifying a batch of 1 + k tokens costs
about 1 + OVERHEAD + COST·k single steps (measured on the embedded model at 2 threads on an idle
machine: a batch of 2 costs 1.74 steps, of 5 3.25, of 9 4.4), and a draft is accepted position
by position until the first miss. With a per-position acceptance
probability a, a pass yields (1 - a^(k+1)) / (1 - a) tokens for that cost. The drafter estimates a
from recent passes, separately for each n-gram length (a 3-gram match is a far better guess than a
1-gram one), picks the k that maximises tokens per unit of cost, and does not draft at all when
no k beats a plain step. A paused order is probed again now and then, after longer and longer
pauses while probes keep failing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmcli.engine.events import DraftStats
from llmcli.errors import UsageError

# --draft values: what each one means, for the help text and the error message.
DRAFT_MODES: dict[str, str] = {
    "none": "plain decoding, one token per forward pass",
    "lookup": "draft from n-gram matches in the prompt and the reply, verified in one batch",
}


def parse_draft(text: str) -> str:
    """A --draft value, checked; the message lists the choices."""
    mode = text.strip().lower()
    if mode not in DRAFT_MODES:
        raise UsageError(f"unknown draft mode '{text}'; choose one of: {', '.join(DRAFT_MODES)}")
    return mode


@dataclass(frozen=True)
class LookupConfig:
    max_ngram: int = 3  # the longest suffix looked up first
    # 1-token matches drafted badly on every task of benchmarks/lookup_vs_plain.py (a common token
    # is followed by anything); 2 and 3 tokens say where in the prompt the reply is.
    min_ngram: int = 2
    max_len: int = 16  # tokens per draft at most
    overhead: float = 0.25  # extra cost of a verify batch over a single step, in single steps
    cost: float = 0.5  # extra cost of one more token in a verify batch, in single steps
    min_gain: float = 1.05  # draft only when the expected speedup of a pass is at least this
    prior: tuple[float, float] = (9.0, 10.0)  # (accepted, tried) before any pass: a = 0.9, worth a try
    decay: float = 0.8  # weight of the past in the acceptance estimate, per pass
    first_pause: int = 16  # tokens without drafting after a pass that did not pay
    max_pause: int = 256


@dataclass
class _Order:
    """The recent acceptance of drafts found by n-gram matches of one length."""

    accepted: float
    tried: float
    paused_until: int = 0  # no drafting from this order before the history is this long
    pause: int = 0

    @property
    def rate(self) -> float:
        return self.accepted / self.tried if self.tried else 0.0


def expected_tokens(rate: float, k: int) -> float:
    """Tokens one pass yields when each of k drafted positions is accepted with probability rate:
    the accepted prefix, plus the token sampled after it (a correction or a bonus)."""
    if rate >= 1.0:
        return k + 1.0
    return (1 - rate ** (k + 1)) / (1 - rate)


def best_length(rate: float, config: LookupConfig, limit: int) -> tuple[int, float]:
    """The draft length with the most tokens per unit of cost, and that speedup over a plain step."""
    best_k, best_gain = 0, 1.0
    for k in range(1, min(limit, config.max_len) + 1):
        gain = expected_tokens(rate, k) / (1 + config.overhead + config.cost * k)
        if gain > best_gain:
            best_k, best_gain = k, gain
    return best_k, best_gain


class NgramIndex:
    """The token history, and for every n-gram (n <= max_n) where its latest occurrence ended.

    An n-gram is registered only once the token after it is known, so a lookup of the history's
    own suffix finds an earlier occurrence, never itself. Each push is max_n dict updates.
    """

    def __init__(self, max_n: int) -> None:
        self.max_n = max_n
        self.tokens: list[int] = []
        self._next: list[dict[tuple[int, ...], int]] = [{} for _ in range(max_n + 1)]

    def push(self, token: int) -> None:
        toks, p = self.tokens, len(self.tokens)
        for n in range(1, min(self.max_n, p) + 1):
            self._next[n][tuple(toks[p - n:p])] = p
        toks.append(token)

    def extend(self, tokens: list[int]) -> None:
        for token in tokens:
            self.push(token)

    def continuation(self, n: int) -> int | None:
        """Where the tokens that followed the latest earlier occurrence of the last n tokens start."""
        if n > len(self.tokens):
            return None
        return self._next[n].get(tuple(self.tokens[-n:]))


@dataclass
class Draft:
    tokens: list[int]
    order: int  # the n-gram length that found it


@dataclass
class LookupDrafter:
    """Drafts for one request: the prompt and the reply so far, and the recent acceptance."""

    config: LookupConfig = field(default_factory=LookupConfig)

    def __post_init__(self) -> None:
        self.index = NgramIndex(self.config.max_ngram)
        accepted, tried = self.config.prior
        lengths = range(self.config.min_ngram, self.config.max_ngram + 1)
        self.orders = {n: _Order(accepted, tried) for n in lengths}
        self.counts = DraftStats()

    def push(self, token: int) -> None:
        self.index.push(token)

    def extend(self, tokens: list[int]) -> None:
        self.index.extend(tokens)

    def draft(self, limit: int) -> Draft | None:
        """Up to `limit` tokens that may follow the history, from its longest suffix seen before;
        None when nothing matches or drafting would not pay."""
        if limit <= 0:
            return None
        now = len(self.index.tokens)
        for n in range(self.config.max_ngram, self.config.min_ngram - 1, -1):
            start = self.index.continuation(n)
            if start is None:
                continue
            order = self.orders[n]
            if now < order.paused_until:
                return None  # the longest match decides; a shorter one is a worse guess
            k, gain = best_length(order.rate, self.config, limit)
            if gain < self.config.min_gain:
                if order.paused_until == 0:  # first time it stops paying: pause, then probe
                    self._pause(order, now)
                    return None
                k = 1  # a probe after a pause: the cheapest pass that can show it pays again
            tokens = self.index.tokens[start:start + k]
            return Draft(tokens, n) if tokens else None
        return None

    def result(self, draft: Draft, accepted: int) -> None:
        """Learn from a verified draft: its first `accepted` tokens were what the model sampled."""
        k = len(draft.tokens)
        self.counts.drafted += k
        self.counts.accepted += accepted
        self.counts.passes += 1
        order, d = self.orders[draft.order], self.config.decay
        order.accepted = d * order.accepted + accepted
        order.tried = d * order.tried + accepted + (1 if accepted < k else 0)
        paid = accepted + 1 >= 1 + self.config.overhead + self.config.cost * k
        if paid:
            order.pause, order.paused_until = 0, 0
        elif best_length(order.rate, self.config, self.config.max_len)[1] < self.config.min_gain:
            self._pause(order, len(self.index.tokens))

    def _pause(self, order: _Order, now: int) -> None:
        order.pause = min(self.config.max_pause, order.pause * 2 if order.pause else self.config.first_pause)
        order.paused_until = now + order.pause
