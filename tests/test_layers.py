"""The layout's rules, read from the source with `ast`: what each layer may import, no import cycle,
no private name taken from another module, and module size.

Every import counts, also one inside a function or under TYPE_CHECKING: a lazy import is still a
dependency, and a type is part of what a module needs to be read.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
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
# The two backends under engine/ (its rooms): each depends on the contract at engine/'s root, never on
# the other, and the root depends on neither. templates/ and tools/ are shared by both: the root may
# use them (the thinking tags, the tool-call records).
ROOMS = {"local": "llmcli.engine.openai", "openai": "llmcli.engine.local"}
MAX_LINES = 400


def modules(root: Path) -> list[Path]:
    return sorted(root.rglob("*.py")) if root.is_dir() else [root]


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def statements(path: Path, name: str | None = None) -> Iterator[tuple[str, list[str]]]:
    """Every import statement of a file, wherever it stands, as (the absolute module, the names taken
    from it): `import a.b` is ("a.b", []). `name`: the module the file is, when it is not under src/."""
    package = (name or module_name(path)).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            base = package[: len(package) - node.level + 1] if node.level else []
            yield ".".join(base + ([node.module] if node.module else [])), [a.name for a in node.names]


def imported(path: Path, name: str | None = None) -> set[str]:
    """Every module a file imports, absolute (and `pkg.name` for `from pkg import name`, which may be
    a module)."""
    names = set()
    for module, taken in statements(path, name):
        names.add(module)
        names |= {f"{module}.{alias}" for alias in taken}  # `from pkg import module`
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


# The engine's shared rooms: the contract's, as its root is (both backends import them).
SHARED = ("templates", "tools")


def room_imports(files: dict[str, Path]) -> set[str]:
    """`module imports name` for each import of a backend room by these files (module -> path)."""
    return {
        f"{module} imports {name}"
        for module, path in files.items()
        for name in imported(path, module)
        if any(is_within(name, f"llmcli.engine.{room}") for room in ROOMS)
    }


def by_name(paths: list[Path]) -> dict[str, Path]:
    return {module_name(path): path for path in paths}


def test_the_engine_root_imports_no_room():
    # The contract (engine/*.py) is what both backends build on; a root module that reaches into a
    # backend ties every backend to that one.
    assert room_imports(by_name(sorted(ENGINE.glob("*.py")))) == set()


@pytest.mark.parametrize("shared", SHARED)
def test_the_shared_rooms_import_no_backend(shared):
    # templates/ and tools/ are the contract's too: the root imports them, so a backend reached from
    # them is reached from the root (tools/grammar.py once asked engine/local to parse its grammar).
    files = by_name(modules(ENGINE / shared))
    assert len(files) > 3 and room_imports(files) == set()


def test_the_room_walk_sees_a_lazy_import_of_a_backend(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from llmcli.engine.local.grammar import check_gbnf\n", encoding="utf-8")
    found = room_imports({"llmcli.engine.tools.probe": probe})
    assert "llmcli.engine.tools.probe imports llmcli.engine.local.grammar" in found


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules of src it imports. `from pkg import name` is an edge to pkg.name where
    that is a module, else to pkg (its __init__); the parent package that any import of a submodule
    runs first is no edge (else every package that names its submodules would be a cycle)."""
    paths = {module_name(path): path for path in modules(root)}

    def owner(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in paths.items():
        found = set()
        for module, taken in statements(path, name):
            targets = [f"{module}.{alias}" for alias in taken if f"{module}.{alias}" in paths]
            if len(targets) < len(taken) or not taken:  # a name the module itself defines
                targets.append(module)
            found |= {owner(target) for target in targets}
        graph[name] = {n for n in found if n is not None and n != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_anywhere_in_src():
    graph = import_graph()
    assert {"llmcli.cli", "llmcli.store", "llmcli.engine.local.turn"} <= set(graph)  # top-level too
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle_through_three_modules():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c"]]


def private_imports(path: Path, name: str | None = None) -> set[str]:
    """`from module import _name` of a name private to another module (dunders are not private)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.add(f"{name or module_name(path)} imports {node.module}.{alias.name}")
    return found


# engine/local/runtime.py is being changed on another branch: its `_llama` becomes public there.
def test_no_module_imports_a_private_name_of_another():
    found = {line for path in modules(PACKAGE) for line in private_imports(path)}
    assert found == set()


def test_the_private_name_walk_sees_a_private_import(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from llmcli.a import public, _hidden, __version__\n", encoding="utf-8")
    assert private_imports(probe, "probe") == {"probe imports llmcli.a._hidden"}


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


# -- the adapters and the use-cases ----------------------------------------------------------------
# ui/ renders: it takes a use-case's records (types) but calls none of its functions; the command
# hands the ui what it may do (usecases/repl.py's ReplActions). usecases/ serves every adapter, so it
# imports none (serve, ui, commands, cli). commands/ parse and call a use-case: an engine room's
# value they need comes through one.
ADAPTERS = ("llmcli.serve", "llmcli.ui", "llmcli.commands", "llmcli.cli")


def ui_use_case_calls(files: dict[str, Path]) -> set[str]:
    """`module imports name` for each use-case import of these files that is not a type (a type's
    name starts with a capital: a class, a record)."""
    found = set()
    for module, path in files.items():
        for imported_module, taken in statements(path, module):
            if not is_within(imported_module, "llmcli.usecases"):
                continue
            found |= {f"{module} imports {imported_module}.{n}" for n in taken if not n[:1].isupper()}
            if not taken:  # `import llmcli.usecases.x`: the module itself
                found.add(f"{module} imports {imported_module}")
    return found


def imports_within(files: dict[str, Path], packages: tuple[str, ...]) -> set[str]:
    return {
        f"{module} imports {name}"
        for module, path in files.items()
        for name in imported(path, module)
        if any(is_within(name, package) for package in packages)
    }


ROOM_PACKAGES = tuple(f"llmcli.engine.{room}" for room in ROOMS)


def test_the_ui_imports_no_use_case_but_its_types():
    files = by_name(modules(PACKAGE / "ui"))
    assert len(files) > 5 and ui_use_case_calls(files) == set()


def test_the_use_cases_import_no_adapter():
    files = by_name(modules(PACKAGE / "usecases"))
    assert len(files) > 5 and imports_within(files, ADAPTERS) == set()


def test_the_commands_import_no_engine_room():
    files = by_name(modules(PACKAGE / "commands"))
    assert len(files) > 5 and imports_within(files, ROOM_PACKAGES) == set()


@pytest.mark.parametrize(
    "module,text,check",
    [
        (
            "llmcli.ui.probe",
            "def f():\n    from llmcli.usecases.answer import Answer, log_exchange\n",
            lambda files: (
                ui_use_case_calls(files) == {"llmcli.ui.probe imports llmcli.usecases.answer.log_exchange"}
            ),
        ),
        (
            "llmcli.usecases.probe",
            "from llmcli.serve.options import HOST\n",
            lambda files: (
                "llmcli.usecases.probe imports llmcli.serve.options" in imports_within(files, ADAPTERS)
            ),
        ),
        (
            "llmcli.commands.probe",
            "def f():\n    from llmcli.engine.local.runtime import DEFAULT_CTX\n",
            lambda files: (
                "llmcli.commands.probe imports llmcli.engine.local.runtime"
                in imports_within(files, ROOM_PACKAGES)
            ),
        ),
    ],
    ids=["ui calls a use-case", "a use-case imports serve", "a command imports an engine room"],
)
def test_each_new_rule_sees_its_break_put_back(tmp_path, module, text, check):
    probe = tmp_path / "probe.py"
    probe.write_text(text, encoding="utf-8")
    assert check({module: probe})


def test_numpy_comes_in_through_one_module_that_initialises_llama_cpp_first():
    # On CUDA a model loaded after `import numpy` crashed llama.cpp's loader: engine/local/arrays.py
    # initialises llama.cpp, then imports numpy, for every module on a path that loads a model
    # (convert/ writes files with numpy and loads no model).
    found = {
        module_name(path)
        for path in modules(PACKAGE)
        if "numpy" in imported(path) and not is_within(module_name(path), "llmcli.convert")
    }
    assert found == {"llmcli.engine.local.arrays"}
