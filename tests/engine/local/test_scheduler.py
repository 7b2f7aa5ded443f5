"""The scheduler on the real embedded model: sequences decoded together behave as decoded alone."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from llmcli.engine.local.runtime import Runtime, RuntimeConfig
from llmcli.engine.local.sampler import SamplerPool
from llmcli.engine.local.scheduler import Scheduler
from llmcli.engine.local.scheduler_config import NeverFits, SchedulerConfig
from llmcli.engine.local.sequence import DONE, RUNNING, WAITING, Request
from llmcli.engine.sampling import SamplingParams
from llmcli.errors import ExitStatus

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "The three primary colors are",
    "In 1969, the first astronauts",
    "A good recipe for tomato soup starts with",
    "Water boils at a temperature of",
    "List of the planets of the solar system:",
]
# A batch of 8 runs other kernels than a batch of 1 (activations quantized and summed in another
# order), which moves a logits row by up to ~1.2 over the 49k vocabulary on an AVX-512 CPU: rounding.
# A row read from the wrong sequence or the wrong KV cells is another distribution altogether.
ROUNDING = 2.0


def greedy(n: int = 24) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=n)


@pytest.fixture(scope="module", params=[True, False], ids=["unified", "split"])
def runtime8(request, embedded_path):
    """8 sequences, 1 thread (the same kernels whatever the batch), a unified or a split KV pool."""
    rt = Runtime(embedded_path, RuntimeConfig(n_ctx=2048, n_threads=1, n_seq_max=8, kv_unified=request.param))
    yield rt
    rt.close()


def tokens(rt: Runtime, text: str) -> list[int]:
    return rt.tokenize(text, add_special=True)


def alone(rt: Runtime, request: Request) -> str:
    sched = Scheduler(rt)
    seq = sched.submit(request)
    sched.run()
    sched.close()
    return seq.text


def logits_after(rt: Runtime, prefix: list[int]) -> list[float]:
    """The logits row of the last token of `prefix`, decoded alone."""
    sched = Scheduler(rt)
    seq = sched.submit(Request(prefix, greedy(1)))
    while seq.state != DONE:
        sched.step()
    row = ctypes.cast(rt.ll.llama_get_logits_ith(rt.ctx_ptr, seq.i_batch), ctypes.POINTER(ctypes.c_float))
    values = row[: rt.n_vocab]
    sched.close()
    return values


def sampled(seq) -> int:
    return len(seq.generated) + (seq.eog_token is not None)


Rows = dict[int, list[np.ndarray]]  # id(seq) -> the logits row of every token it sampled, in order


def step_keeping_rows(rt: Runtime, sched: Scheduler, seqs: list, rows: Rows) -> list:
    """One step of `sched`; the rows it sampled `seqs`' tokens from are appended to `rows`."""
    before = [sampled(s) for s in seqs]
    events = sched.step()
    for seq, n in zip(seqs, before, strict=True):
        if sampled(seq) > n:
            row = rt.ll.llama_get_logits_ith(rt.ctx_ptr, seq.i_batch)
            rows.setdefault(id(seq), []).append(np.ctypeslib.as_array(row, shape=(rt.n_vocab,)).copy())
    return events


def run_keeping_rows(rt: Runtime, sched: Scheduler, seqs: list, rows: Rows | None = None) -> Rows:
    """Step `sched` until idle, keeping `seqs`' rows."""
    rows = {id(s): [] for s in seqs} if rows is None else rows
    while sched.busy:
        step_keeping_rows(rt, sched, seqs, rows)
    return rows


def assert_near_tie(
    rt: Runtime, prefix: list[int], batch_row: np.ndarray, alone_token: int, batch_token: int
) -> None:
    """Where a batched reply parts from the reply alone: the batch's row is the row alone up to
    rounding, and the two tokens were closer in the row alone than that rounding moved it."""
    alone_row = np.asarray(logits_after(rt, prefix))
    rounding = float(np.abs(alone_row - batch_row).max())
    gap = float(alone_row[alone_token] - alone_row[batch_token])
    assert rounding < ROUNDING, f"the batch's logits row is {rounding:.3f} away from the row alone"
    assert 0 <= gap <= rounding, (
        f"token {len(prefix)}: {gap:.4f} logits apart alone, more than the {rounding:.4f} of rounding"
    )


