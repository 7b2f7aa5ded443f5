"""The engine thread's mailbox to the event loop: every event arrives, in order, on the loop's thread."""

from __future__ import annotations

import asyncio
import os
import threading

from llmcli.serve.mailbox import Mailbox

HANG_GUARD_S = 60


def test_events_posted_from_another_thread_arrive_in_order_on_the_loop():
    async def main() -> tuple[list[int], set[int]]:
        loop = asyncio.get_running_loop()
        box = Mailbox(loop)
        got: list[int] = []
        threads: set[int] = set()
        done = asyncio.Event()

        def arrive(n: int) -> None:
            got.append(n)
            threads.add(threading.get_ident())
            if n == 999:
                done.set()

        def engine() -> None:
            for n in range(1000):
                box.post(arrive, n)

        worker = threading.Thread(target=engine)
        worker.start()
        await asyncio.wait_for(done.wait(), HANG_GUARD_S)
        worker.join()
        box.close()
        return got, threads

    got, threads = asyncio.run(main())
    assert got == list(range(1000))
    assert threads == {threading.get_ident()}  # asyncio.run's loop runs on this thread


def test_events_posted_before_the_loop_drains_share_one_wake_up():
    async def main() -> tuple[list[str], bytes]:
        loop = asyncio.get_running_loop()
        box = Mailbox(loop)
        got: list[str] = []
        for text in ("a", "b", "c"):  # the loop is busy here: none is drained yet
            box.post(got.append, text)
        pending = os.read(box._read, 4096)  # what the drain would read: the wake-ups written
        os.write(box._write, pending)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        box.close()
        return got, pending

    got, pending = asyncio.run(main())
    assert got == ["a", "b", "c"]
    assert pending == b"\0"


def test_a_failing_receiver_is_reported_and_the_next_events_still_arrive():
    async def main() -> tuple[list[str], list[dict]]:
        loop = asyncio.get_running_loop()
        reported: list[dict] = []
        loop.set_exception_handler(lambda _loop, context: reported.append(context))
        box = Mailbox(loop)
        got: list[str] = []

        def fail(_event: object) -> None:
            raise ValueError("broken receiver")

        box.post(fail, None)
        box.post(got.append, "after")
        for _ in range(100):
            if got:
                break
            await asyncio.sleep(0.01)
        box.close()
        return got, reported

    got, reported = asyncio.run(main())
    assert got == ["after"]
    assert [str(r["exception"]) for r in reported] == ["broken receiver"]
