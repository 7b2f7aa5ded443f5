"""The thread count chosen from the load: /proc samples -> cores others keep busy -> threads.

The busy pair was recorded on the 2-core development machine: a `while 1: pass` pinned to cpu1, this
process spinning on cpu0, and two compilers of other engineers' builds on both, 0.2 s apart.
"""

from __future__ import annotations

import pytest

from llmcli.engine.local.threads import (
    SPARE,
    CpuSample,
    Threads,
    others_cores,
    parse_own_ticks,
    parse_proc_stat,
    threads_for,
)

BUSY_BEFORE = """\
cpu  35510 8090 8539 9962 132 0 140 207 0 0
cpu0 16131 4618 4039 6371 10 0 8 111 0 0
cpu1 19379 3472 4499 3591 122 0 132 95 0 0
intr 325822 0 0 0
ctxt 1234
procs_running 5
"""
BUSY_AFTER = """\
cpu  35550 8092 8539 9962 132 0 140 207 0 0
cpu0 16151 4618 4040 6371 10 0 8 111 0 0
cpu1 19398 3473 4499 3591 122 0 132 95 0 0
"""
OWN_BEFORE = "12845 (python3) R 12841 12841 2830 0 -1 4194304 2985 6517 0 0 2 2 4 0 20 0 1 0 31317 17207296"
OWN_AFTER = "12845 (python3) R 12841 12841 2830 0 -1 4194304 2985 6517 0 0 10 2 4 0 20 0 1 0 31317 17207296"
BOTH = frozenset({0, 1})


def sample(stat: str, own: str, cpus: frozenset[int] = BOTH) -> CpuSample:
    return CpuSample(*parse_proc_stat(stat, cpus), parse_own_ticks(own))


def test_proc_stat_sums_the_allowed_cpus_and_skips_the_total_line():
    # cpu0: busy = user+nice+system+irq+softirq+steal, total adds idle and iowait
    assert parse_proc_stat(BUSY_BEFORE, frozenset({0})) == (1, 16131 + 4618 + 4039 + 8 + 111, 31288)
    n, busy, total = parse_proc_stat(BUSY_BEFORE, BOTH)
    assert n == 2 and total - busy == 6371 + 10 + 3591 + 122
    assert parse_proc_stat(BUSY_BEFORE, frozenset({7})) == (0, 0, 0)  # a CPU /proc/stat does not list


def test_proc_stat_of_an_old_kernel_without_iowait_and_steal_columns():
    assert parse_proc_stat("cpu  1 2 3 4\ncpu0 10 0 5 85\n", frozenset({0})) == (1, 15, 100)


def test_own_ticks_read_past_a_process_name_with_spaces_and_parentheses():
    assert parse_own_ticks("77 (a (b) c) S 1 1 1 0 -1 0 0 0 0 0 30 12 0 0 20") == 42
    assert parse_own_ticks(OWN_AFTER) - parse_own_ticks(OWN_BEFORE) == 8


def test_recorded_busy_machine_leaves_one_thread():
    # 41 busy ticks on 2 CPUs in 20.5 ticks of wall time, 8 of them this process's: others held 1.6 cores
    others = others_cores(sample(BUSY_BEFORE, OWN_BEFORE), sample(BUSY_AFTER, OWN_AFTER))
    assert others == pytest.approx(33 / 20.5)
    assert threads_for(others, 2) == 1


def quiet_pair(own_ticks: int, idle_ticks: int, others_ticks: int) -> tuple[CpuSample, CpuSample]:
    """A 0.2 s window on 2 CPUs (40 ticks): this process, others and idle share them."""
    assert own_ticks + idle_ticks + others_ticks == 40
    return CpuSample(2, 1000, 2000, 50), CpuSample(2, 1000 + own_ticks + others_ticks, 2040, 50 + own_ticks)


