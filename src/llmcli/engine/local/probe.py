"""One token of a model, decoded by a child process: `python -m llmcli.engine.local.probe GGUF`.

A llama.cpp that cannot run on this CPU (AMX kernels on an AMX Xeon, an instruction set the CPU lacks)
does not raise: it kills the process. So `llmcli doctor` and the test suite's preflight run this in a
child, and report its death in one line (usecases/doctor.py). What it learns it prints on stdout as
JSON lines, each flushed before the next step, so a crash still says how far it came:

    {"step": "loaded", "system_info": "CPU : SSE3 = 1 | ...", "devices": [...], "extra_bufts": true}
    {"step": "decoded", "token": 504, "piece": "Hello"}
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

PROMPT = "The capital of France is"  # a prefill of a few tokens, then one decode step: both matmul paths


def emit(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def probe(path: str) -> None:
    from llmcli.engine.local.backend import build, extra_bufts_allowed, init_backends
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig

    devices = init_backends()
    emit(
        {
            "step": "loaded",
            "system_info": build().line,
            "devices": [asdict(d) for d in devices],
            "extra_bufts": extra_bufts_allowed(),
        }
    )
    with Runtime(path, RuntimeConfig(n_ctx=64, n_threads=1, n_batch=64)) as rt:
        ids = rt.tokenize(PROMPT, add_special=True)
        rt.prefill(ids)
        logits = rt.ll.llama_get_logits_ith(rt.ctx_ptr, -1)
        token = max(range(rt.n_vocab), key=logits.__getitem__)
        rt.step(token)  # one more forward pass: the single-token matmul path
        rt.synchronize()
        emit({"step": "decoded", "token": token, "piece": rt.piece(token).decode("utf-8", "replace")})


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: python -m llmcli.engine.local.probe GGUF\n")
        return 2
    probe(argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