def assert_same_or_near_tie(rt: Runtime, seq, text: str, rows: list[np.ndarray]) -> None:
    """seq's greedy text is the one decoded alone, or the first token where they part was a near-tie.
    `rows`: seq's logits rows in its batch (run_keeping_rows)."""
    if seq.text == text:
        return
    ref = Scheduler(rt)
    single_seq = ref.submit(Request(seq.prompt, greedy(seq.max_tokens)))
    ref.run()
    ref.close()
    assert single_seq.text == text  # the run alone is itself reproducible
    batched, single = seq.generated + [seq.eog_token], single_seq.generated + [single_seq.eog_token]
    k = next(i for i, (a, b) in enumerate(zip(batched, single, strict=False)) if a != b)
    assert_near_tie(rt, seq.prompt + single[:k], rows[k], single[k], batched[k])


def test_eight_prompts_in_one_batch_give_the_texts_they_give_alone(runtime8):
    rt = runtime8
    solo = [alone(rt, Request(tokens(rt, p), greedy())) for p in PROMPTS]
    sched = Scheduler(rt, SchedulerConfig(share_prefixes=False))
    seqs = [sched.submit(Request(tokens(rt, p), greedy())) for p in PROMPTS]
    sched.step()
    assert all(s.state == RUNNING for s in seqs)  # all eight were admitted and prefilled together
    assert sched.counters.decode_calls == 1
    rows = run_keeping_rows(rt, sched, seqs)
    assert max(sched.counters.step_ms) > 0
    for seq, text in zip(seqs, solo, strict=True):
        assert seq.finish_reason in ("stop", "length") and seq.generated
        assert_same_or_near_tie(rt, seq, text, rows[id(seq)])


def test_a_cancelled_sequence_frees_its_cells_and_the_next_one_reuses_them(embedded_path):
    rt = Runtime(embedded_path, RuntimeConfig(n_ctx=256, n_threads=1, n_seq_max=2, kv_unified=True))
    try:
        sched = Scheduler(rt)
        first = sched.submit(Request(tokens(rt, PROMPTS[0]), greedy(200)))
        second = sched.submit(Request(tokens(rt, PROMPTS[1]), greedy(60)))
        for _ in range(3):
            sched.step()
        # 200 + 60 reply cells and the prompts do not fit 256: the second waits for the first's cells.
        assert first.state == RUNNING and second.state == WAITING
        slot = first.slot
        mem = rt.ll.llama_get_memory(rt.ctx_ptr)
        assert rt.ll.llama_memory_seq_pos_max(mem, slot) >= len(first.prompt)
        sched.cancel(first)
        rows: Rows = {id(second): []}
        events = step_keeping_rows(rt, sched, [second], rows)
        assert [e.finish_reason for e in events if e.seq is first] == ["cancelled"]
        assert rt.ll.llama_memory_seq_pos_max(mem, slot) == -1  # its cells are empty at once
        assert second.state == RUNNING  # admitted in the same step
        run_keeping_rows(rt, sched, [second], rows)
        assert second.finish_reason in ("stop", "length") and second.generated
        solo = alone(rt, Request(tokens(rt, PROMPTS[1]), greedy(60)))
        assert_same_or_near_tie(rt, second, solo, rows[id(second)])
        assert not first.text or len(first.generated) <= 5
    finally:
        rt.close()


def test_admission_refuses_a_sequence_that_can_never_fit_with_one_line(runtime8):
    rt = runtime8
    sched = Scheduler(rt)
    with pytest.raises(NeverFits) as err:
        sched.submit(Request(tokens(rt, PROMPTS[0]), greedy(sched.n_ctx_seq)))
    message = str(err.value)
    assert "\n" not in message and "--ctx" in message and str(sched.n_ctx_seq) in message
    assert err.value.exit_status == ExitStatus.USAGE
    assert not sched.waiting and not sched.busy  # nothing was queued


