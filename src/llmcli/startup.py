"""What keeps `llmcli --help` and `llmcli CMD --help` quick (benchmarks/startup.py measures them).

Typer's rich help comes without the imports llmcli's help never uses (~40 ms). typer.rich_utils
imports rich.markdown (markdown-it) and rich.traceback (pygments) at its top: the first for help
written in Markdown, the second for Typer's pretty tracebacks. llmcli writes its help in rich markup
and turns Typer's tracebacks off (cli.py), so neither is used. rich_utils is imported once here with a
stand-in for each of the two classes; a stand-in loads the real class if it is ever used, and the two
modules stay unloaded, for whoever imports them later to get the real ones.
"""

from __future__ import annotations

import gc
import importlib
import sys
import types
from typing import Any

# module -> the one name typer.rich_utils takes from it
DEFERRED = {"rich.markdown": "Markdown", "rich.traceback": "Traceback"}


class _Deferred(type):
    """A class that stands for `module.name`: calling it, or reading an attribute of it (say
    `Traceback.from_exception`), imports the real class and hands over to it."""

    def real(cls) -> Any:
        return getattr(importlib.import_module(cls.__module__), cls.__name__)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls.real()(*args, **kwargs)

    def __getattr__(cls, attr: str) -> Any:
        return getattr(cls.real(), attr)


def import_rich_help() -> None:
    """Import typer.rich_utils, which formats `--help`, with the stand-ins (once per process)."""
    if "typer.rich_utils" in sys.modules:
        return
    stood_in = [module for module in DEFERRED if module not in sys.modules]
    for module in stood_in:
        stand_in = types.ModuleType(module)
        setattr(stand_in, DEFERRED[module], _Deferred(DEFERRED[module], (), {"__module__": module}))
        sys.modules[module] = stand_in
    try:
        importlib.import_module("typer.rich_utils")
    finally:
        for module in stood_in:
            del sys.modules[module]


class Collector:
    """The cyclic garbage collector, paused while Typer builds and parses (~8 ms of `chat --help`).

    Building a command and rendering its help make many short-lived objects and no cycles worth a
    collection; a command's own work (cli.Command.invoke) runs with the collector on as before.
    """

    paused = False

    @classmethod
    def pause(cls) -> None:
        if gc.isenabled():
            gc.disable()
            cls.paused = True

    @classmethod
    def resume(cls) -> None:
        if cls.paused:
            cls.paused = False
            gc.enable()

    @classmethod
    def finish(cls, process_exits: bool) -> None:
        """After a run: the collector back on. When no command ran (help, the version, a usage error)
        and the process exits now, its objects are frozen first, so that the interpreter's exit does
        not collect them all once more (~10 ms); no command ran, so none of them holds a file to flush."""
        if cls.paused and process_exits:
            gc.freeze()
        cls.resume()
