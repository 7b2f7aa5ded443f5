"""llama.cpp side of the bench: pp<N> and tg<N> exactly as llama-bench measures them.

The loops mirror llama-bench's test_prompt/test_gen (tools/llama-bench/llama-bench.cpp):
- pp: N random token ids (BOS first when the model adds one), fed in n_batch chunks, then one
  llama_synchronize; only the last token of a chunk asks for logits.
- tg: one token per llama_decode, each followed by llama_synchronize, starting from BOS.
- a warm-up pass of each test first, and the KV memory cleared before every repetition.
Python sits outside llama.cpp's hot path: the batch struct and token buffers are made once, the
random ids are drawn before the clock starts, and the ctypes calls go straight to libllama.
"""

from __future__ import annotations

import ctypes
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

from llmcli.bench.memory import peak_rss_bytes, reset_peak_rss
from llmcli.bench.records import LLAMA, BenchPlan, BenchRow, Progress, Test
from llmcli.errors import RuntimeFailure

KV_TYPE = "f16"  # llama.cpp's default K/V cache type, which we do not change
KV_BYTES_PER_ELEMENT = 2.0


@dataclass
class LlamaTarget:
    """A GGUF to measure, with the name the user knows it by."""

    name: str
    path: str


def cpu_info() -> str:
    """The CPU's model name, as llama-bench's cpu_info field reports it."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


class _Model:
    """A loaded model and one context, owned by the bench for the length of one model's tests.

    TODO(engine): load through llmcli.engine.runtime.Runtime once it is on main, so that threads,
    flash attention and batch settings are decided in one place for chat and bench alike.
    """

    def __init__(self, path: str, plan: BenchPlan) -> None:
        import llama_cpp.llama_cpp as L

        from llmcli.bench import _llama_log

        self.L = L
        _llama_log.quiet()
        L.llama_backend_init()
        mparams = L.llama_model_default_params()
        self.model = L.llama_model_load_from_file(path.encode(), mparams)
        if not self.model:
            raise RuntimeFailure(f"llama.cpp could not load {path}{_llama_log.last_error_suffix()}")
        cparams = L.llama_context_default_params()
        cparams.n_ctx = plan.ctx_size
        cparams.n_batch = plan.n_batch
        cparams.n_ubatch = min(plan.n_ubatch, plan.n_batch)
        cparams.n_threads = cparams.n_threads_batch = plan.threads[0]
        cparams.flash_attn_type = (L.LLAMA_FLASH_ATTN_TYPE_ENABLED if plan.flash_attn
                                   else L.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        cparams.no_perf = True
        self.ctx = L.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            L.llama_model_free(self.model)
            raise RuntimeFailure(
                f"llama.cpp could not create a {plan.ctx_size}-token context for {path}"
                f"{_llama_log.last_error_suffix()}; try a smaller -c/-p/-n"
            )
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.bos = L.llama_vocab_bos(self.vocab) if L.llama_vocab_get_add_bos(self.vocab) else None
        self.n_ctx = L.llama_n_ctx(self.ctx)
        self.memory = L.llama_get_memory(self.ctx)

    def describe(self) -> tuple[str, int, int]:
        """(model_type, model_size, model_n_params) as llama-bench reports them."""
        buf = ctypes.create_string_buffer(256)
        self.L.llama_model_desc(self.model, buf, len(buf))
        return (buf.value.decode("utf-8", "replace"), self.L.llama_model_size(self.model),
                self.L.llama_model_n_params(self.model))

    def close(self) -> None:
        if self.ctx:
            self.L.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            self.L.llama_model_free(self.model)
            self.model = None


class _Runner:
    """The two llama-bench loops on one context, with buffers allocated once."""

    def __init__(self, m: _Model, n_batch: int, seed: int) -> None:
        L = m.L
        self.m = m
        self.n_batch = n_batch
        self.rng = random.Random(seed)
        self.tokens = (L.llama_token * n_batch)()
        # One batch struct reused for every call: llama_batch_get_one only fills n_tokens and the
        # token pointer; NULL positions continue from the KV memory, NULL logits = last token only.
        self.batch = L.llama_batch()
        self.batch.token = ctypes.cast(self.tokens, ctypes.POINTER(L.llama_token))
        self.decode = L.llama_decode
        self.sync = L.llama_synchronize
        self.clear_memory = L.llama_memory_clear

    def _random_ids(self, n: int, start_with_bos: bool) -> list[int]:
        ids = [self.rng.randrange(self.m.n_vocab) for _ in range(n)]
        if start_with_bos and ids and self.m.bos is not None:
            ids[0] = self.m.bos
        return ids

    def clear(self) -> None:
        self.clear_memory(self.m.memory, False)

    def prompt(self, n_prompt: int) -> int:
        """Prefill n_prompt random ids in n_batch chunks; returns elapsed ns."""
        ids = self._random_ids(n_prompt, start_with_bos=True)
        chunks = [ids[i:i + self.n_batch] for i in range(0, n_prompt, self.n_batch)]
        ctx, batch, tokens, decode = self.m.ctx, self.batch, self.tokens, self.decode
        t0 = time.perf_counter_ns()
        for chunk in chunks:
            tokens[:len(chunk)] = chunk
            batch.n_tokens = len(chunk)
            if (rc := decode(ctx, batch)) != 0:
                raise RuntimeFailure(f"llama_decode failed on a prompt batch (status {rc})")
        self.sync(ctx)
        return time.perf_counter_ns() - t0

    def gen(self, n_gen: int) -> int:
        """Decode n_gen tokens one per step, synchronising after each; returns elapsed ns."""
        ids = self._random_ids(n_gen, start_with_bos=True)
        ctx, batch, tokens, decode, sync = self.m.ctx, self.batch, self.tokens, self.decode, self.sync
        batch.n_tokens = 1
        t0 = time.perf_counter_ns()
        for tok in ids:
            tokens[0] = tok
            if (rc := decode(ctx, batch)) != 0:
                raise RuntimeFailure(f"llama_decode failed on a generation step (status {rc})")
            sync(ctx)
        return time.perf_counter_ns() - t0

    def run(self, test: Test) -> int:
        """One repetition of a test from an empty KV memory; returns elapsed ns."""
        self.clear()
        ns = 0
        if test.n_prompt:
            ns += self.prompt(test.n_prompt)
        if test.n_gen:
            ns += self.gen(test.n_gen)
        return ns

    def warmup(self, test: Test) -> None:
        # As llama-bench: a full prompt pass and a single generation step.
        self.clear()
        if test.n_prompt:
            self.prompt(test.n_prompt)
        if test.n_gen:
            self.gen(1)


def run_llama(target: LlamaTarget, plan: BenchPlan) -> Iterator[Progress | BenchRow]:
    """Measure every (threads, test) of the plan on one GGUF; yields progress, then each row."""
    from llmcli.gguf_check import model_facts

    facts = model_facts(target.path)  # validates the file before llama.cpp opens it
    reset_peak_rss()
    yield Progress(model=target.name, backend=LLAMA, stage="load")
    m = _Model(target.path, plan)
    try:
        model_type, model_size, n_params = m.describe()
        per_token = facts.kv_bytes_per_token(KV_BYTES_PER_ELEMENT)
        runner = _Runner(m, plan.n_batch, plan.seed)
        common = dict(
            model_filename=target.path, model_type=model_type, model_size=model_size,
            model_n_params=n_params, n_batch=plan.n_batch, n_ubatch=min(plan.n_ubatch, plan.n_batch),
            flash_attn=int(plan.flash_attn), type_k=KV_TYPE, type_v=KV_TYPE, cpu_info=cpu_info(),
            backend=LLAMA, model=target.name, n_ctx=m.n_ctx,
            kv_cache_bytes=per_token * m.n_ctx if per_token is not None else None,
        )
        for n_threads in plan.threads:
            m.L.llama_set_n_threads(m.ctx, n_threads, n_threads)
            for test in plan.tests:
                if plan.warmup:
                    yield Progress(target.name, LLAMA, "warmup", test.name, n_threads)
                    runner.warmup(test)
                samples = []
                for rep in range(plan.repetitions):
                    yield Progress(target.name, LLAMA, "run", test.name, n_threads, rep + 1, plan.repetitions)
                    samples.append(runner.run(test))
                row = BenchRow.measured(samples, test.n_tokens, n_threads=n_threads, n_prompt=test.n_prompt,
                                        n_gen=test.n_gen, test=test.name, peak_rss_bytes=peak_rss_bytes(),
                                        **common)
                if test.n_prompt and not test.n_gen:
                    row.ttft_ms = row.avg_ns / 1e6  # prefill ends with the first token's logits
                yield row
    finally:
        m.close()

