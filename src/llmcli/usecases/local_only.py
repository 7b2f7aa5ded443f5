"""Options that tune llama.cpp in this process: a server has its own settings, so with --endpoint
they are refused, in the same words by every command."""

from __future__ import annotations

from collections.abc import Mapping

from llmcli.errors import UsageError


def refuse_local_only(options: Mapping[str, object], endpoint: object) -> None:
    """OPTIONS: flag -> its value (None: not given). Any given one is a UsageError naming them all."""
    given = [flag for flag, value in options.items() if value is not None]
    if given:
        raise UsageError(
            f"{' and '.join(given)} set the local engine; the server at {endpoint} "
            "has its own (leave them out with --endpoint)"
        )
