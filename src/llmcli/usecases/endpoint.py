"""What a server changes about a command: which server (--endpoint, $LLMCLI_ENDPOINT), and the
options that tune llama.cpp in this process, which a server has its own settings for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from llmcli.errors import UsageError

if TYPE_CHECKING:
    from llmcli.engine.openai.client import Endpoint


def endpoint_from_options(
    url: str | None, api_key: str | None, timeout: float | None, default_api_key: str | None
) -> Endpoint | None:
    """--endpoint (or $LLMCLI_ENDPOINT, passed in) and --api-key -> the server, or None for the local
    engine. The HTTP client loads only when there is a server (or a key to refuse without one)."""
    if not url and not api_key:
        return None
    from llmcli.engine.openai.client import Endpoint

    return Endpoint.from_options(url, api_key, timeout, default_api_key=default_api_key)


def refuse_local_only(options: Mapping[str, object], endpoint: object) -> None:
    """OPTIONS: flag -> its value (None: not given). Any given one is a UsageError naming them all."""
    given = [flag for flag, value in options.items() if value is not None]
    if given:
        raise UsageError(
            f"{' and '.join(given)} set the local engine; the server at {endpoint} "
            "has its own (leave them out with --endpoint)"
        )


def refuse_endpoint_only(options: Mapping[str, object]) -> None:
    """The other way round, without a server: OPTIONS: flag -> its value (None: not given)."""
    given = [flag for flag, value in options.items() if value is not None]
    if given:
        raise UsageError(
            f"{' and '.join(given)} {'are' if len(given) > 1 else 'is'} for a serving benchmark: "
            "give --endpoint URL (or set LLMCLI_ENDPOINT) too"
        )
