"""Admission on its own, over a real context's KV memory: which waiting sequence starts in which slot."""

from __future__ import annotations

from collections import deque

import pytest

from llmcli.engine.local.admission import Admission, cells_needed
from llmcli.engine.local.runtime import Runtime, RuntimeConfig
from llmcli.engine.local.scheduler_config import SchedulerConfig, SchedulerCounters
from llmcli.engine.local.sequence import RUNNING, WAITING, Request, Sequence
from llmcli.engine.sampling import SamplingParams

N_CTX = 256


@pytest.fixture(scope="module")
def runtime(embedded_path):
    rt = Runtime(embedded_path, RuntimeConfig(n_ctx=N_CTX, n_threads=1, n_seq_max=4, kv_unified=True))
    yield rt
    rt.close()


def admission(rt: Runtime, **config) -> Admission:
    rt.clear()
    memory = rt.ll.llama_get_memory(rt.ctx_ptr)
    return Admission(rt.ll, memory, SchedulerConfig(**config), SchedulerCounters(), n_slots=4)


def seq(sid: int, prompt: list[int], budget: int = 8) -> Sequence:
    return Sequence(sid, Request(prompt, SamplingParams(max_tokens=budget)))


def leave(adm: Admission, slot: int, kept: list[int] | None) -> None:
    """A sequence that held `slot` ends, keeping its cells as an idle prefix or not."""
    adm.free_slots.remove(slot)
    adm.release(slot, kept)


def test_the_estimate_is_prompt_and_budget_less_the_last_token_or_the_prompt_alone():
    s = seq(0, list(range(10)), budget=8)
    assert cells_needed(s, reserve=True) == 10 + 8 - 1
    assert cells_needed(s, reserve=False) == 10


def test_an_idle_prefix_is_taken_over_and_only_its_rest_is_left_to_prefill(runtime):
    adm = admission(runtime)
    kept = list(range(100, 140))
    leave(adm, 2, kept)  # a finished sequence left its 40 cells in slot 2
    waiting, running = deque([seq(0, kept[:30] + [7, 8, 9])]), []
    started = adm.admit(waiting, running, N_CTX)
    assert started == running and not waiting
    (s,) = started
    assert (s.slot, s.n_past, s.state) == (2, 30, RUNNING)
    assert 2 not in adm.idle and 2 not in adm.free_slots
    assert adm.counters.shared_tokens == s.stats.shared_tokens == 30


def test_a_sequence_that_does_not_fit_the_pool_yet_waits_and_gives_its_slot_back(runtime):
    adm = admission(runtime)
    waiting: deque[Sequence] = deque(
        [seq(0, list(range(100)), budget=100), seq(1, list(range(100)), budget=100)]
    )
    running: list[Sequence] = []
    assert len(adm.admit(waiting, running, N_CTX)) == 1  # 199 cells of 256: the second one's 199 wait
    assert [s.state for s in waiting] == [WAITING] and sorted(adm.free_slots) == [1, 2, 3]
    adm.release(running.pop().slot, None)
    assert [s.id for s in adm.admit(waiting, running, N_CTX)] == [1]


def test_idle_prefixes_are_evicted_least_recently_used_first_to_make_room(runtime):
    adm = admission(runtime, share_prefixes=False)
    leave(adm, 0, list(range(100)))
    leave(adm, 1, list(range(200, 300)))
    waiting, running = deque([seq(0, list(range(500, 600)), budget=1)]), []
    assert len(adm.admit(waiting, running, N_CTX)) == 1  # 100 + 100 + 100 > 256: one prefix goes
    assert list(adm.idle) == [1] and adm.counters.evictions == 1


def test_a_deferral_holds_admission_until_a_release(runtime):
    adm = admission(runtime)
    adm.hold = True
    waiting, running = deque([seq(0, [1, 2, 3])]), []
    assert adm.admit(waiting, running, N_CTX) == [] and len(waiting) == 1
    leave(adm, 3, None)
    assert len(adm.admit(waiting, running, N_CTX)) == 1
