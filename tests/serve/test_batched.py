"""At temperature 0 a reply over HTTP is the one its request gets alone, whatever shares its batch:
the same text, or one that parts from it only at a near-tie proven from the logits (the rule of
tests/engine/local/test_scheduler.py: a batch's kernels round a logits row by less than ROUNDING)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np

from llmcli.engine.local.runtime import Runtime
from llmcli.engine.local.scheduler import Scheduler
from llmcli.engine.local.sequence import Request
from tests.engine.local.test_scheduler import PROMPTS, ROUNDING, greedy, logits_after, tokens
from tests.serve.server import AUTH, HANG_GUARD_S

N = 12  # tokens a reply


def complete(server, prompt: str) -> str:
    body = {"prompt": prompt, "max_tokens": N, "temperature": 0}
    r = httpx.post(server.url + "/v1/completions", json=body, headers=AUTH, timeout=HANG_GUARD_S)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def assert_greedy_or_near_tie(rt: Runtime, prompt: str, text: str) -> None:
    """`text` (a server's reply to `prompt`) is the greedy reply decoded here alone, or where it leaves
    it the token it took was within ROUNDING of the greedy one in the logits row alone."""
    prompt_ids = tokens(rt, prompt)
    sched = Scheduler(rt)
    ref = sched.submit(Request(prompt_ids, greedy(N)))
    sched.run()
    sched.close()
    if text == ref.text:
        return
    # Walk the reference's tokens along the text: the first that is not next in it is where they part.
    data, at = text.encode(), 0
    ref_tokens = [*ref.generated, *([] if ref.eog_token is None else [ref.eog_token])]
    for k, token in enumerate(ref_tokens):  # noqa: B007 (k and token are where they part)
        if rt.is_eog(token) or not data.startswith(rt.piece(token), at):
            break
        at += len(rt.piece(token))
    else:
        raise AssertionError(f"{text!r} goes on past the {N} tokens of the greedy {ref.text!r}")
    # What the server took instead: a token whose text comes next in its reply, or an end of text.
    rest = data[at:]
    if rest:
        taken = [t for t in range(rt.n_vocab) if (piece := rt.piece(t)) and rest.startswith(piece)]
    else:
        taken = [t for t in range(rt.n_vocab) if rt.is_eog(t)]
    row = np.asarray(logits_after(rt, prompt_ids + ref.generated[:k]))
    gap = float(row[token] - row[taken].max())
    assert 0 <= gap <= ROUNDING, (
        f"{prompt!r}: the server's {text!r} leaves the greedy {ref.text!r} at token {k}, where the "
        f"closest token it could have taken is {gap:.3f} logits below the greedy one alone: more than "
        f"a batch's rounding ({ROUNDING})"
    )


def test_a_greedy_reply_among_four_concurrent_requests_is_the_reply_alone(server, runtime):
    prompts = PROMPTS[:4]
    alone = [complete(server, prompt) for prompt in prompts]
    with ThreadPoolExecutor(len(prompts)) as pool:  # four at once on two sequences: two wait
        together = list(pool.map(complete, [server] * len(prompts), prompts))
    assert all(alone) and all(together)
    for prompt, one, among in zip(prompts, alone, together, strict=True):
        if one != among:  # each parts from the greedy reply only at a near-tie, or not at all
            assert_greedy_or_near_tie(runtime, prompt, one)
            assert_greedy_or_near_tie(runtime, prompt, among)
