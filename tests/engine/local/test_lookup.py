"""Prompt-lookup speculative decoding: the drafter alone, then the same replies as plain decoding
on the real embedded model (no mocks of llama.cpp).

The model runs on 1 thread: there llama.cpp's batched verify and its single-token decode round
alike. At 2+ threads the single-token decode splits attention across threads, so plain decoding's
own output can change with -t at a near-tie (see benchmarks/README.md)."""

from __future__ import annotations

import pytest

from llmcli.engine.events import Stats, drain, json_document
from llmcli.engine.local.chat import ChatSession
from llmcli.engine.local.lookup import (
    LookupConfig,
    LookupDrafter,
    NgramIndex,
    best_length,
    expected_tokens,
    parse_draft,
)
from llmcli.engine.sampling import SamplingParams
from llmcli.errors import UsageError
from tests.support.cli import cli

PARAGRAPH = (
    "The lighthouse keeper climbed the narrow stairs every evening at dusk. He wound the great "
    "clock, trimmed the wick, and polished the lens until it shone like a second moon. Ships "
    "passing in the night never saw him, but they trusted the light, and the light was his life."
)
COPY = f"Repeat this text exactly:\n\n{PARAGRAPH}"
TYPOS = (
    "Fix the typos in this text:\n\nThe lighthuose keeper climbd the narow stairs every evening at dusk. "
    "He wound the great clock, trimed the wick, and polished the lens until it shone."
)


# -- the drafter alone ---------------------------------------------------------------------------
def test_index_finds_the_latest_earlier_occurrence_never_the_suffix_itself():
    index = NgramIndex(3)
    index.extend([1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3])
    assert index.continuation(3) == 7  # after the second "1 2 3" came 7; the trailing one is the suffix
    assert index.continuation(1) == 7
    index.push(5)
    assert index.continuation(1) is None  # 5 never appeared before


def test_drafter_prefers_the_longest_suffix_match():
    drafter = LookupDrafter(LookupConfig(prior_first=(99.0, 100.0), prior_then=(99.0, 100.0)))
    # "4" alone was last followed by 8; "2 3 4" was followed by 5 6.
    drafter.extend([1, 2, 3, 4, 5, 6, 0, 4, 8, 0, 2, 3, 4])
    draft = drafter.draft(limit=2)
    assert draft is not None and draft.order == 3 and draft.tokens == [5, 6]


SURE = LookupConfig(prior_first=(99.0, 100.0), prior_then=(99.0, 100.0))  # drafts whenever it matches


def test_drafter_respects_the_limit_and_has_nothing_without_a_match():
    drafter = LookupDrafter(
        LookupConfig(min_ngram=1, prior_first=SURE.prior_first, prior_then=SURE.prior_then)
    )
    drafter.extend(list(range(20)) + [3])
    assert drafter.draft(limit=0) is None
    assert drafter.draft(limit=3).tokens == [4, 5, 6]
    drafter.push(1000)
    assert drafter.draft(limit=8) is None
    default = LookupDrafter(SURE)
    default.extend(list(range(20)) + [1000, 3])  # "1000 3" was never seen; "3" alone was
    assert default.draft(limit=3) is None  # by default a lone token is no match


def test_drafting_follows_how_often_the_reply_copies_also_between_drafts():
    config = LookupConfig()
    drafter = LookupDrafter(config)
    drafter.extend(list(range(100)) * 2 + [10, 11])
    assert drafter.draft(limit=64) is None  # a fresh match is a coin toss: a plain step is cheaper
    for token in range(12, 40):  # the reply copies, one plain step at a time: the drafter learns it
        drafter.push(token)
    copying = drafter.draft(limit=64)
    assert copying is not None and copying.tokens[:3] == [40, 41, 42] and copying.order == 3
    assert drafter.draft(limit=2).tokens == [40, 41]  # never past the limit
    for token in range(40, 40 + len(copying.tokens)):  # ...all accepted
        drafter.push(token)
    drafter.result(copying, len(copying.tokens))
    longer = drafter.draft(limit=64)
    assert len(longer.tokens) >= len(copying.tokens) and len(longer.tokens) <= config.max_len
    for token in range(1000, 1030):  # the reply leaves the prompt: nothing matches, nothing drafted
        drafter.push(token)
        assert drafter.draft(limit=64) is None
    for token in [50, 51, 7, 8, 9, 60, 61, 3, 4, 70, 71, 20, 21, 90, 91, 40, 41, 0, 80, 81]:
        drafter.push(token)  # matches whose continuations never come true
    assert drafter.first.value < 0.3  # learnt without a single forward pass
    drafter.extend([10, 11])
    assert drafter.draft(limit=64) is None  # a fresh match no longer pays
    assert drafter.counts.passes == 1 and drafter.counts.accepted == drafter.counts.drafted == len(
        copying.tokens
    )


