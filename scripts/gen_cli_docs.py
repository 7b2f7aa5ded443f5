#!/usr/bin/env python3
"""docs/cli.md, generated from the Typer app: every command's usage, help and options as `--help`
shows them, then the environment variables llmcli reads, the input limits (src/llmcli/limits.py's
table) and its exit codes. Also the sampling
table in docs/chat.md, from src/llmcli/params.py.

    python scripts/gen_cli_docs.py            # rewrite both (`make docs`)
    python scripts/gen_cli_docs.py --check    # exit 1 when either is stale

tests/cli/test_cli_docs.py renders cli.md in memory and fails when the file differs (and
tests/test_params.py checks chat.md's table). The environment
table below is checked against the source: a variable read in src/ without a row here (or a row
for a variable nothing reads) stops the generator, so the reference cannot drift from the code.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
OUT = ROOT / "docs" / "cli.md"
CHAT_DOC = ROOT / "docs" / "chat.md"

# name -> what it does. Read once by src/llmcli/environment.py (huggingface_hub reads its HF_* itself).
ENVIRONMENT = {
    "LLMCLI_HOME": "The store: models, manifest, the conversation log, the prefix cache, REPL history. "
    "Default `$XDG_DATA_HOME/llmcli`.",
    "XDG_DATA_HOME": "Where the default store goes when `LLMCLI_HOME` is unset (default `~/.local/share`).",
    "HOME": "The home directory, for the default store.",
    "LLMCLI_MODEL": "The model `chat` and `bench` use when none is given (default: the embedded SmolLM2).",
    "LLMCLI_ENDPOINT": "An OpenAI-compatible server for `chat`, `list` and `bench`, as `--endpoint`.",
    "LLMCLI_API_KEY": "The key sent to that server as a bearer token, as `--api-key`; never shown or logged.",
    "LLMCLI_NO_LOG": "On/off (`1`, `true`, `yes`, `on` / `0`, `false`, `no`, `off`, empty): "
    "log no exchange, as `chat --no-log`.",
    "LLMCLI_CACHE_MAX": "The disk prefix cache's cap in bytes, with K/M/G suffixes (decimal); "
    "default `2G`, `0` turns the cache off.",
    "LLMCLI_DEBUG": "On/off: show the traceback (and llama.cpp's log) behind an error line.",
    "NO_COLOR": "Any non-empty value: no colour on a terminal (https://no-color.org).",
    "_LLMCLI_COMPLETE": "Set by the scripts `llmcli completion SHELL` prints, to ask for completions.",
    "HF_HOME": "huggingface_hub's folder; hub downloads go to its cache, shared with other HF tools.",
    "HF_HUB_CACHE": "huggingface_hub's cache folder, if not under `HF_HOME`.",
    "HF_TOKEN": "A Hugging Face token, for gated and private repos.",
    "HF_ENDPOINT": "Another hub than huggingface.co (a mirror).",
    "HF_HUB_OFFLINE": "`1`: `pull` uses only what is in the cache.",
    "HF_HUB_DOWNLOAD_TIMEOUT": "Seconds without a byte after which `pull` stops a download (default 10; "
    "what arrived is kept for a resume). `serve` uses its `--timeout` instead.",
}

# ExitStatus member -> what it means (src/llmcli/errors.py).
EXIT_MEANINGS = {
    "OK": "ok",
    "ERROR": "runtime failure: llama.cpp, the disk, the network, a reply that fails its schema",
    "USAGE": "bad input: an option, a model name, a file that is not a valid GGUF, a prompt that cannot fit",
    "INTERRUPTED": "Ctrl-C",
}

_PREFIXED = re.compile(r"\b_?(?:LLMCLI|HF)_[A-Z][A-Z0-9_]*\b")
_QUOTED = re.compile(r"""["']([A-Z][A-Z0-9_]{2,})["']""")


def variables_in_source(src: Path = SRC) -> set[str]:
    """Every LLMCLI_*/HF_* name in the package, and every variable name environment.py quotes."""
    found: set[str] = set()
    for path in (src / "llmcli").rglob("*.py"):
        found.update(_PREFIXED.findall(path.read_text(encoding="utf-8")))
    found.update(_QUOTED.findall((src / "llmcli" / "environment.py").read_text(encoding="utf-8")))
    return found


def check_environment_table(found: set[str]) -> None:
    missing, stale = sorted(found - ENVIRONMENT.keys()), sorted(ENVIRONMENT.keys() - found)
    if missing or stale:
        raise SystemExit(
            "scripts/gen_cli_docs.py: the environment table is out of date: "
            + "; ".join(
                part
                for part in (
                    f"read in src/ but not documented: {', '.join(missing)}" if missing else "",
                    f"documented but read nowhere: {', '.join(stale)}" if stale else "",
                )
                if part
            )
        )


def _text(help_text: str | None) -> str:
    """Help as --help prints it: rich's \\[ escape is a plain [."""
    return (help_text or "").replace("\\[", "[").strip()


def _paragraphs(help_text: str) -> list[str]:
    """A command's help as markdown: click's \\b paragraphs (kept as written) become code blocks."""
    out = []
    for block in re.split(r"\n\s*\n", _text(help_text)):
        if block.startswith("\b"):
            out.append("```\n" + block.lstrip("\b").strip("\n") + "\n```")
        else:
            out.append(" ".join(line.strip() for line in block.splitlines()))
    return out


def _param_lines(command, ctx) -> list[str]:
    lines = []
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, help_text = record
        help_text = " ".join(_text(help_text).split())
        lines.append(f"- `{names.strip()}`" + (f": {help_text}" if help_text else ""))
    return lines


def _command_section(name: str, command, parent) -> list[str]:
    import click

    ctx = click.Context(command, info_name=name, parent=parent)
    usage = " ".join(command.collect_usage_pieces(ctx))
    lines = [f"## `llmcli {name}`", "", "```", f"llmcli {name} {usage}".rstrip(), "```", ""]
    for paragraph in _paragraphs(command.help or ""):
        lines += [paragraph, ""]
    lines += _param_lines(command, ctx) + [""]
    return lines


def render() -> str:
    """The whole of docs/cli.md."""
    import click
    import typer

    sys.path.insert(0, str(SRC))
    from llmcli.cli import app
    from llmcli.errors import ExitStatus
    from llmcli.limits import LIMITS

    found = variables_in_source()
    check_environment_table(found)
    group = typer.main.get_command(app)
    root = click.Context(group, info_name="llmcli", **group.context_settings)
    names = group.list_commands(root)
    lines = [
        "# Command-line reference",
        "",
        "<!-- Generated by scripts/gen_cli_docs.py from the Typer app: do not edit, run `make docs`. -->",
        "",
        _text(group.help),
        "",
        "```",
        "llmcli " + " ".join(group.collect_usage_pieces(root)),
        "```",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    for name in names:
        command = group.get_command(root, name)
        lines.append(f"| [`{name}`](#llmcli-{name}) | {_text(command.get_short_help_str(limit=200))} |")
    lines += ["", "Options of `llmcli` itself:", ""] + _param_lines(group, root) + [""]
    for name in names:
        lines += _command_section(name, group.get_command(root, name), root)
    lines += [
        "## Environment variables",
        "",
        "| variable | what it does |",
        "|---|---|",
    ]
    lines += [f"| `{var}` | {meaning} |" for var, meaning in ENVIRONMENT.items()]
    lines += [
        "",
        "## Input limits",
        "",
        "What a user, a file or a pipe may hand llmcli (`src/llmcli/limits.py`). A value past one is "
        "refused before it is read, allocated or given to llama.cpp: one line naming the limit and the fix, "
        "exit 2.",
        "",
        "| limit | value | what it bounds |",
        "|---|---|---|",
    ]
    lines += [
        f"| `{row.name}` | {row.value:,} {row.unit} | {row.why} |".replace("  |", " |")
        for row in LIMITS.values()
    ]
    lines += [
        "",
        "Beside the table: a `--ctx` whose KV cache (its tokens times the model's KV bytes a token) "
        "cannot fit "
        "the memory left beside the weights is refused with the largest context that fits.",
    ]
    lines += ["", "## Exit codes", "", "| code | meaning |", "|---|---|"]
    missing = [status.name for status in ExitStatus if status.name not in EXIT_MEANINGS]
    if missing:
        raise SystemExit(f"scripts/gen_cli_docs.py: no meaning for exit status {', '.join(missing)}")
    lines += [f"| {int(status)} | {EXIT_MEANINGS[status.name]} |" for status in ExitStatus]
    return "\n".join(lines).rstrip("\n") + "\n"


def with_options_table(chat_doc: str) -> str:
    """docs/chat.md with its sampling table replaced by the one params.py makes."""
    from llmcli.params import options_table

    table = options_table()
    header = table.splitlines()[0]
    lines = chat_doc.split("\n")
    start = lines.index(header)  # ValueError: the table's header row was edited by hand
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join(lines[:start] + table.splitlines() + lines[end:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/cli.md is stale")
    args = parser.parse_args(argv)
    chat_doc = CHAT_DOC.read_text(encoding="utf-8")
    wanted = {OUT: render(), CHAT_DOC: with_options_table(chat_doc)}
    stale = [path for path, text in wanted.items() if not path.exists() or path.read_text("utf-8") != text]
    for path in stale:
        name = path.relative_to(ROOT)
        if args.check:
            print(f"{name} is stale: run `make docs`", file=sys.stderr)
        else:
            path.write_text(wanted[path], encoding="utf-8")
            print(f"wrote {name}", file=sys.stderr)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