def test_decode_finding_no_kv_slot_is_survived(embedded_path):
    # Admission without reservation lets 8 sequences in whose replies outgrow a 256-cell pool.
    rt = Runtime(embedded_path, RuntimeConfig(n_ctx=256, n_threads=1, n_seq_max=8, kv_unified=True))
    try:
        sched = Scheduler(rt, SchedulerConfig(reserve=False, keep_prefixes=False))
        params = SamplingParams(temperature=0.0, max_tokens=40)
        seqs = [sched.submit(Request(tokens(rt, p), params, ignore_eog=True)) for p in PROMPTS]
        sched.run()
        assert sched.counters.no_slot >= 1 and sched.counters.deferrals >= 1
        assert all(s.finish_reason == "length" and len(s.generated) == 40 for s in seqs)
        assert sum(s.stats.deferrals for s in seqs) == sched.counters.deferrals
    finally:
        rt.close()


def test_seeded_sampling_is_reproducible_per_sequence_whatever_shares_the_batch(runtime8):
    rt = runtime8
    seeded = SamplingParams(temperature=0.8, seed=42, max_tokens=32)
    target = Request(tokens(rt, PROMPTS[1]), seeded)
    solo = alone(rt, target)
    sched = Scheduler(rt, SchedulerConfig(share_prefixes=False))
    others = [
        sched.submit(Request(tokens(rt, p), SamplingParams(temperature=0.8, seed=i, max_tokens=40)))
        for i, p in enumerate(PROMPTS[2:6])
    ]
    seq = sched.submit(Request(tokens(rt, PROMPTS[1]), seeded))
    sched.run()
    assert solo and seq.text == solo
    assert len({s.text for s in others}) > 1  # the neighbours really drew their own texts


def test_a_shared_prefix_is_copied_not_prefilled(runtime8):
    rt = runtime8
    head = tokens(rt, "Read this note carefully. " * 12)
    questions = [" Question: what is it about?", " Question: who wrote it?"]
    sched = Scheduler(rt)
    seqs = [sched.submit(Request(head + rt.tokenize(q), greedy(12))) for q in questions]
    rows = run_keeping_rows(rt, sched, seqs)
    later = sched.submit(Request(head + rt.tokenize(" Question: is it long?"), greedy(12)))
    rows |= run_keeping_rows(rt, sched, [later])
    shared = [s.stats.shared_tokens for s in seqs + [later]]
    assert shared[0] == 0 and shared[2] >= len(head) - 1  # the third took an idle slot's prefix
    if sched.unified:  # live sequences share cells only in one KV pool
        assert shared[1] >= len(head) - 1
    for seq in seqs + [later]:
        assert seq.stats.prefill_tokens + seq.stats.shared_tokens == len(seq.prompt)
        assert_same_or_near_tie(rt, seq, alone(rt, Request(seq.prompt, greedy(12))), rows[id(seq)])


def test_a_long_prompt_is_prefilled_in_chunks_while_the_others_keep_generating(runtime8):
    rt = runtime8
    sched = Scheduler(rt, SchedulerConfig(prefill_chunk=64, share_prefixes=False))
    talker = sched.submit(Request(tokens(rt, PROMPTS[0]), greedy(40), ignore_eog=True))
    sched.step()
    long = sched.submit(Request(tokens(rt, "A very long document. " * 40), greedy(4)))
    steps = 0
    while long.stats.t_first is None:
        before = len(talker.generated)
        sched.step()
        steps += 1
        assert len(talker.generated) == before + 1  # one token every step, the prefill notwithstanding
        assert sched.batch.n <= 64 + 1
    assert steps >= len(long.prompt) // 64
    sched.run()
    assert long.stats.prefill_tokens == len(long.prompt)


def test_a_bad_request_is_refused_before_it_is_queued(runtime8):
    sched = Scheduler(runtime8)
    with pytest.raises(Exception, match="empty prompt"):
        sched.submit(Request([], greedy()))


def test_a_finished_sequences_sampler_is_reset_and_reused_by_the_next(runtime8):
    rt = runtime8
    seeded = SamplingParams(temperature=0.8, seed=7, max_tokens=16)
    sched = Scheduler(rt, SchedulerConfig(keep_prefixes=False))
    first = sched.submit(Request(tokens(rt, PROMPTS[3]), seeded))
    sched.run()
    chain = sched.pool.free[SamplerPool.key(seeded)][0]
    second = sched.submit(Request(tokens(rt, PROMPTS[3]), seeded))
    sched.step()
    assert second.sampler is chain  # the same chain, its RNG seeded again
    sched.run()
    assert first.text and second.text == first.text


