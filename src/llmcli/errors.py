"""Exit statuses and the library's exceptions.

The library raises these; only `llmcli.cli` turns them into a line on stderr and an exit code.
Every message names the fix, because a user reads exactly one line of it.
"""

from __future__ import annotations

from enum import IntEnum


class ExitStatus(IntEnum):
    OK = 0
    ERROR = 1  # a runtime failure: the input was fine, something broke
    USAGE = 2  # bad input: an option, a file, a model name
    INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT


class LlmcliError(Exception):
    """Base of every error a user may see; the message is shown as is, on one line."""

    exit_status: ExitStatus = ExitStatus.ERROR


class UsageError(LlmcliError):
    """The user gave something we cannot use; they can fix it."""

    exit_status = ExitStatus.USAGE


class ModelNotFound(UsageError):
    pass


class BadModelFile(UsageError):
    """Not a GGUF, truncated, corrupt, or with metadata we refuse to trust."""


class TemplateError(UsageError):
    """The model's chat template cannot be rendered (or tried something the sandbox forbids)."""


class ContextOverflow(UsageError):
    """A single prompt that does not fit the context window, even with all history dropped."""


class RuntimeFailure(LlmcliError):
    """llama.cpp or the system failed while the input was valid."""


class Interrupted(LlmcliError):
    """Ctrl-C, with a word on what was left behind (the message)."""

    exit_status = ExitStatus.INTERRUPTED
