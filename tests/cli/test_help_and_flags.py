"""--help as a person reads it, and one meaning per flag across commands (renames listed in the README)."""

from __future__ import annotations

import re

import pytest

from llmcli.cli import COMMANDS
from llmcli.errors import ExitStatus
from tests.support.cli import cli_process


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_shows_no_value_for_flags_and_names_arguments_in_capitals(command):
    r = cli_process(*([command] if command else []), "--help", vars={"COLUMNS": "160"})
    assert r.exit_code == 0, r.stderr
    assert "<bool>" not in r.stdout  # --dry-run, --json, --help... take no value
    usage = next(line for line in r.stdout.splitlines() if "Usage:" in line)
    arguments = re.findall(r"[{\[]([^\]}]+)[}\]]", usage.split("[OPTIONS]")[-1])
    assert all(a.rstrip(".").upper() == a.rstrip(".") for a in arguments), usage


def short_flags(command: str) -> dict[str, str]:
    """-x -> its long name, from the command's --help (hidden options are not shown, so not counted)."""
    text = cli_process(command, "--help", vars={"COLUMNS": "200"}).stdout
    return {short: long for long, short in re.findall(r"│ (--[\w-]+)[\w,-]*\s+(-\w)\s", text)}


# One meaning under two long names, each the name llama.cpp's own tool uses (llama-cli, llama-bench).
SAME_MEANING = {"-n": {"--max-tokens", "--n-gen"}}  # tokens to generate
# Short flags that issue #11 gives a second meaning in one command, as `llm` spells them there:
# `chat -c/--continue`, `logs -n/--count` and `logs -q/--query` (the context size in chat is --ctx).
LOG_SHORTS = {("chat", "-c"): "--continue", ("logs", "-n"): "--count", ("logs", "-q"): "--query"}


def test_a_short_flag_means_one_thing_in_every_command():
    meaning: dict[str, set[str]] = {}
    for command in COMMANDS:
        for short, long in short_flags(command).items():
            if LOG_SHORTS.get((command, short)) == long:
                continue
            meaning.setdefault(short, set()).add(long)
    assert meaning["-t"] == {"--threads"} and meaning["-o"] == {"--output"} and meaning["-q"] == {"--outtype"}
    assert {short: longs for short, longs in meaning.items() if len(longs) > 1} == SAME_MEANING


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bench", "-o", "json"], "-o json is now -f json: -o/--output was renamed -f/--format before 1.0"),
        (["bench", "--output", "csv"], "is now -f csv"),
        (
            ["convert", "some/folder", "-t", "q8_0"],
            "-t q8_0 is now -q q8_0: -t was renamed -q/--outtype before 1.0",
        ),
    ],
)
def test_a_renamed_flag_is_a_usage_error_naming_the_new_one(args, message):
    r = cli_process(*args)
    assert r.exit_code == ExitStatus.USAGE and r.stdout == ""
    assert (
        r.stderr == f"llmcli: error: {r.stderr.removeprefix('llmcli: error: ')}" and r.stderr.count("\n") == 1
    )
    assert message in r.stderr


def test_pull_help_states_the_pull_default_outtype():
    from llmcli.convert.outtypes import PULL_DEFAULT

    r = cli_process("pull", "--help")
    assert PULL_DEFAULT in r.stdout
