"""Shell completion: the scripts, and the store's model names offered for MODEL."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from llmcli.cli import app
from llmcli.commands.options import complete_model_names
from llmcli.store import EMBEDDED_NAME, ModelEntry
from tests.support.cli import cli_process, cli_store


def complete(incomplete: str) -> list[str]:
    """The callback as the shell's Tab calls it: with the Environment `main` passes as ctx.obj."""
    import typer

    from llmcli.environment import Environment
    from tests.support.cli import environment_vars

    return complete_model_names(
        typer.Context(typer.main.get_command(app), obj=Environment(vars=environment_vars())), incomplete
    )


def register(tmp_path, name: str) -> None:
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(b"GGUF")  # completion reads the manifest, never the file
    cli_store().register(ModelEntry(name=name, path=str(path), files=[str(path)], source="test"))


def test_the_callback_offers_the_store_names_that_match(tmp_path):
    register(tmp_path, "qwen2.5-0.5b:Q4_K_M")
    register(tmp_path, "mine-f16")
    assert sorted(complete("")) == sorted([EMBEDDED_NAME, "qwen2.5-0.5b:Q4_K_M", "mine-f16"])
    assert complete("qw") == ["qwen2.5-0.5b:Q4_K_M"]
    assert complete("nothing") == []


def test_a_damaged_manifest_completes_nothing_instead_of_failing(private_store):
    private_store.mkdir(parents=True, exist_ok=True)
    (private_store / "manifest.json").write_text("{not json")
    assert complete("") == []


@pytest.mark.parametrize(
    ("shell", "marker"),
    [
        ("bash", "complete -o default -F _llmcli_completion llmcli"),
        ("zsh", "compdef _llmcli_completion llmcli"),
        ("fish", "complete --command llmcli"),
    ],
)
def test_completion_prints_the_script_for_each_shell(shell, marker):
    r = cli_process("completion", shell)
    assert r.exit_code == 0 and r.stderr == ""
    assert marker in r.stdout and "_LLMCLI_COMPLETE=complete_" in r.stdout


def test_an_unknown_shell_is_a_usage_error():
    r = cli_process("completion", "tcsh")
    assert r.exit_code == 2 and "'tcsh' is not one of 'bash', 'zsh', 'fish'" in r.stderr


def complete_bash(words: str) -> list[str]:
    """What bash gets back when Tab is pressed after `words` (the script's own protocol)."""
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    out = cli_process(
        vars={"_LLMCLI_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}, timeout=60
    )
    assert out.exit_code == 0, out.stderr
    return out.stdout.split()


def test_tab_completes_commands_options_and_model_names(tmp_path):
    register(tmp_path, "mine-f16")
    assert complete_bash("llmcli co") == ["convert", "completion"]
    assert "--outtype" in complete_bash("llmcli convert x --out")
    assert complete_bash("llmcli show mi") == ["mine-f16"]
    assert complete_bash("llmcli chat -m smol") == [EMBEDDED_NAME]
    assert set(complete_bash("llmcli bench ")) == {EMBEDDED_NAME, "mine-f16"}


def test_completing_a_model_name_imports_nothing_heavy(tmp_path):
    register(tmp_path, "mine-f16")
    code = (
        "import sys\nfrom llmcli.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
        "print([m for m in ('llama_cpp', 'numpy', 'huggingface_hub', 'torch', 'jinja2', 'prompt_toolkit', "
        "'llmcli.hub.remote', 'llmcli.hub.transfer', 'llmcli.engine.local.runtime') if m in sys.modules], "
        "file=sys.stderr)"
    )
    env = {**os.environ, "_LLMCLI_COMPLETE": "complete_bash", "COMP_WORDS": "llmcli rm mi", "COMP_CWORD": "2"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["mine-f16"] and out.stderr.strip().endswith("[]"), out.stderr


HOSTILE_NAMES = [
    "evil$(touch pwned)",
    "semi;rm -rf x",
    "new\nline",
    "esc\x1b]0;title\x07",
    "red\x1b[31m",
    "quote'd",
    'dq"x',
    "back`tick`",
    "sp ace",
    "tab\tname",
    "pipe|x",
    "amp&x",
    "redir>x",
    "glob*",
    "bidi\u202eflip",
    "zero\u200bwidth",
    "nul-ish\x7f",
]

SAFE_NAMES = ["mine-f16:Q4_K_M", "Org/Model@v1+2,3=4%5", "модель-1"]  # letters of any script are safe


def register_as(path, name: str) -> None:
    """A store entry named `name`, made as `llmcli` makes one (the manifest), for a stand-in file."""
    path.write_bytes(b"GGUF")
    cli_store().register(ModelEntry(name=name, path=str(path), files=[str(path)], source="test"))


def completions(shell: str, words: str) -> str:
    """What a shell gets back from the completion protocol (raw text, as the shell would eval or read it)."""
    protocol = {
        "bash": {
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
        },
        "zsh": {"_TYPER_COMPLETE_ARGS": words},
        "fish": {"_TYPER_COMPLETE_ARGS": words, "_TYPER_COMPLETE_FISH_ACTION": "get-args"},
    }[shell]
    out = cli_process(vars={"_LLMCLI_COMPLETE": f"complete_{shell}", **protocol}, timeout=60)
    assert out.exit_code == 0 and out.stderr == "", out.stderr
    return out.stdout


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_names_with_shell_metacharacters_or_control_characters_are_never_offered(tmp_path, shell):
    for i, name in enumerate([*HOSTILE_NAMES, *SAFE_NAMES]):
        register_as(tmp_path / f"m{i}.gguf", name)
    text = completions(shell, "llmcli show ")
    assert all(name.replace(":", "") in text.replace("\\", "").replace(":", "") for name in SAFE_NAMES), text
    for name in HOSTILE_NAMES:
        assert name.split(maxsplit=1)[0][:4] not in text, (name, text)
    assert all(c.isprintable() or c in "\n\t" for c in text), repr(text)
    if shell == "fish":
        assert "\t" not in text  # fish reads a tab as the start of a description


def test_the_callback_skips_unsafe_names_and_keeps_the_rest(tmp_path):
    for i, name in enumerate(HOSTILE_NAMES):
        register_as(tmp_path / f"m{i}.gguf", name)
    register(tmp_path, "mine-f16")
    assert sorted(complete("")) == sorted([EMBEDDED_NAME, "mine-f16"])
    assert complete("evil") == [] and complete("new") == []


def test_completion_without_a_shell_lists_the_shells_on_one_line():
    result = cli_process("completion")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("llmcli: error: Missing argument 'SHELL'. Choose from: bash, zsh, fish (")
    assert result.stderr.count("\n") == 1 and "\\n" not in result.stderr and "\\t" not in result.stderr