def drive(drafter: LookupDrafter, reply: list[int]) -> tuple[list[int], int]:
    """Hand `reply` to the drafter as LookupDecoder does: pushed while it is awake, skipped while it
    sleeps, up to its first draft (accepted whole). Returns the sleeps in order, and the reply's
    length when it drafted (0: never)."""
    sleeps: list[int] = []
    seen, wake = 0, 0
    for n in range(1, len(reply) + 1):  # n: the reply's length once its next token is handed out
        if n < wake:
            continue  # decoded plainly: the drafter sees nothing
        if seen < n - 1:
            drafter.skip(reply[seen : n - 1])
        drafter.push(reply[n - 1])
        seen = n
        draft = drafter.draft(limit=64)
        if draft is not None:
            assert draft.tokens == reply[n : n + len(draft.tokens)]
            drafter.result(draft, len(draft.tokens))
            return sleeps, n
        if drafter.sleep:
            sleeps.append(drafter.sleep)
            wake = n + drafter.sleep
    return sleeps, 0


def test_a_reply_that_never_copies_puts_drafting_to_sleep_for_growing_intervals():
    config = LookupConfig()
    drafter = LookupDrafter(config)
    drafter.extend(list(range(1000)))
    reply = list(range(5000, 7000))  # nothing of it appeared before, nothing of it repeats
    sleeps, drafted = drive(drafter, reply)
    low, high = config.backoff
    assert drafted == 0 and drafter.counts.passes == 0
    assert sleeps[:5] == [low, 2 * low, 4 * low, 8 * low, min(16 * low, high)]
    assert set(sleeps[5:]) == {high}
    # It learnt from `patience` tokens per wake; the rest were decoded plainly, no drafter work per token.
    patience = config.patience
    assert patience * len(sleeps) <= drafter.learnt < patience * (len(sleeps) + 1)
    slept_at_the_end = len(reply) - drafter.learnt - drafter.skipped  # never skipped: the reply ended
    assert 0 <= slept_at_the_end < high and drafter.skipped > 0.75 * len(reply)


def test_drafting_wakes_up_to_a_copy_and_its_back_off_starts_over():
    config = LookupConfig()
    drafter = LookupDrafter(config)
    drafter.extend(list(range(1000)))
    free = list(range(5000, 5600))
    copy = list(range(100, 900))  # then the reply copies the prompt
    sleeps, drafted = drive(drafter, free + copy)
    assert sleeps[-1] == config.backoff[1]  # it slept its longest when the copy began
    assert len(free) < drafted <= len(free) + config.backoff[1] + config.patience
    assert drafter._backoff == config.backoff[0]  # a pass paid: the next sleep is a short one again


def test_best_length_never_drafts_what_cannot_pay():
    config = LookupConfig()
    assert best_length(0.0, 0.0, config, 16) == (0, 1.0)
    assert best_length(1.0, 1.0, config, 16)[0] == config.max_len
    assert best_length(1.0, 1.0, config, 3)[0] == 3
    assert best_length(0.5, 0.75, config, 16)[0] == 0  # the priors: no draft before the reply copies
    assert expected_tokens(0.5, 1.0, 4) == 3.0 and expected_tokens(1.0, 0.0, 4) == 2.0


def test_a_bad_draft_mode_names_the_choices():
    assert parse_draft(" Lookup ") == "lookup"
    with pytest.raises(UsageError, match="choose one of: none, lookup"):
        parse_draft("ngram")


# -- on the model: identical output --------------------------------------------------------------
@pytest.fixture(scope="module")
def rt(embedded_path):
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig

    runtime = Runtime(embedded_path, RuntimeConfig(n_ctx=1024, n_threads=1))
    yield runtime
    runtime.close()