@pytest.mark.parametrize(
    ("own", "idle", "others", "threads"),
    [
        (40, 0, 0, 2),  # our 2 threads alone (libgomp's spinning keeps both cores busy)
        (20, 20, 0, 2),  # our 1 thread alone: the other core is idle, take it back
        (36, 0, 4, 2),  # a shell or a terminal: 0.2 of a core is within SPARE
        (20, 0, 20, 1),  # a spinning process on the other core (1 thread left running)
        (27, 0, 13, 1),  # the same while we ran 2 threads: the scheduler gave it 2/3 of a core
        (10, 0, 30, 1),  # more than the machine: never fewer than 1
    ],
)
def test_threads_follow_what_others_keep_busy(own, idle, others, threads):
    before, after = quiet_pair(own, idle, others)
    assert threads_for(others_cores(before, after), 2) == threads


def test_a_window_shorter_than_a_few_ticks_says_nothing():
    before = CpuSample(2, 1000, 2000, 50)
    assert others_cores(before, CpuSample(2, 1004, 2004, 52)) is None
    assert others_cores(before, CpuSample(2, 1006, 2006, 56)) == 0.0


@pytest.mark.parametrize(
    ("others", "n_cpus", "threads"),
    [(0.0, 1, 1), (SPARE, 2, 2), (SPARE + 0.01, 2, 1), (3.1, 16, 13), (0.9, 16, 15), (16.0, 16, 1)],
)
def test_threads_for_many_cores(others, n_cpus, threads):
    assert threads_for(others, n_cpus) == threads


def recorded(*samples: CpuSample | None):
    queue = list(samples)
    return lambda _cpus: queue.pop(0)


def test_the_count_follows_the_load_both_ways():
    start, busy = quiet_pair(20, 0, 20)  # a spinning process on the other core
    quiet = CpuSample(2, busy.busy + 40, busy.total + 40, busy.own + 40)  # then our 2 threads alone
    sets: list[int] = []
    threads = Threads(None, BOTH, start, read=recorded(busy, quiet))
    threads.attach(sets.append)
    assert threads.n == 2  # every core until a window says otherwise
    threads.check(1.0)
    assert threads.n == 1
    threads.check(2.0)
    assert (threads.n, sets, threads.changes) == (2, [1, 2], 2)
    assert threads.as_dict() == {"n": 2, "chosen": "load", "max": 2, "changes": 2}


def test_a_short_first_window_waits_for_the_next_check():
    start = CpuSample(2, 1000, 2000, 50)
    threads = Threads(
        None, BOTH, start, read=recorded(CpuSample(2, 1002, 2002, 50), CpuSample(2, 1040, 2040, 50))
    )
    threads.attach(lambda n: None)
    threads.check(0.0)
    assert threads.n == 2  # 1 tick per CPU: too short, the window's start is kept
    threads.check(1.0)
    assert threads.n == 1  # 40 ticks of others since the start


def test_a_given_count_is_never_changed():
    threads = Threads(2, BOTH, CpuSample(2, 0, 0, 0), read=recorded())
    threads.attach(lambda n: pytest.fail("a given --threads was changed"))
    for _ in range(3):
        threads.tick()  # never due: nothing is read
    assert threads.as_dict() == {"n": 2, "chosen": "given", "max": 2, "changes": 0}


def test_without_proc_the_count_stays_every_core():
    threads = Threads(None, frozenset(range(4)), None, read=recorded())
    threads.tick()
    assert threads.n == 4
    threads = Threads(None, BOTH, CpuSample(2, 0, 0, 0), read=recorded(None))
    threads.check(0.0)
    assert threads.n == 2
    threads.tick()  # nothing more is read once /proc failed


def test_a_cpu_going_offline_starts_a_new_window_instead_of_a_wrong_one():
    start = CpuSample(2, 1000, 2000, 50)
    one_cpu = CpuSample(1, 600, 1100, 60)  # the sums dropped with the CPU: no delta means anything
    threads = Threads(None, BOTH, start, read=recorded(one_cpu, CpuSample(1, 620, 1120, 80)))
    threads.attach(lambda n: None)
    threads.check(0.0)
    assert threads.n == 2
    threads.check(1.0)
    assert threads.n == 2  # 20 ticks, all this process's: nothing taken
