"""What one local request reports as it runs: the reply split into reasoning and answer (with their
times), and the line each of the seven stages shows in the stats panel.
"""

from __future__ import annotations

import time

from llmcli.engine.events import Event, ReasoningDelta, Stats, TextDelta
from llmcli.engine.templates.thinking import REASONING, ReasoningSplitter
from llmcli.stages import num


def elapsed_ms(start: float, end: float | None = None) -> float:
    return ((end if end is not None else time.perf_counter()) - start) * 1000


class ReplySplit:
    """Reply text -> ReasoningDelta / TextDelta events, timing and counting the reasoning as it goes."""

    def __init__(self, splitter: ReasoningSplitter, stats: Stats, t0: float, t_first: float) -> None:
        self.splitter, self.stats, self.t0, self.t_first = splitter, stats, t0, t_first
        self._reasoned = False

    def events(self, text: str, n_generated: int, final: bool = False) -> list[Event]:
        stats, splitter = self.stats, self.splitter
        if splitter.state == "answer" and not final and stats.ttfa_ms is not None and self._settled:
            return [TextDelta(text)]  # the common case, once per token: nothing left to time or split
        pieces = splitter.feed(text) if text else []
        if final:
            pieces += splitter.flush()
        now = time.perf_counter()
        self._reasoned |= splitter.state == "thinking" or splitter.closed
        events: list[Event] = []
        for kind, piece in pieces:
            if kind == REASONING:
                events.append(ReasoningDelta(piece))
            else:
                if stats.ttfa_ms is None:
                    stats.ttfa_ms = elapsed_ms(self.t0, now)
                events.append(TextDelta(piece))
        if self._reasoned and stats.reasoning_ms is None and (splitter.closed or final):
            # The token that closed the reasoning counts as reasoning; an unclosed one is all reasoning.
            stats.reasoning_tokens, stats.reasoning_ms = n_generated, elapsed_ms(self.t_first, now)
        return events

    @property
    def _settled(self) -> bool:
        """No reasoning, or its time is taken: the answer's text passes through as it is."""
        return not self._reasoned or self.stats.reasoning_ms is not None


def stage_details(stats: Stats, prefill_tps: float | None, keep_cache: bool) -> dict[str, str]:
    """What each stage did in this request, where there is more to say than what the stage covers."""
    dropped = f", {stats.dropped_messages} old messages dropped" if stats.dropped_messages else ""
    details = {
        "tokenize": f"{stats.prompt_tokens} prompt tokens",
        "schedule": (
            f"{stats.cached_tokens} reused from cache{_source(stats)}, {stats.prefill_tokens} to prefill"
            f"{dropped}" + (f" ({stats.cache_note})" if stats.cache_note else "")
        ),
        "prefill": f"{num(prefill_tps)} tok/s · TTFT {num(stats.ttft_ms)} ms",
        "decode": (
            f"{stats.completion_tokens} tokens · {num(stats.decode_tps)} tok/s · "
            f"{num(stats.ms_per_token, 2)} ms/tok" + _draft_detail(stats)
        ),
        "release": (
            f"KV cache {stats.ctx_used}/{stats.n_ctx} positions, "
            + ("kept for the next turn" if keep_cache else "freed")
        ),
    }
    if stats.reasoning_tokens:
        details["decode"] += f" · {stats.reasoning_tokens} thinking, {num(stats.reasoning_ms)} ms"
    if stats.masked_words:
        details["postprocess"] = f"{stats.masked_words} words masked"
    return details


def _source(stats: Stats) -> str:
    return (
        f" ({'the disk prefix cache' if stats.cache_source == 'disk' else 'RAM'})"
        if stats.cache_source
        else ""
    )


def _draft_detail(stats: Stats) -> str:
    draft = stats.draft
    if draft is None:
        return ""
    accepted = f" ({num(draft.acceptance_rate * 100, 0)}%)" if draft.acceptance_rate is not None else ""
    return f" · drafted {draft.drafted}, accepted {draft.accepted}{accepted} in {draft.passes} passes"