# Drafts at every match, as long as the match and the limit allow: the limit is what binds.
EAGER = LookupConfig(prior_first=SURE.prior_first, prior_then=SURE.prior_then, max_len=64)


class RecordingDrafter(LookupDrafter):
    """A drafter that drafts at every match (so rejections are certain) and records each call:
    (reply tokens handed out so far, the limit it was given, the tokens it drafted or 0)."""

    def __init__(self) -> None:
        super().__init__(EAGER)
        self.calls: list[tuple[int, int, int]] = []
        self.prompt = 0

    def extend(self, tokens: list[int]) -> None:
        super().extend(tokens)
        self.prompt = len(tokens)

    def draft(self, limit: int):
        draft = super().draft(limit)
        self.calls.append((len(self.index.tokens) - self.prompt, limit, len(draft.tokens) if draft else 0))
        return draft


def _drafters_made_by(monkeypatch, kind):
    """The drafters the test's lookup decoders make (of `kind` instead of LookupDrafter), in order."""
    from llmcli.engine.local import speculative

    made = []

    def make():
        made.append(kind())
        return made[-1]

    monkeypatch.setattr(speculative, "LookupDrafter", make)
    return made


@pytest.fixture
def eager(monkeypatch) -> list[RecordingDrafter]:
    """Every lookup decoder of the test drafts eagerly; the list holds their drafters, in order."""
    return _drafters_made_by(monkeypatch, RecordingDrafter)


def run(rt, prompt: str, draft: str, params: SamplingParams, **kwargs) -> tuple[str, Stats, ChatSession]:
    rt.clear()
    session = ChatSession(rt, params=params, draft=draft, **kwargs)
    reply = drain(session.ask(prompt))
    return reply.text, reply.stats, session


# Plain decoding's runs, by runtime, prompt and settings: the reference that two tests (a default
# and an eager drafter) compare against is decoded once. A drafter never reaches a plain run.
PLAIN: dict[str, tuple] = {}


def plain_run(rt, prompt: str, params: SamplingParams, **kwargs):
    """(run's triple, the KV cache it leaves) of plain decoding."""
    key = repr((rt.n_ctx, prompt, params, sorted(kwargs.items())))
    if key not in PLAIN:
        PLAIN[key] = (run(rt, prompt, "none", params, **kwargs), list(rt.kv_tokens))
    return PLAIN[key]


def both(rt, prompt: str, params: SamplingParams, **kwargs):
    plain, plain_kv = plain_run(rt, prompt, params, **kwargs)
    drafted = run(rt, prompt, "lookup", params, **kwargs)
    assert rt.kv_tokens == plain_kv  # the KV cache holds what plain decoding leaves, rejections cut
    return plain, drafted


@pytest.mark.parametrize(("prompt", "eagerly"), [(COPY, False), (TYPOS, True)])
def test_greedy_copy_task_is_identical_and_really_drafted(rt, request, prompt, eagerly):
    if eagerly:  # the short typo fix copies in stretches too short for the default drafter
        request.getfixturevalue("eager")
    (text, stats, session), (d_text, d_stats, d_session) = both(
        rt, prompt, SamplingParams(temperature=0.0, max_tokens=96)
    )
    assert d_text == text and len(text) > 40
    assert d_session.messages[-1].token_ids == session.messages[-1].token_ids
    assert d_stats.completion_tokens == stats.completion_tokens
    assert d_stats.decode_steps == stats.decode_steps  # tokens after the first, with or without drafts
    # How many drafts agree depends on the greedy reply, which moves at near-ties with the prefill's
    # batch boundaries (the prefix cache splits it where the stable start ends): some, not a count.
    assert d_stats.draft.accepted > 5 and stats.draft is None


@pytest.mark.parametrize("seed", [3, 11])
def test_a_fixed_seed_at_temperature_0_8_gives_the_same_reply(rt, seed):
    params = SamplingParams(temperature=0.8, seed=seed, max_tokens=48)  # several verify passes each
    (text, _, _), (d_text, d_stats, _) = both(rt, COPY, params)
    assert d_text == text
    assert d_stats.draft.passes > 0


