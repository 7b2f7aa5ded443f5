"""--help as a person reads it, and one meaning per short flag across the whole app."""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest
import typer

from llmcli.cli import COMMANDS, app
from llmcli.errors import ExitStatus
from tests.support.cli import cli, cli_process


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_shows_no_value_for_flags_and_names_arguments_in_capitals(command):
    r = cli_process(*([command] if command else []), "--help", vars={"COLUMNS": "160"})
    assert r.exit_code == 0, r.stderr
    assert "<bool>" not in r.stdout  # --dry-run, --json, --help... take no value
    usage = next(line for line in r.stdout.splitlines() if "Usage:" in line)
    arguments = re.findall(r"[{\[]([^\]}]+)[}\]]", usage.split("[OPTIONS]")[-1])
    assert all(a.rstrip(".").upper() == a.rstrip(".") for a in arguments), usage


def options(command: str) -> list[Any]:
    """Every option of a command, as click builds it from the Typer app (-h/--help too)."""
    group = typer.main.get_command(app)
    parent = group.context_class(group, **group.context_settings)
    sub = group.get_command(parent, command)
    ctx = sub.context_class(sub, parent=parent)
    return [p for p in sub.get_params(ctx) if p.param_type_name == "option"]


def is_refusal(option: Any) -> bool:
    """A hidden renamed flag: it does nothing but name its new spelling (options.renamed_option)."""
    return option.hidden and getattr(option.callback, "renamed", False)


def meanings() -> dict[str, set[tuple[str, ...]]]:
    """Short flag -> the long names it stands for, over every command; refusals are no meaning."""
    found: dict[str, set[tuple[str, ...]]] = {}
    for command in COMMANDS:
        for option in options(command):
            if is_refusal(option):
                continue
            longs = tuple(sorted(o for o in option.opts + option.secondary_opts if o.startswith("--")))
            for short in (o for o in option.opts if not o.startswith("--")):
                found.setdefault(short, set()).add(longs)
    return found


@pytest.mark.parametrize("command", COMMANDS)
def test_the_tables_help_line_is_the_first_paragraph_of_the_commands_own_help(command):
    # `llmcli --help` lists a command by cli.COMMANDS' line without importing it; `llmcli CMD --help`
    # shows the function's docstring: the two must say the same.
    group = typer.main.get_command(app)
    sub = group.get_command(group.context_class(group, **group.context_settings), command)
    assert COMMANDS[command].help == inspect.cleandoc(sub.help).split("\n\n")[0].strip()


def test_help_lists_every_command_with_its_table_line():
    r = cli_process("--help", vars={"COLUMNS": "200"})
    assert r.exit_code == 0, r.stderr
    rows = [line.strip("│ ") for line in r.stdout.splitlines() if line.startswith("│ ")]
    for name, entry in COMMANDS.items():
        first = entry.help.splitlines()[0]
        assert f"{name:<11} {first}" in rows, name


def test_a_short_flag_means_one_thing_in_every_command():
    clashes = {short: longs for short, longs in meanings().items() if len(longs) != 1}
    assert clashes == {}
    assert all(longs != {()} for longs in meanings().values())  # and each has a long name to read


def test_the_short_flags_keep_the_meanings_users_bring_from_llm_llama_cpp_and_ollama():
    shorts = {short: next(iter(longs)) for short, longs in meanings().items()}
    assert shorts["-c"] == ("--continue",)  # llm chat -c
    assert shorts["-n"] == ("--max-tokens",)  # llama-cli -n
    assert shorts["-q"] == ("--outtype",)  # ollama create -q
    assert shorts["-t"] == ("--threads",) and shorts["-o"] == ("--outfile", "--output")
    assert "-f" not in shorts  # --format is chat's constrained decoding, long only


def test_every_hidden_option_is_a_renamed_flag_that_refuses():
    hidden = [(c, o.opts) for c in COMMANDS for o in options(c) if o.hidden and not is_refusal(o)]
    assert hidden == []


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "completion"])
def test_every_command_that_prints_a_result_has_the_same_json_flag(command):
    (json_opt,) = [o for o in options(command) if "--json" in o.opts]
    assert json_opt.is_flag and json_opt.help == "Print one JSON document on stdout."


