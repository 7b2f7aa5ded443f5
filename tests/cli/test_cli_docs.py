"""docs/cli.md is what the Typer app says: regenerated in memory, it must equal the file."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from llmcli.cli import COMMANDS
from llmcli.errors import ExitStatus
from tests.support.cli import cli

ROOT = Path(__file__).resolve().parents[2]
CLI_DOC = ROOT / "docs" / "cli.md"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "scripts" / "gen_cli_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _generator()


@pytest.fixture(scope="module")
def rendered() -> str:
    return gen.render()


def section(doc: str, command: str) -> str:
    """The part of cli.md about one command, up to the next heading of its level."""
    start = doc.index(f"## `llmcli {command}`")
    end = doc.find("\n## ", start + 1)
    return doc[start : end if end >= 0 else len(doc)]


def test_docs_cli_md_is_current(rendered):
    assert CLI_DOC.read_text(encoding="utf-8") == rendered, "docs/cli.md is stale: run `make docs`"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_in_help_is_in_the_commands_section(rendered, command):
    r = cli(command, "--help")
    assert r.exit_code == 0, r.stderr
    shown = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", r.stdout))
    assert "--help" in shown
    missing = sorted(flag for flag in shown if flag not in section(rendered, command))
    assert not missing, f"llmcli {command} --help shows {missing}, docs/cli.md does not"


def test_every_command_and_exit_status_is_listed(rendered):
    for command in COMMANDS:
        assert f"| [`{command}`](#llmcli-{command}) |" in rendered
    exits = rendered.split("## Exit codes", 1)[1]
    for status in ExitStatus:
        assert f"\n| {int(status)} | " in exits, status.name


def test_the_environment_table_holds_what_the_source_reads(rendered):
    found = gen.variables_in_source()
    assert {"LLMCLI_HOME", "LLMCLI_MODEL", "LLMCLI_API_KEY", "NO_COLOR", "HF_TOKEN"} <= found
    table = rendered.split("## Environment variables", 1)[1]
    for name in found:
        assert f"| `{name}` |" in table, name


def test_every_input_limit_is_listed_with_its_value(rendered):
    from llmcli.limits import LIMITS

    table = rendered.split("## Input limits", 1)[1].split("\n## ", 1)[0]
    for row in LIMITS.values():
        assert f"| `{row.name}` | {row.value:,}" in table, row.name


def test_an_undocumented_variable_stops_the_generator():
    found = gen.variables_in_source()
    with pytest.raises(SystemExit, match="read in src/ but not documented: LLMCLI_SOMETHING_NEW"):
        gen.check_environment_table(found | {"LLMCLI_SOMETHING_NEW"})
    with pytest.raises(SystemExit, match="documented but read nowhere: LLMCLI_HOME"):
        gen.check_environment_table(found - {"LLMCLI_HOME"})


def test_check_fails_on_a_stale_file_until_it_is_regenerated(monkeypatch, tmp_path, capsys):
    out, chat_doc = tmp_path / "cli.md", tmp_path / "chat.md"
    stale_row = "| `--temp` | 0.7 | 0..10 | Temperature (0 = greedy). | `temperature` |"
    real = (ROOT / "docs" / "chat.md").read_text(encoding="utf-8")
    chat_doc.write_text(re.sub(r"^\| `--temp` .*$", stale_row, real, flags=re.M), encoding="utf-8")
    out.write_text(CLI_DOC.read_text(encoding="utf-8").replace("Print one JSON document", "Print JSON"))
    monkeypatch.setattr(gen, "OUT", out)
    monkeypatch.setattr(gen, "CHAT_DOC", chat_doc)
    monkeypatch.setattr(gen, "ROOT", tmp_path)

    assert gen.main(["--check"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "cli.md is stale: run `make docs`",
        "chat.md is stale: run `make docs`",
    ]
    assert gen.main([]) == 0
    assert gen.main(["--check"]) == 0
    assert stale_row not in chat_doc.read_text(encoding="utf-8")
    assert chat_doc.read_text(encoding="utf-8") == real
