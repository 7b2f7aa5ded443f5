"""`llmcli completion SHELL`: print the shell's completion script (commands, options, store model names)."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from llmcli.commands.options import environment


class Shell(str, Enum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


HELP = """Print the completion script for SHELL: commands, options and the model names in the store.

\b
  eval "$(llmcli completion bash)"                 in ~/.bashrc
  llmcli completion zsh > "${fpath[1]}/_llmcli"    then restart zsh
  llmcli completion fish > ~/.config/fish/completions/llmcli.fish
"""


def completion(
    context: typer.Context,
    shell: Annotated[Shell, typer.Argument(metavar="SHELL", help="bash, zsh or fish.", show_default=False)],
) -> None:
    from typer.completion import get_completion_script

    # The script calls `llmcli` back with $_LLMCLI_COMPLETE set; typer answers that before parsing.
    env = environment(context)
    env.stdout.write(
        get_completion_script(prog_name="llmcli", complete_var="_LLMCLI_COMPLETE", shell=shell.value) + "\n"
    )
    env.stdout.flush()


completion.__doc__ = HELP
