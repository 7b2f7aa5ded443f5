"""Options shared by several commands, declared once so their help reads the same everywhere."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

ModelArg = Annotated[Optional[str], typer.Argument(
    help="A .gguf path, a name from `llmcli list`, or an unambiguous prefix of one. "
         "Default: $LLMCLI_MODEL, else the embedded SmolLM2-135M-Instruct.", show_default=False)]
RequiredModelArg = Annotated[str, typer.Argument(
    help="A .gguf path, a name from `llmcli list`, or an unambiguous prefix of one.", show_default=False)]
CtxOpt = Annotated[Optional[int], typer.Option(
    "-c", "--ctx", min=16, help="Context size in tokens. Default: min(trained context, 4096).", show_default=False)]
ThreadsOpt = Annotated[Optional[int], typer.Option(
    "-t", "--threads", min=1, help="CPU threads. Default: every usable core.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
# A server instead of the local engine. The environment variables are read by the library, not
# bound here, so `--help` can never show a key's value.
EndpointOpt = Annotated[Optional[str], typer.Option(
    "--endpoint", metavar="URL", show_default=False,
    help="An OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp server), e.g. http://localhost:8000/v1. "
         "Default: $LLMCLI_ENDPOINT.")]
ApiKeyOpt = Annotated[Optional[str], typer.Option(
    "--api-key", metavar="KEY", show_default=False,
    help="The server's API key, sent as a bearer token; never printed or saved. "
         "Prefer $LLMCLI_API_KEY (a command line is visible to other users).")]
TimeoutOpt = Annotated[Optional[float], typer.Option(
    "--timeout", metavar="SECONDS", show_default=False,
    help="With --endpoint: give up after this long without a stream event (pings do not count); "
         "a whole reply gets this much for every 100 tokens of max_tokens, plus once. [120]")]