def test_format_is_constrained_decoding_in_chat_and_nowhere_else():
    visible = {c for c in COMMANDS for o in options(c) if "--format" in o.opts and not o.hidden}
    assert visible == {"chat"}


# Options chat and serve both have, meaning another thing on a server: the keys clients must send
# (chat: the key it sends), the longest a request may take (chat: how long it waits for a server).
SERVER_MEANINGS = {"--api-key", "--timeout"}


def described(option: Any) -> dict[str, Any]:
    """What --help shows of an option and what it accepts."""
    fields = ("opts", "secondary_opts", "help", "metavar", "min", "max", "multiple", "nargs", "default")
    return {field: getattr(option, field, None) for field in (*fields, "is_flag", "show_default")}


def test_the_options_chat_and_serve_share_read_and_check_the_same():
    chat, serve = ({o.opts[-1]: o for o in options(c)} for c in ("chat", "serve"))
    shared = chat.keys() & serve.keys() - SERVER_MEANINGS
    assert shared >= {"--temp", "--max-tokens", "--system", "--stop", "--filter", "--ctx", "--threads"}
    for name in shared:
        mine, theirs = described(chat[name]), described(serve[name])
        if name == "--system":  # one declaration; serve adds which chats get it
            assert (mine.pop("help"), theirs.pop("help")) == (
                "System prompt.",
                "System prompt for chats that bring none.",
            )
        assert mine == theirs, name


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["bench", "-o", "json"],
            "-o json is now --json: -o/--output was renamed --json, --jsonl, --csv before 1.0",
        ),
        (["bench", "--output", "csv"], "-o csv is now --csv"),
        (["bench", "-f", "jsonl"], "-f jsonl is now --jsonl: -f/--format was renamed --json, --jsonl, --csv"),
        (["bench", "--format", "md"], "-f md is now the default (no flag)"),
        (["bench", "-f", "xml"], "-f xml is now --json or --jsonl or --csv"),
        (["bench", "-n", "64"], "-n 64 is now --n-gen 64: -n was renamed --n-gen before 1.0"),
        (["bench", "-c", "512"], "-c 512 is now --ctx 512: -c was renamed --ctx before 1.0"),
        (["show", "-c", "1024", "smollm2"], "-c 1024 is now --ctx 1024: -c was renamed --ctx before 1.0"),
        (["logs", "-n", "0"], "-n 0 is now --count 0: -n was renamed --count before 1.0"),
        (["logs", "-q", "risk"], "-q risk is now --query risk: -q was renamed --query before 1.0"),
        (
            ["convert", "some/folder", "-t", "q8_0"],
            "-t q8_0 is now -q q8_0: -t was renamed -q/--outtype before 1.0",
        ),
    ],
)
def test_a_renamed_flag_is_a_usage_error_naming_the_new_one(args, message):
    r = cli(*args)
    assert r.exit_code == ExitStatus.USAGE and r.stdout == ""
    assert r.stderr.startswith("llmcli: error: ") and r.stderr.count("\n") == 1
    assert message in r.stderr


def test_pull_help_states_the_pull_default_outtype():
    from llmcli.convert.outtypes import PULL_DEFAULT

    r = cli_process("pull", "--help")
    assert PULL_DEFAULT in r.stdout


def test_version_prints_llmcli_and_its_engine_on_stdout_and_exits_0():
    from importlib.metadata import version

    result = cli_process("--version")
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout == f"llmcli {version('llmcli')} (llama-cpp-python {version('llama-cpp-python')})\n"


ONE_SHOTS = [
    ["list"],
    ["chat", "-h"],
    ["tokenize", "smollm2", "hello"],
    ["chat", "-n", "8", "--temp", "0", "hi"],
]


@pytest.mark.parametrize("args", ONE_SHOTS)
def test_a_reader_that_left_before_the_output_is_not_a_failure(args):
    # `llmcli list | head -0`: stdout is a pipe nobody reads any more; rich exits 1 there by default.
    import os
    import subprocess

    from tests.support.cli import LLMCLI, environment_vars

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        child = subprocess.run(
            [*LLMCLI, *args], stdout=write_end, stderr=subprocess.PIPE, env=environment_vars({}), timeout=120
        )
    finally:
        os.close(write_end)
    assert child.returncode == 0, child.stderr
    assert b"Traceback" not in child.stderr and b"error" not in child.stderr
