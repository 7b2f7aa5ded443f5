"""Greedy picks made in llama.cpp's graph (graph_greedy.py), on the real embedded model: the ids the
host's argmax picks, at one sequence and at many, and the logits still read by the sequences that
need them beside."""

from __future__ import annotations

import pytest

from llmcli.engine.local.graph_greedy import GraphGreedy
from llmcli.engine.local.runtime import Runtime, RuntimeConfig
from llmcli.engine.local.scheduler import Scheduler
from llmcli.engine.local.scheduler_config import SchedulerConfig
from llmcli.engine.local.sequence import RUNNING, Request
from llmcli.engine.sampling import SamplingParams
from llmcli.engine.structured import constraint_from_schema, finish
from tests.engine.local.test_chat_client import PERSON, grammar
from tests.engine.local.test_scheduler import PROMPTS

GREEDY = SamplingParams(temperature=0.0, max_tokens=16)


@pytest.fixture(scope="module", params=[True, False], ids=["unified", "split"])
def rt(request, embedded_path):
    """8 sequences, 1 thread, a unified or a split KV pool (a ubatch per run of sequence ids)."""
    runtime = Runtime(
        embedded_path, RuntimeConfig(n_ctx=2048, n_threads=1, n_seq_max=8, kv_unified=request.param)
    )
    yield runtime
    runtime.close()


def ids(seq) -> list[int | None]:
    return [*seq.generated, seq.eog_token]


def run(rt: Runtime, in_graph: bool, requests: list[Request], fork_of_first: int = 0) -> tuple[list, int]:
    """The sequences of `requests` run to the end (the last `fork_of_first` as forks of the first),
    and how many of their tokens were read back as llama.cpp's graph picked them."""
    sched = Scheduler(rt, SchedulerConfig(greedy_in_graph=in_graph))
    assert (sched.graph is not None) == in_graph
    picks = GraphGreedy(rt.ll, rt.ctx_ptr, sched.n_slots)  # reads what the graph picked, sets nothing
    n_own = len(requests) - fork_of_first
    seqs = [sched.submit(r) for r in requests[:n_own]]
    seqs += [sched.submit(r, fork_of=seqs[0]) for r in requests[n_own:]]
    from_graph = 0
    while sched.busy:
        sched.step()
        for seq in seqs:
            if seq.state != RUNNING or seq.i_batch < 0:
                continue
            if sched.graph is not None and sched.graph.has(seq.slot):
                assert picks.picked(seq.i_batch) == seq.generated[-1]
                from_graph += 1
            else:  # no chain on its slot, none left by an earlier scheduler: the graph picked nothing
                assert picks.picked(seq.i_batch) is None
    sched.close()
    return seqs, from_graph


@pytest.mark.parametrize("n", [1, 8])
def test_greedy_picks_made_in_the_graph_are_the_hosts_argmax(rt, n):
    """The same ids with the picks in the graph and on the host, one sequence alone or eight in a
    batch; the host's run comes second, on the same context, where no chain is left."""
    requests = [Request(rt.tokenize(p, add_special=True), GREEDY) for p in PROMPTS[:n]]
    graph, from_graph = run(rt, True, requests)
    host, _ = run(rt, False, requests)
    assert from_graph >= n * 8  # most of the tokens were the graph's
    assert [ids(s) for s in graph] == [ids(s) for s in host]
    assert all(s.text for s in host)


def test_forks_take_their_first_token_from_their_leads_graph_pick(rt):
    prompt = rt.tokenize(PROMPTS[2], add_special=True)
    requests = [Request(prompt, GREEDY) for _ in range(3)]
    graph, from_graph = run(rt, True, requests, fork_of_first=2)
    host, _ = run(rt, False, requests, fork_of_first=2)
    assert from_graph > 0
    assert [ids(s) for s in graph] == [ids(s) for s in host]
    assert len({tuple(ids(s)) for s in graph}) == 1


def test_sequences_that_need_their_logits_read_them_beside_graph_picks(rt):
    """Log-probabilities, a grammar and a seeded draw beside greedy sequences picked in the graph:
    their slots get no chain, and each reads its own logits row, as on the host."""
    head = rt.tokenize("Ann is 31. As JSON:", add_special=True)
    greedy = [Request(rt.tokenize(p, add_special=True), GREEDY) for p in PROMPTS[:3]]

    def requests() -> list[Request]:  # a grammar belongs to one sequence: new ones for each run
        return [
            greedy[0],
            Request(rt.tokenize(PROMPTS[3], add_special=True), GREEDY, logprobs=3),
            greedy[1],
            Request(head, SamplingParams(temperature=0.0, max_tokens=48), grammar=grammar(rt)),
            Request(
                rt.tokenize(PROMPTS[4], add_special=True),
                SamplingParams(temperature=0.8, seed=7, max_tokens=16),
            ),
            greedy[2],
        ]

    graph, from_graph = run(rt, True, requests())
    host, _ = run(rt, False, requests())
    assert from_graph >= 3 * 8  # the three plain greedy ones
    assert [ids(s) for s in graph] == [ids(s) for s in host]
    with_logprobs, constrained = graph[1], graph[3]
    assert with_logprobs.logprobs == host[1].logprobs and len(with_logprobs.logprobs) == len(
        with_logprobs.generated
    )
    assert all(
        lp.chosen.token == t for lp, t in zip(with_logprobs.logprobs, with_logprobs.generated, strict=True)
    )
    assert constrained.finish_reason == "stop", constrained.text
    finish(constraint_from_schema(PERSON), constrained.text, "stop")  # parses and validates, or raises


def test_on_the_cpu_backend_the_picks_stay_on_the_host_by_default(rt):
    assert rt.placement.offloaded == 0  # this machine: a CPU build or --gpu-layers 0
    assert SchedulerConfig().greedy_in_graph is None
    sched = Scheduler(rt)
    assert sched.graph is None
    sched.close()