def test_a_free_form_prompt_is_identical(rt):
    params = SamplingParams(temperature=0.0, max_tokens=48)
    (text, _, _), (d_text, _, _) = both(rt, "Write a short poem about the sea.", params)
    assert d_text == text


@pytest.fixture
def drafters(monkeypatch) -> list[LookupDrafter]:
    """The drafters (default configuration) of the test's lookup decoders, in order."""
    return _drafters_made_by(monkeypatch, LookupDrafter)


def test_a_reply_that_does_not_copy_is_soon_decoded_plainly(rt, drafters):
    params = SamplingParams(temperature=0.0, max_tokens=160)
    prompt = "Explain how a refrigerator works, in two paragraphs."
    (text, _, _), (d_text, d_stats, _) = both(rt, prompt, params)
    assert d_text == text
    drafter, n, draft = drafters[-1], d_stats.completion_tokens, d_stats.draft
    # After a few steps the drafter sleeps: most of the reply never reaches it (plain steps, as with
    # --draft none), and it drafts (almost) nothing. What the code bounds is how long it stays awake:
    # `patience` plain steps at most between a wake (or a pass that paid) and the next sleep, plus
    # the tokens of its passes; the count itself follows the greedy reply, which moves with the
    # build's rounding (48 tokens learnt on one build, 58 on another).
    stretches = drafter.sleeps + 1 + draft.passes  # awake spans: a sleep ends one, a paid pass restarts one
    assert n > 100 and drafter.sleeps >= 2 and drafter.skipped > 0
    assert drafter.learnt <= LookupConfig().patience * stretches + draft.accepted + draft.passes
    # Awake 16, asleep 16, awake 16, asleep 32, ...: past 100 tokens, under half of them were learnt.
    assert drafter.learnt < n / 2 and drafter.learnt + drafter.skipped <= n and draft.drafted <= 2


def test_stop_string_with_drafting(rt):
    params = SamplingParams(temperature=0.0, max_tokens=96)
    (text, stats, _), (d_text, d_stats, _) = both(rt, COPY, params, stops=["second moon"])
    assert d_text == text and text.endswith("like a ")
    assert d_stats.finish_reason == stats.finish_reason == "stop"
    assert d_stats.completion_tokens == stats.completion_tokens


def test_max_tokens_with_drafting(rt):
    params = SamplingParams(temperature=0.0, max_tokens=21)
    (text, stats, _), (d_text, d_stats, _) = both(rt, COPY, params)
    assert d_text == text
    assert d_stats.finish_reason == stats.finish_reason == "length"
    assert d_stats.completion_tokens == 21 and d_stats.ctx_used == stats.ctx_used


@pytest.mark.parametrize("max_tokens", [9, 10, 17])
def test_drafts_near_max_tokens_never_run_past_it(rt, eager, max_tokens):
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    (text, stats, _), (d_text, d_stats, _) = both(rt, COPY, params)
    assert d_text == text and d_stats.completion_tokens == stats.completion_tokens == max_tokens
    assert d_stats.finish_reason == "length" and d_stats.ctx_used == stats.ctx_used
    calls = eager[-1].calls
    # Each draft is offered what max tokens leaves after the token it follows, and never takes more;
    assert all(limit == max_tokens - n - 1 and k <= limit for n, limit, k in calls)
    # one of them ran right up to max tokens.
    assert any(0 < k == limit < EAGER.max_len for _, limit, k in calls)


@pytest.fixture(scope="module")
def small(embedded_path):
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig

    with Runtime(embedded_path, RuntimeConfig(n_ctx=256, n_threads=1)) as runtime:
        yield runtime


@pytest.mark.parametrize("eagerly", [False, True])
def test_drafting_near_the_end_of_the_context(small, request, eagerly):
    made = request.getfixturevalue("eager") if eagerly else None
    long_copy = "Repeat this text exactly:\n\n" + " ".join([PARAGRAPH] * 3)
    params = SamplingParams(temperature=0.0, max_tokens=512)
    (text, stats, _), (d_text, d_stats, _) = both(small, long_copy, params)
    n_ctx = small.n_ctx
    assert stats.prompt_tokens > n_ctx - 64  # the reply has little room left
    assert d_text == text
    assert d_stats.finish_reason == stats.finish_reason == "length"
    assert d_stats.ctx_used == stats.ctx_used == n_ctx - 1
    assert d_stats.draft.accepted > 0
    if made:  # the last drafts were cut to the room left in the context, never past it
        calls = made[-1].calls
        room = n_ctx - stats.prompt_tokens  # the reply's cap: what the context leaves after the prompt
        assert all(limit == room - n - 1 and k <= limit for n, limit, k in calls)
        assert any(0 < k == limit < EAGER.max_len for _, limit, k in calls)  # a draft right up to the end


