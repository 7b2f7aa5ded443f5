"""Bench tests run the real CLI on the real embedded model (tests/conftest.py gives each its own store)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmcli.environment import env


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(monkeypatch):
    """Run `llmcli ARGS` in this process with stdout and stderr captured apart."""
    from llmcli.cli import main

    def run(*args: str) -> Result:
        out, err = io.StringIO(), io.StringIO()
        monkeypatch.setattr(env, "stdout", out)
        monkeypatch.setattr(env, "stderr", err)
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        return Result(code, out.getvalue(), err.getvalue())

    return run


@pytest.fixture
def cli_process():
    """Run `python -m llmcli ARGS` as a child: proves what really reaches the file descriptors."""

    def run(*args: str) -> Result:
        proc = subprocess.run([sys.executable, "-m", "llmcli", *args], capture_output=True, text=True,
                              env=os.environ.copy(), timeout=300)
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture(scope="session")
def tiny_hf_dir(tmp_path_factory) -> Path:
    """A tiny random Llama checkpoint written with save_pretrained (for the transformers backend)."""
    pytest.importorskip("torch", reason="the transformers backend is an optional extra: pip install '.[transformers]'")
    transformers = pytest.importorskip("transformers")
    import torch

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1024, bos_token_id=1, eos_token_id=2,
    )
    path = tmp_path_factory.mktemp("tiny-llama-hf")
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    return path
