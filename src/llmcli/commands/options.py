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