def two_turns(rt, draft: str) -> list:
    """Both turns' replies, then the KV cache they leave; plain decoding's once for the module."""
    if draft == "none" and "two turns" in PLAIN:
        return PLAIN["two turns"]
    rt.clear()
    session = ChatSession(rt, params=SamplingParams(temperature=0.0, max_tokens=64), draft=draft)
    results = [drain(session.ask(turn)) for turn in (COPY, "Now repeat only its first sentence.")]
    results.append(list(rt.kv_tokens))
    if draft == "none":
        PLAIN["two turns"] = results
    return results


@pytest.mark.parametrize("eagerly", [False, True])
def test_the_next_turn_reuses_the_kv_cache_after_rejections(rt, request, eagerly):
    if eagerly:
        request.getfixturevalue("eager")  # drafts at every match: rejected positions are certain
    plain, drafted = two_turns(rt, "none"), two_turns(rt, "lookup")
    assert [r.text for r in drafted[:2]] == [r.text for r in plain[:2]]
    assert drafted[1].stats.cached_tokens == plain[1].stats.cached_tokens > drafted[0].stats.prompt_tokens
    assert drafted[2] == plain[2]
    if eagerly:  # positions were rejected and cut back, in both turns
        assert all(r.stats.draft.accepted < r.stats.draft.drafted for r in drafted[:2])


def test_stats_and_json_carry_the_draft_counts(rt):
    _, stats, _ = run(rt, COPY, "lookup", SamplingParams(temperature=0.0, max_tokens=64))
    draft = stats.draft
    assert draft.drafted >= draft.accepted > 0 and draft.passes > 0
    assert 0 < draft.acceptance_rate <= 1
    detail = stats.stage("decode").detail
    assert f"drafted {draft.drafted}, accepted {draft.accepted}" in detail
    doc = json_document("x", "m", stats)["draft"]
    assert doc == {
        "drafted_tokens": draft.drafted,
        "accepted_tokens": draft.accepted,
        "verify_passes": draft.passes,
        "acceptance_rate": round(draft.acceptance_rate, 4),
    }
    _, plain, _ = run(rt, "Hi", "none", SamplingParams(temperature=0.0, max_tokens=4))
    assert json_document("x", "m", plain)["draft"] is None
    assert "drafted" not in plain.stage("decode").detail


# -- the command line ----------------------------------------------------------------------------
def test_cli_rejects_a_bad_draft_mode():
    result = cli("chat", "--draft", "bogus", "hello")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "unknown draft mode 'bogus'; choose one of: none, lookup" in result.stderr


def test_cli_draft_is_local_only():
    result = cli("chat", "--endpoint", "http://127.0.0.1:9/v1", "--draft", "lookup", "hello")
    assert result.exit_code == 2 and "--draft" in result.stderr and result.stderr.count("\n") == 1


def test_cli_json_with_drafting_reports_the_drafts_and_keeps_the_reply():
    import json

    def chat(draft: str) -> dict:
        args = ["chat", "--draft", draft, "-t", "1", "--temp", "0", "--max-tokens", "32", "--json"]
        result = cli(*args, input=COPY + "\n")
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)

    doc, plain = chat("lookup"), chat("none")
    draft = doc["draft"]
    # A copy task: the reply repeats the prompt, so drafts are made and accepted.
    assert draft["drafted_tokens"] >= draft["accepted_tokens"] > 0 and draft["verify_passes"] > 0
    assert draft["acceptance_rate"] == round(draft["accepted_tokens"] / draft["drafted_tokens"], 4)
    assert doc["text"] == plain["text"] and plain["draft"] is None  # greedy: drafting changes no token
