"""transformers side of the bench: the design article's reference path, measured the same way.

`AutoModelForCausalLM.from_pretrained(...)` then `generate()`, greedy, float32, on CPU:
- pp<N>: generate(N random ids, exactly 1 new token). That is the time to first token, and
  N / TTFT is the prefill rate (the one sampled token costs ~nothing next to N positions).
- tg<N>: generate([BOS], exactly N new tokens), N / time, as llama-bench's tg starts from BOS.
Each generate() builds a fresh KV cache, so repetitions start empty as on the llama.cpp side.
torch and transformers are imported here only, so the rest of llmcli never pays for them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

from llmcli.bench.llama import cpu_info
from llmcli.bench.memory import reset_peak_rss
from llmcli.bench.records import TRANSFORMERS, BenchPlan, BenchRow, BenchTest, Progress, measure
from llmcli.errors import RuntimeFailure, UsageError
from llmcli.units import format_params

DTYPE = "float32"  # what the reference code uses; also the only dtype that is fast on every CPU
DTYPE_LABEL = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}


def _quiet_transformers() -> None:
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()


def _load(hf_dir: str):
    import torch
    from transformers import AutoModelForCausalLM

    _quiet_transformers()
    try:
        model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=getattr(torch, DTYPE))
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(
            f"transformers cannot load {hf_dir} ({exc}); give a causal-LM Hugging Face folder"
        ) from None
    model.eval()
    return model


def _facts(model) -> dict:
    cfg = model.config
    text_cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    n_params = sum(p.numel() for p in model.parameters())
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    n_layer = getattr(text_cfg, "num_hidden_layers", None)
    n_head = getattr(text_cfg, "num_attention_heads", None)
    n_kv = getattr(text_cfg, "num_key_value_heads", None) or n_head
    head_dim = getattr(text_cfg, "head_dim", None) or (text_cfg.hidden_size // n_head if n_head else None)
    elem = next(model.parameters()).element_size()
    per_token = (
        2 * n_layer * n_kv * head_dim * elem
        if n_layer is not None and n_kv is not None and head_dim is not None
        else None
    )
    label = format_params(n_params)  # the size label llama.cpp's model_type carries
    return dict(
        model_type=f"{getattr(cfg, 'model_type', 'hf')} {label} {DTYPE_LABEL.get(DTYPE, DTYPE)}",
        model_size=size,
        model_n_params=n_params,
        type_k=DTYPE,
        type_v=DTYPE,
        kv_per_token=per_token,
        bos=getattr(text_cfg, "bos_token_id", None),
        vocab=getattr(text_cfg, "vocab_size", None),
        eos=getattr(text_cfg, "eos_token_id", None),
    )


class _Runner:
    def __init__(self, model, facts: dict, seed: int) -> None:
        import torch

        self.torch = torch
        self.model = model
        self.rng = random.Random(seed)
        self.vocab = facts["vocab"] or model.get_input_embeddings().num_embeddings
        self.bos = facts["bos"] if isinstance(facts["bos"], int) else None
        eos = facts["eos"]
        self.pad = eos[0] if isinstance(eos, list) and eos else (eos if isinstance(eos, int) else 0)

    def _ids(self, n: int):
        ids = [self.rng.randrange(self.vocab) for _ in range(n)]
        if self.bos is not None:
            ids[0] = self.bos
        return self.torch.tensor([ids], dtype=self.torch.long)

    def _generate(self, ids, n_new: int) -> int:
        torch = self.torch
        mask = torch.ones_like(ids)
        t0 = time.perf_counter_ns()
        with torch.inference_mode():
            # min = max new tokens: an EOS must not end a tg run early.
            self.model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=n_new,
                min_new_tokens=n_new,
                do_sample=False,
                pad_token_id=self.pad,
            )
        return time.perf_counter_ns() - t0

    def run(self, test: BenchTest) -> int:
        ns = 0
        if test.n_prompt:
            ns += self._generate(self._ids(test.n_prompt), 1)
        if test.n_gen:
            ns += self._generate(self._ids(1), test.n_gen)
        return ns

    def warmup(self, test: BenchTest) -> None:
        if test.n_prompt:
            self._generate(self._ids(test.n_prompt), 1)
        if test.n_gen:
            self._generate(self._ids(1), 2)


def run_transformers(name: str, hf_dir: str, plan: BenchPlan) -> Iterator[Progress | BenchRow]:
    """Measure every (threads, test) of the plan with transformers; yields progress, then rows."""
    import torch

    reset_peak_rss()
    yield Progress(model=name, backend=TRANSFORMERS, stage="load")
    model = _load(hf_dir)
    facts = _facts(model)
    runner = _Runner(model, facts, plan.seed)
    per_token = facts.pop("kv_per_token")
    for key in ("bos", "vocab", "eos"):
        facts.pop(key)
    common = dict(
        model_filename=hf_dir,
        n_batch=plan.n_batch,
        n_ubatch=plan.n_batch,
        flash_attn=0,
        cpu_info=cpu_info(),
        backends="CPU",
        backend=TRANSFORMERS,
        model=name,
        n_ctx=plan.ctx_size,
        kv_cache_bytes=per_token * plan.ctx_size if per_token else None,
        **facts,
    )
    previous_threads = torch.get_num_threads()
    try:
        yield from measure(runner, plan, name, TRANSFORMERS, torch.set_num_threads, common)
    except RuntimeError as exc:  # torch reports shape/memory trouble as RuntimeError
        raise RuntimeFailure(f"transformers failed on {hf_dir}: {exc}") from None
    finally:
        torch.set_num_threads(previous_threads)
        del model
