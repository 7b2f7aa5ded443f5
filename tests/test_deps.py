"""A strict run (LLMCLI_TEST_STRICT=1, as `make test` and CI run) cannot pass by skipping: a missing
test extra stops it with one line naming the extra, and a skip not in tests/allowed_skips.py fails it."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.allowed_skips import AllowedSkip, is_allowed
from tests.support.deps import STRICT_VAR, TEST_EXTRAS, declared_test_extras, missing_extras, require

ROOT = Path(__file__).resolve().parents[1]


def test_every_test_extra_has_a_module_that_proves_it_is_installed():
    assert sorted(TEST_EXTRAS) == sorted(declared_test_extras())


def test_a_strict_session_here_has_every_extra():
    assert missing_extras() == []


@pytest.mark.parametrize("requirement", sorted(TEST_EXTRAS))
def test_a_missing_extra_is_named_with_the_command_that_installs_it(monkeypatch, requirement):
    monkeypatch.setitem(sys.modules, TEST_EXTRAS[requirement], None)  # `import` now raises ImportError
    (line,) = missing_extras()
    assert line.startswith(f"missing test extra {requirement} (") and line.endswith(
        "pip install -e '.[test]'"
    )


def test_require_skips_and_in_strict_mode_fails(monkeypatch):
    monkeypatch.setitem(sys.modules, "pexpect", None)
    monkeypatch.delenv(STRICT_VAR, raising=False)
    with pytest.raises(pytest.skip.Exception, match="missing test extra pexpect"):
        require("pexpect")
    monkeypatch.setenv(STRICT_VAR, "1")
    with pytest.raises(pytest.fail.Exception, match="missing test extra pexpect"):
        require("pexpect")
    monkeypatch.setitem(sys.modules, "llama_cpp.server.app", None)
    with pytest.raises(pytest.fail.Exception, match=r"missing test extra llama-cpp-python\[server\]"):
        require("llama_cpp.server.app")


def test_only_the_listed_skips_are_allowed():
    corpus = "tests/engine/templates/test_template_corpus.py::test_template_renders_as_transformers_does"
    refused = "transformers refuses every conversation: {'unicode': 'TypeError'}"
    row = AllowedSkip(rf"{re.escape(corpus)}\[Qwen-Qwen3-0\.6B\.jinja\]", "^transformers refuses", "a probe")
    assert is_allowed(f"{corpus}[Qwen-Qwen3-0.6B.jinja]", refused, [row])
    assert not is_allowed(f"{corpus}[Qwen-Qwen3-0.6B.jinja]", "missing test extra transformers", [row])
    assert not is_allowed(f"{corpus}[google-gemma-3-it.jinja]", refused, [row])  # a template not listed
    # The tool-use templates that once could not render render with tools: their skip fails a strict run.
    tool_use = (
        "CohereForAI-c4ai-command-r-plus-tool_use.jinja",
        "fireworks-ai-llama-3-firefunction-v2.jinja",
    )
    assert not any(is_allowed(f"{corpus}[{name}]", refused) for name in tool_use)
    assert not is_allowed("tests/cli/test_repl_pty.py::test_markdown_mode_renders_the_reply", "no pexpect")


def strict_pytest(tmp_path, blocked: str | None, test_source: str) -> subprocess.CompletedProcess:
    """A strict pytest run over one small test file with this suite's hooks, `blocked` made unimportable."""
    test_file = tmp_path / "test_probe.py"
    test_file.write_text(textwrap.dedent(test_source))
    block = f"sys.modules[{blocked!r}] = None; " if blocked else ""
    code = f"import sys; {block}import pytest; sys.exit(pytest.main(sys.argv[1:]))"
    args = [
        "-p",
        "tests.conftest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(tmp_path),
        str(test_file),
    ]
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, STRICT_VAR: "1"},
    )


def test_a_strict_run_without_an_extra_fails_with_one_line_naming_it(tmp_path):
    done = strict_pytest(tmp_path, "torch", "def test_nothing():\n    pass\n")
    assert done.returncode != 0
    named = [line for line in (done.stdout + done.stderr).splitlines() if "missing test extra torch" in line]
    assert named and all("pip install -e '.[test]'" in line for line in named), done.stdout + done.stderr
    assert "1 passed" not in done.stdout  # it stopped before running anything


def test_a_strict_run_with_an_unlisted_skip_fails_and_says_why(tmp_path):
    done = strict_pytest(
        tmp_path,
        None,
        """
        import pytest

        def test_runs():
            pass

        def test_hides():
            pytest.skip("a reason nobody listed")
        """,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 passed, 1 skipped" in done.stdout
    assert "1 skipped" in done.stdout and "a reason nobody listed" in done.stdout
    assert "not in tests/allowed_skips.py and fail the run" in done.stdout
