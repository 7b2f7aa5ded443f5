"""The layout's rules, read from the source with `ast`: what each layer may import, and module size.

Every import counts, also one inside a function: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "llmcli"
ENGINE = PACKAGE / "engine"

# The library: it never talks to a terminal, so it imports none of the terminal's packages (nor
# llmcli's own terminal layers); the commands and the ui render its results.
LIBRARY = (
    "engine",
    "store.py",
    "hub",
    "convert",
    "usecases",
    "bench",
    "serve",
    "chatlog",
    "gguf_check",
)
TERMINAL = ("typer", "rich", "prompt_toolkit", "llmcli.ui", "llmcli.commands", "llmcli.cli")
# The two backends under engine/: each depends on the contract at engine/'s root, never on the other.
ROOMS = {"local": "llmcli.engine.openai", "openai": "llmcli.engine.local"}
MAX_LINES = 400


def modules(root: Path) -> list[Path]:
    return sorted(root.rglob("*.py")) if root.is_dir() else [root]


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, name: str | None = None) -> set[str]:
    """Every module a file imports, absolute, wherever the import statement stands (`name`: the
    module the file is, when it is not under src/)."""
    package = (name or module_name(path)).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names.add(module)
            names |= {f"{module}.{alias.name}" for alias in node.names}  # `from pkg import module`
    return names


def is_within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_the_local_and_openai_rooms_never_import_each_other(room):
    other = ROOMS[room]
    found = {
        f"{module_name(path)} imports {name}"
        for path in modules(ENGINE / room)
        for name in imported(path)
        if is_within(name, other)
    }
    assert not found


@pytest.mark.parametrize("layer", LIBRARY)
def test_the_library_imports_nothing_of_the_terminal(layer):
    found = {
        f"{module_name(path)} imports {name}"
        for path in modules(PACKAGE / layer)
        for name in imported(path)
        if any(is_within(name, terminal) for terminal in TERMINAL)
    }
    assert not found


def test_no_module_in_src_is_over_400_lines():
    sizes = {
        str(path.relative_to(SRC)): len(path.read_text(encoding="utf-8").splitlines())
        for path in modules(SRC)
    }
    assert len(sizes) > 50  # the walk found the source
    assert {path: n for path, n in sizes.items() if n > MAX_LINES} == {}


def test_the_import_walk_sees_lazy_and_relative_imports(tmp_path):
    # The rules above hold only if the walk finds what a module imports: inside a function, relatively.
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from ..openai import client\n    import rich.console\n", encoding="utf-8")
    names = imported(probe, "llmcli.engine.local.probe")
    assert {"llmcli.engine.openai", "llmcli.engine.openai.client", "rich.console"} <= names
    assert any(is_within(n, ROOMS["local"]) for n in names)
    assert any(is_within(n, t) for n in names for t in TERMINAL)
