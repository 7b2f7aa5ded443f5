"""The guard at load (llmcli.machine.guard_extra_bufts, decided on recorded machines in
tests/test_machine.py): on this machine's real llama.cpp, what a load hands llama.cpp, and that a
guarded load (extra buffer types off, as on an AMX CPU with AMX kernels compiled in) decodes the same."""

from __future__ import annotations

from llmcli.engine.local import runtime as runtime_module
from llmcli.engine.local.backend import build, init_backends
from llmcli.engine.local.runtime import Runtime, RuntimeConfig
from llmcli.machine import guard_extra_bufts, this_cpu


def greedy(rt: Runtime, n: int = 4) -> list[int]:
    rt.prefill(rt.tokenize("The capital of France is", add_special=True))
    out = []
    for _ in range(n):
        logits = rt.ll.llama_get_logits_ith(rt.ctx_ptr, -1)
        token = max(range(rt.n_vocab), key=logits.__getitem__)
        out.append(token)
        rt.step(token)
    return out


def test_a_load_hands_llama_cpp_the_guards_decision(embedded_path):
    init_backends()
    guarded = guard_extra_bufts(build(), this_cpu())
    with Runtime(embedded_path, RuntimeConfig(n_ctx=64, n_threads=1)) as rt:
        assert rt.model_params.use_extra_bufts is (not guarded)
    # The build here is the one `make install` makes: no AMX kernels on an AMX CPU, none needed
    # elsewhere; so no load is guarded, and weight repacking stays on.
    assert not build().has("AMX_INT8") or not this_cpu().has_amx
    assert guarded is False and build().has("REPACK")


def test_a_guarded_load_decodes_the_same_tokens(embedded_path, monkeypatch):
    with Runtime(embedded_path, RuntimeConfig(n_ctx=64, n_threads=1)) as rt:
        plain = greedy(rt)
    monkeypatch.setattr(runtime_module, "extra_bufts_allowed", lambda: False)  # as on an AMX Xeon
    with Runtime(embedded_path, RuntimeConfig(n_ctx=64, n_threads=1)) as rt:
        assert rt.model_params.use_extra_bufts is False
        assert greedy(rt) == plain