def test_cancelling_a_waiting_sequence_ends_it_without_admitting_it(runtime8):
    rt = runtime8
    sched = Scheduler(rt)
    seqs = [sched.submit(Request(tokens(rt, p), greedy(4))) for p in PROMPTS] + [
        sched.submit(Request(tokens(rt, PROMPTS[0]), greedy(4)))
    ]
    late = seqs[-1]  # the ninth: no slot for it until one of the eight is done
    sched.step()
    assert late.state == WAITING
    sched.cancel(late)
    events = sched.step()
    assert [e.finish_reason for e in events if e.seq is late] == ["cancelled"]
    sched.run()
    assert late.stats.t_admit is None and not late.generated
    assert all(s.finish_reason in ("stop", "length") for s in seqs[:-1])


def test_a_reused_slot_takes_its_place_in_slot_order_in_the_batch(runtime8):
    # With a KV stream per sequence llama.cpp cuts a batch into ubatches of consecutive sequence ids:
    # generating sequences out of slot order (1..7, then a newcomer in slot 0) cost two decodes a step.
    rt = runtime8
    sched = Scheduler(rt, SchedulerConfig(keep_prefixes=False, share_prefixes=False))
    first = sched.submit(Request(tokens(rt, PROMPTS[0]), greedy(2), ignore_eog=True))
    others = [sched.submit(Request(tokens(rt, p), greedy(16), ignore_eog=True)) for p in PROMPTS[1:]]
    late = sched.submit(Request(tokens(rt, PROMPTS[0]), greedy(8), ignore_eog=True))
    orders = []
    while late.state != DONE:
        # A step's batch is generating tokens only when every sequence in it had its prompt before
        all_generating = late.state == RUNNING and not late.prefilling
        sched.step()
        if all_generating and all(s.state == RUNNING for s in others):
            orders.append(sched.batch.seq_ids())
    assert first.state == DONE and late.slot == -1
    assert orders, "the late sequence never generated beside the seven others"
    # Slot 0, which the first sequence gave back, first: the newcomer holds it
    assert all(ids == list(range(8)) for ids in orders), orders
    sched.run()
    sched.close()


def test_n_choices_of_one_prompt_prefill_it_once_and_draw_their_own_replies(runtime8):
    rt = runtime8
    prompt = tokens(rt, PROMPTS[5])
    sched = Scheduler(rt)
    params = [SamplingParams(temperature=1.0, seed=3 + i, max_tokens=12) for i in range(3)]
    lead = sched.submit(Request(prompt, params[0], logprobs=2))
    forks = [sched.submit(Request(prompt, p, logprobs=2), fork_of=lead) for p in params[1:]]
    sched.run()
    seqs = [lead, *forks]
    if sched.unified:  # one prefill, its cells given to the forks, their first tokens drawn from its row
        assert [s.stats.prefill_tokens for s in seqs] == [len(prompt), 0, 0]
        assert [s.stats.shared_tokens for s in seqs] == [0, len(prompt), len(prompt)]
        assert {s.logprobs[0].top for s in seqs if s.logprobs} and len({s.logprobs[0].top for s in seqs}) == 1
    else:  # a KV stream per sequence: nothing to share, each prefills its own
        assert [s.stats.prefill_tokens for s in seqs] == [len(prompt)] * 3
    assert len({s.text for s in seqs}) > 1  # each its own seed
    for seq in seqs:
        assert len(seq.logprobs) == len(seq.generated)
        assert all(lp.chosen.token == t for lp, t in zip(seq.logprobs, seq.generated, strict=True))


def test_choices_past_the_free_slots_wait_and_share_the_prompt_as_a_later_request(embedded_path):
    rt = Runtime(embedded_path, RuntimeConfig(n_ctx=512, n_threads=1, n_seq_max=2, kv_unified=True))
    try:
        prompt = tokens(rt, PROMPTS[2])
        sched = Scheduler(rt)
        lead = sched.submit(Request(prompt, greedy(6)))
        forks = [sched.submit(Request(prompt, greedy(6)), fork_of=lead) for _ in range(3)]
        sched.run()
        assert {s.text for s in forks} == {lead.text}
        assert forks[0].stats.prefill_tokens == 0  # a fork: admitted with its lead
        # the rest waited for a slot, then shared all but the last prompt token, which they computed
        assert [s.stats.prefill_tokens for s in forks[1:]] == [1, 1]
        sched.close()
    finally:
        rt.close()
