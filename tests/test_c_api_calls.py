"""Every call into llama.cpp's C API passes as many arguments as the binding declares.

llama-cpp-python's ctypes functions check the count only when they are called, so a call on a path
no test takes (llama_sampler_init_penalties lost its first argument once: --repeat-penalty crashed)
fails in a user's hands. This reads every `x.llama_*(...)` call in src/ instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

import llama_cpp

SRC = Path(__file__).resolve().parent.parent / "src" / "llmcli"


def c_api_calls() -> list[tuple[str, int, str, int]]:
    """(file, line, function, positional arguments) of each call of a llama_cpp C function."""
    calls = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            name = node.func.attr
            if name.startswith("llama_") and hasattr(getattr(llama_cpp, name, None), "argtypes"):
                if not any(isinstance(arg, ast.Starred) for arg in node.args):
                    calls.append((str(path.relative_to(SRC)), node.lineno, name, len(node.args)))
    return calls


def test_every_c_api_call_passes_the_arguments_its_binding_declares():
    calls = c_api_calls()
    assert len(calls) > 50  # the engine's calls were found
    wrong = [
        f"{file}:{line} {name}: {given} arguments, the binding takes {len(getattr(llama_cpp, name).argtypes)}"
        for file, line, name, given in calls
        if given != len(getattr(llama_cpp, name).argtypes)
    ]
    assert not wrong, "\n".join(wrong)
