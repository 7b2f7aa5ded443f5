"""Prompt-lookup drafting: guess the next tokens from where the latest ones appeared before.

Shell jobs such as `cat app.py | llmcli chat "Add type hints."` copy most of their input into the
reply, so the few tokens that followed the reply's last n tokens in the prompt (or earlier in the
reply) are often the next ones. The model checks a draft in one batched forward pass (see
engine/local/speculative.py); this module only proposes drafts and decides how long they should be.

Whether a draft pays depends on two numbers. On a CPU, verifying a batch of 1 + k tokens costs
about 1 + OVERHEAD + COST·k single steps (measured on the embedded model at 2 threads on an idle
machine: a batch of 2 costs 1.74 steps, of 5 3.25, of 9 4.4; benchmarks/README.md has more), and a
draft is accepted position by position until the first miss. A copied reply runs in stretches:
the first token after a match is a coin toss (the reply may leave the prompt there), the ones
after an accepted token are far likelier. So the drafter keeps two rates, `first` and `then`,
and picks the k that maximises the expected tokens per unit of cost, or does not draft when no k
beats a plain step.

Both rates are learnt from the tokens of the reply, drafted or not: a shadow draft follows the
reply, and each token that arrives says whether it would have been accepted. Learning costs no
forward pass, so drafting stops as soon as the reply leaves the prompt.

Learning still costs Python work on every token. When no pass has paid for `patience` steps (the
reply does not copy, or its drafts do not pay), the drafter sleeps: the caller decodes plainly,
exactly as `--draft none` does, and the drafter sees nothing for `backoff` tokens, an interval
that doubles after each wake that found nothing to draft and starts over once a pass pays. On
waking it indexes the tokens it slept through in bulk and learns again. A reply that never
copies so costs a plain decode plus a few tokens of learning per doubling interval.
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
    # (hits, tries) before the reply starts: a fresh match is a coin toss, a token after a hit likely.
    prior_first: tuple[float, float] = (1.0, 2.0)
    prior_then: tuple[float, float] = (3.0, 4.0)
    decay: float = 0.95  # weight of the past in each rate, per observed token (about 20 recent ones)
    # Plain steps and passes that did not pay, in a row, before drafting sleeps; a copy usually
    # starts paying 4-5 tokens after the reply starts copying.
    patience: int = 16
    backoff: tuple[int, int] = (16, 256)  # tokens asleep: the first interval, and the most it doubles to

    def pays(self, drafted: int, accepted: int) -> bool:
        """Whether a pass of `drafted` tokens with `accepted` of them right beat plain steps."""
        return accepted + 1 >= 1 + self.overhead + self.cost * drafted


@dataclass
class _Rate:
    """A decayed hit rate."""

    hits: float
    tries: float

    @property
    def value(self) -> float:
        return self.hits / self.tries if self.tries else 0.0


def expected_tokens(first: float, then: float, k: int) -> float:
    """Tokens one pass yields with k drafted positions, the first accepted with probability
    `first` and each later one, after an accepted one, with probability `then`: the accepted
    prefix, plus the token sampled after it (a correction or a bonus)."""
    total, p = 1.0, first
    for _ in range(k):
        total += p
        p *= then
    return total


def best_length(first: float, then: float, config: LookupConfig, limit: int) -> tuple[int, float]:
    """The draft length with the most tokens per unit of cost, and that speedup over a plain step."""
    best_k, best_gain = 0, 1.0
    total, p = 1.0, first
    for k in range(1, min(limit, config.max_len) + 1):
        total += p
        p *= then
        gain = total / (1 + config.overhead + config.cost * k)
        if gain > best_gain:
            best_k, best_gain = k, gain
    return best_k, best_gain


class NgramIndex:
    """The token history, and for every n-gram (min_n <= n <= max_n) where its latest occurrence ended.

    An n-gram is registered only once the token after it is known, so a lookup of the history's
    own suffix finds an earlier occurrence, never itself. Pushing a token only appends it: the
    n-grams are registered in bulk when a lookup needs them (dict.update over zipped slices, in C),
    so a stretch of the reply that is never looked up costs no Python work per token.
    """

    def __init__(self, max_n: int, min_n: int = 1) -> None:
        self.min_n, self.max_n = min_n, max_n
        self.tokens: list[int] = []
        self._next: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in range(min_n, max_n + 1)}
        self._done = 0  # the n-grams that end before tokens[p] are registered for every p < _done

    def push(self, token: int) -> None:
        self.tokens.append(token)

    def extend(self, tokens: list[int]) -> None:
        self.tokens.extend(tokens)

    def _register(self) -> None:
        toks, done, end = self.tokens, self._done, len(self.tokens)
        if end - done < 64:  # a few tokens since the last lookup: a loop costs less than setting up zips
            for p in range(done, end):
                for n, table in self._next.items():
                    if n <= p:
                        table[tuple(toks[p - n : p])] = p
        else:
            for n, table in self._next.items():
                start = max(done, n)  # the n-gram tokens[p - n : p] -> p, for p in start .. end - 1
                grams = zip(*[toks[start - n + j : end - n + j] for j in range(n)], strict=True)
                table.update(zip(grams, range(start, end), strict=True))
        self._done = end

    def continuation(self, n: int) -> int | None:
        """Where the tokens that followed the latest earlier occurrence of the last n tokens start."""
        if n > len(self.tokens):
            return None
        if self._done < len(self.tokens):
            self._register()
        return self._next[n].get(tuple(self.tokens[-n:]))


@dataclass
class Draft:
    tokens: list[int]
    order: int  # the n-gram length that found it


@dataclass
class LookupDrafter:
    """Drafts for one request: the prompt and the reply so far, and how often guesses came true.

    `extend` takes the prompt, `push` each token of the reply as it is handed out (drafted or
    not) while awake, `skip` the ones decoded while it slept; `draft` proposes what follows (or
    sets `sleep`: the tokens the caller decodes plainly before the next `push`), `result` counts
    what a verify pass accepted.
    """

    config: LookupConfig = field(default_factory=LookupConfig)

    def __post_init__(self) -> None:
        config = self.config
        self.index = NgramIndex(config.max_ngram, config.min_ngram)
        self.first = _Rate(*config.prior_first)
        self.then = _Rate(*config.prior_then)
        self.counts = DraftStats()
        self.learnt = self.skipped = self.sleeps = 0  # reply tokens pushed, skipped; times it slept
        self.sleep = 0  # set by draft(): the tokens to decode plainly before pushing the next one
        self._idle = 0  # plain steps and unpaid passes since a pass last paid (or since waking)
        self._backoff = config.backoff[0]
        # The best a pass can yield per unit of cost is below (1 + p / (1 - q)) / (1 + overhead + cost)
        # with p, q the rates: drafts are weighed (best_length) only when that bound reaches min_gain.
        self._floor = config.min_gain * (1 + config.overhead + config.cost)
        self._shadow: list[int] = []  # the guess the reply is being compared with, token by token
        self._shadow_order = 0
        self._shadow_fresh = True  # its next token is the first after a match (not after a hit)

    def extend(self, tokens: list[int]) -> None:
        """The prompt: indexed, not learnt from (its own repeats say nothing about the reply)."""
        self.index.extend(tokens)
        self._follow()

    def push(self, token: int) -> None:
        """One more token of the reply: learn whether the shadow guessed it, then index it."""
        shadow = self._shadow
        self.learnt += 1
        if shadow:
            rate = self.then if not self._shadow_fresh else self.first
            decay = self.config.decay
            rate.tries = decay * rate.tries + 1
            if shadow[0] == token:
                rate.hits = decay * rate.hits + 1
                del shadow[0]
                self._shadow_fresh = False
            else:
                rate.hits *= decay
                shadow.clear()
        self.index.tokens.append(token)
        if not shadow:
            self._follow()

    def skip(self, tokens: list[int]) -> None:
        """Tokens of the reply decoded while asleep: indexed, not learnt from."""
        self.index.extend(tokens)
        self.skipped += len(tokens)
        self._idle = 0
        self._follow()

    def _follow(self) -> None:
        """A new shadow: what followed the longest suffix of the history seen before."""
        config, index = self.config, self.index
        for n in range(config.max_ngram, config.min_ngram - 1, -1):
            start = index.continuation(n)
            if start is not None:
                self._shadow = index.tokens[start : start + config.max_len]
                self._shadow_order, self._shadow_fresh = n, True
                return
        self._shadow = []

    def draft(self, limit: int) -> Draft | None:
        """Up to `limit` tokens that may follow the history; None when nothing matches or
        drafting would not pay (and, after `patience` such tokens, `sleep` is set)."""
        self.sleep = 0
        if limit > 0 and self._shadow:
            first = (self.first if self._shadow_fresh else self.then).value
            then = self.then.value
            if then >= 1.0 or 1 + first / (1 - then) >= self._floor:
                k, gain = best_length(first, then, self.config, limit)
                if gain >= self.config.min_gain:
                    return Draft(self._shadow[:k], self._shadow_order)
        self._idle += 1
        if self._idle >= self.config.patience:
            self.sleep, self.sleeps, self._idle = self._backoff, self.sleeps + 1, 0
            self._backoff = min(2 * self._backoff, self.config.backoff[1])
        return None

    def result(self, draft: Draft, accepted: int) -> None:
        """Count a verified draft: its first `accepted` tokens were what the model sampled. (The
        rates learn from the tokens themselves, as they are pushed.) A pass that paid keeps the
        drafter awake and starts its back-off over."""
        self.counts.drafted += len(draft.tokens)
        self.counts.accepted += accepted
        self.counts.passes += 1
        if self.config.pays(len(draft.tokens), accepted):
            self._idle, self._backoff = 0, self.config.backoff[0]
        else:
            self._idle += 1
