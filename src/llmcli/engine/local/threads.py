"""How many CPU threads llama.cpp computes with when the user named none: the cores that other
processes leave free, chosen again every CHECK_S while the context decodes.

Why not every core: llama.cpp's CPU backend splits each op of a token over its threads and waits
for all of them at a barrier after it (OpenMP's, in the wheel's build). A thread whose core another
process holds stalls the others at every barrier, and they spin meanwhile. With one core of two kept
busy, tg at 2 threads fell from ~100 to 6-20 tok/s while 1 thread kept most of its quiet speed
(benchmarks/busy_machine.py). OMP_WAIT_POLICY=PASSIVE (sleeping at the barrier) softens the fall but
halves decoding on a quiet machine: a futex wake-up at each of a token's hundreds of barriers. So the
count, not the wait policy, follows the load.

How: /proc/stat counts, per CPU, the ticks spent busy; this process's own ticks (/proc/self/stat,
every thread of it) are subtracted, which leaves the cores that others kept busy over the window.
A core counts as taken once others use more than SPARE of it. A user's --threads is never changed.
Where /proc is not there (macOS), the count stays every usable core, as before.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

CHECK_S = 0.2  # a window of 20 ticks per CPU (USER_HZ is 100): the estimate moves in 0.05-core steps
MIN_TICKS = 3  # per CPU: a shorter first window (a fast load) says too little; the next tick decides
SPARE = 0.25  # of a core: others' use up to this leaves the core ours (a shell, a terminal's redraw)


@dataclass(frozen=True)
class CpuSample:
    """CPU time so far, in clock ticks: the allowed CPUs' busy and total ticks, and this process's."""

    n_cpus: int  # the allowed CPUs that /proc/stat listed
    busy: int  # user + nice + system + irq + softirq + steal: time nobody else could have
    total: int  # busy + idle + iowait
    own: int  # utime + stime of every thread of this process


def parse_proc_stat(text: str, cpus: frozenset[int]) -> tuple[int, int, int]:
    """/proc/stat -> (CPUs counted, busy ticks, total ticks) of the `cpuN` lines whose N is in cpus."""
    n = busy = total = 0
    for line in text.splitlines():
        if not line.startswith("cpu") or line[3:4] == " ":
            continue
        name, *fields = line.split()
        if not name[3:].isdigit() or int(name[3:]) not in cpus or len(fields) < 4:
            continue
        user, nice, system, idle, *rest = (int(f) for f in fields[:8])
        iowait, irq, softirq, steal = (rest + [0, 0, 0, 0])[:4]
        n += 1
        busy += user + nice + system + irq + softirq + steal
        total += user + nice + system + irq + softirq + steal + idle + iowait
    return n, busy, total


def parse_own_ticks(text: str) -> int:
    """/proc/<pid>/stat -> utime + stime (fields 14 and 15; the name in field 2 may hold spaces)."""
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def others_cores(before: CpuSample, after: CpuSample) -> float | None:
    """Cores that other processes kept busy between two samples (0.0 .. n_cpus); None when the window
    is too short to say."""
    span = after.total - before.total
    if after.n_cpus < 1 or span < MIN_TICKS * after.n_cpus:
        return None
    others = (after.busy - before.busy) - (after.own - before.own)
    return min(float(after.n_cpus), max(0.0, others * after.n_cpus / span))


def threads_for(others: float, n_cpus: int) -> int:
    """The cores others leave free: a core is taken once they use more than SPARE of it; at least 1."""
    taken = max(0, math.ceil(others - SPARE))
    return max(1, min(n_cpus, n_cpus - taken))


def usable_cpus() -> frozenset[int]:
    """The CPUs this process may run on (its affinity; every CPU where the OS does not say)."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return frozenset(range(os.cpu_count() or 1))


def read_sample(cpus: frozenset[int]) -> CpuSample | None:
    """This machine's sample now; None where /proc does not say (macOS, a sandbox without it)."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            n, busy, total = parse_proc_stat(fh.read(), cpus)
        with open("/proc/self/stat", encoding="utf-8", errors="replace") as fh:
            own = parse_own_ticks(fh.read())
    except (OSError, ValueError, IndexError):
        return None
    return CpuSample(n, busy, total, own) if n else None


class Threads:
    """The thread count of one llama context: the user's, fixed, or every usable core's share that
    other processes leave free. `tick()` runs before each llama_decode; it costs a clock read
    except once per CHECK_S, when it reads /proc and may call llama_set_n_threads."""

    def __init__(
        self,
        given: int | None,
        cpus: frozenset[int],
        start: CpuSample | None = None,
        read: Callable[[frozenset[int]], CpuSample | None] = read_sample,
    ) -> None:
        self.given = given
        self.max = len(cpus) or 1
        self.n = given or self.max
        self.changes = 0  # times the count moved
        self._cpus, self._read = cpus, read
        self._set: Callable[[int], None] | None = None  # llama_set_n_threads on the context (attach)
        self._last = start if given is None else None
        self._due = time.perf_counter() if self._last is not None else math.inf

    def attach(self, set_threads: Callable[[int], None]) -> None:
        """The context exists: from now on a new count goes to it through set_threads."""
        self._set = set_threads

    def tick(self) -> None:
        now = time.perf_counter()
        if now < self._due:
            return
        self.check(now)

    def check(self, now: float) -> None:
        """Read the load over the window since the last check and set the count it leaves room for."""
        sample = self._read(self._cpus)
        if sample is None or self._last is None:
            self._due = math.inf  # nothing to read: stay at every usable core
            return
        if sample.n_cpus != self._last.n_cpus:  # a CPU went offline or came back: start a new window
            self._last, self._due = sample, now + CHECK_S
            return
        others = others_cores(self._last, sample)
        if others is None:  # too short a window yet: keep its start, look again soon
            self._due = now + CHECK_S / 4
            return
        self._last, self._due = sample, now + CHECK_S
        n = threads_for(others, self.max)
        if n != self.n and self._set is not None:
            self._set(n)
            self.n, self.changes = n, self.changes + 1

    def as_dict(self) -> dict:
        """What a request's stats report: the count now, who chose it, the most it may be, and how often
        it moved."""
        return {
            "n": self.n,
            "chosen": "given" if self.given else "load",
            "max": self.max,
            "changes": self.changes,
        }
