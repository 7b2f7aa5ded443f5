"""Start-up: `llmcli --help` and `llmcli list` import nothing they do not use (nor the network stack).

Timing lives in benchmarks/startup.py (machines are shared); these tests check what gets imported.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import llmcli.commands

# Third-party packages no start-up path needs: the engine, the hub, the converter and the REPL.
HEAVY = (
    "llama_cpp",
    "numpy",
    "huggingface_hub",
    "torch",
    "transformers",
    "jinja2",
    "prompt_toolkit",
    "gguf",
    "sentencepiece",
    "yaml",
    "safetensors",
    # serve's HTTP stack
    "fastapi",
    "uvicorn",
    "starlette",
    "sse_starlette",
    "prometheus_client",
    "limits",
)
# llmcli's own heavier layers, which neither --help nor list uses.
# (llmcli.convert itself may load: its __init__ is lazy, and convert/outtypes.py is the dependency-free
# table that --help reads the outtype defaults from.)
# (Nor does llmcli.hub.spec count: it is the pure REPO[:QUANT] grammar that model_ref.py parses with.)
UNUSED_LAYERS = (
    "llmcli.hub.remote",
    "llmcli.hub.transfer",
    "llmcli.hub.plan",
    "llmcli.hub.choose",
    "llmcli.engine.local.runtime",
    "llmcli.engine.local.chat",
    "llmcli.convert.core",
    "llmcli.convert.families",
    "llmcli.convert.vocab",
    "llmcli.bench",
    "llmcli.ui.answer",
    "llmcli.usecases.answer",
    "llmcli.ui.download",
    # all of serve but its defaults' table (serve/options.py, no imports), which --help shows
    *(
        f"llmcli.serve.{p.stem}"
        for p in (Path(llmcli.commands.__file__).parents[1] / "serve").iterdir()
        if p.stem not in ("__init__", "options", "__pycache__")
    ),
)


def imported_after(args: list[str]) -> set[str]:
    """The modules loaded once `llmcli ARGS` has run in a fresh interpreter."""
    code = (
        "import sys\nfrom llmcli.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write('\\n'.join(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    return set(out.stderr.splitlines())


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return [n for n in names if any(m == n or m.startswith(n + ".") for m in modules)]


@pytest.mark.parametrize("args", [["--help"], ["list"], ["list", "--json"]])
def test_start_up_imports_no_heavy_library_and_no_unused_layer(args):
    modules = imported_after(args)
    assert "llmcli.cli" in modules  # the probe did run llmcli
    assert loaded(modules, HEAVY) == [] and loaded(modules, UNUSED_LAYERS) == []


# The HTTP client of remote servers: only a command given a server loads it. (socket itself may
# load: importlib.metadata, which finds the embedded model's wheel, imports it through email.utils.)
NETWORK = ("http.client", "ssl", "llmcli.engine.openai.client")


@pytest.mark.parametrize("args", [["list"], ["list", "--json"]])
def test_list_without_a_server_loads_no_http_client(args):
    modules = imported_after(args)
    assert "llmcli.commands.list" in modules
    # socket comes with typer itself (pydantic -> importlib.metadata -> email.utils): see below
    assert loaded(modules, tuple(name for name in NETWORK if name != "socket")) == []


def test_help_imports_no_command_module():
    # `llmcli --help` lists the commands from cli.COMMANDS' help lines; each module loads when it runs.
    ours = {m for m in imported_after(["--help"]) if m.startswith("llmcli")}
    assert ours == {"llmcli", "llmcli.cli", "llmcli.environment", "llmcli.errors", "llmcli.startup"}


@pytest.mark.parametrize("command", ["chat", "serve", "list"])
def test_a_commands_help_imports_that_command_module_alone(command):
    ours = {m for m in imported_after([command, "--help"]) if m.startswith("llmcli.commands.")}
    assert ours == {f"llmcli.commands.{command}", "llmcli.commands.options"}


def test_help_loads_neither_markdown_nor_pydantic():
    # typer.rich_utils' markdown and traceback imports are stood in for (llmcli/startup.py), and the
    # help flag not given is False, which Typer does not coerce through pydantic (cli.py).
    for args in (["--help"], ["chat", "--help"]):
        modules = imported_after(args)
        assert loaded(modules, ("rich.markdown", "rich.traceback", "markdown_it", "pydantic")) == []


NETWORK = ("http.client", "ssl", "socket")


def network_importers(args: list[str]) -> dict[str, set[str]]:
    """Network module -> the modules whose import statements asked for it while `llmcli ARGS` ran."""
    code = (
        "import builtins, sys\n"
        "seen, real = {}, builtins.__import__\n"
        "def spy(name, globals=None, *rest):\n"
        f"    if name in {NETWORK!r}:\n"
        "        seen.setdefault(name, set()).add((globals or {}).get('__name__', '?'))\n"
        "    return real(name, globals, *rest)\n"
        "builtins.__import__ = spy\n"
        "from llmcli.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write(repr({k: sorted(v) for k, v in seen.items()}))"
    )
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    return {name: set(who) for name, who in ast.literal_eval(out.stderr.splitlines()[-1]).items()}


@pytest.mark.parametrize("args", [["list"], ["list", "--json"]])
def test_list_without_an_endpoint_loads_no_network_module(args):
    importers = network_importers(args)
    assert "http.client" not in importers and "ssl" not in importers
    # typer coerces option values with pydantic, whose plugin loader imports importlib.metadata, which
    # imports email.utils, which imports socket: the framework's, and no connection is made with it.
    assert importers.get("socket", set()) <= {"email.utils"}


def test_list_with_an_endpoint_does_load_the_http_client():
    # The probe above sees the client when it is used: a closed port on loopback answers at once.
    importers = network_importers(["list", "--endpoint", "http://127.0.0.1:9/v1"])
    assert importers["http.client"] == {"llmcli.engine.openai.client"}


# llmcli.convert.outtypes and llmcli.params are tables with no imports: the one place the outtype
# defaults and the generation parameters are written, which the options' help text reads.
ALLOWED_AT_MODULE_LEVEL = {
    "typer",
    "llmcli.commands.options",
    "llmcli.environment",
    "llmcli.errors",
    "llmcli.convert.outtypes",
    "llmcli.params",
    "llmcli.offload",  # --gpu-layers' parser: pure, imports only llmcli.errors
    "llmcli.serve.options",
}


def module_level_imports(path: Path) -> set[str]:
    """Modules imported at a command module's top level (not inside functions or `if TYPE_CHECKING:`)."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            names.add(node.module or "")
    return names


@pytest.mark.parametrize(
    "path", sorted(Path(llmcli.commands.__file__).parent.glob("*.py")), ids=lambda p: p.stem
)
def test_command_modules_import_only_typer_and_the_options_at_module_level(path):
    # `llmcli CMD --help` imports CMD's module to show its options: anything heavier belongs inside
    # the command.
    third_party = {m for m in module_level_imports(path) if m.split(".")[0] not in sys.stdlib_module_names}
    assert third_party <= ALLOWED_AT_MODULE_LEVEL


def test_the_collector_paused_for_parsing_runs_again_for_the_command_and_after(monkeypatch):
    import functools
    import gc

    import llmcli.cli
    from llmcli.commands import list as list_
    from tests.support.cli import cli

    seen = []

    @functools.wraps(list_.list_models)  # Typer reads the real signature through __wrapped__
    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return spy.__wrapped__(*args, **kwargs)

    monkeypatch.setattr(list_, "list_models", spy)

    llmcli.cli._command().commands.pop("list", None)  # built again, around the spy
    try:
        assert cli("list").exit_code == 0 and seen == [True]
        assert cli("--help").exit_code == 0 and gc.isenabled()
    finally:
        llmcli.cli._command().commands.pop("list", None)
