"""`bench --draft lookup`: a copy task through the chat pipeline, plain and drafted, side by side.

tg<N> decodes random ids, where no draft can ever match; a shell job such as
`cat notes.md | llmcli chat "Fix the typos."` copies most of its input. This test asks the model to
repeat a paragraph (greedy, at most N tokens), once with `--draft none` and once with the chosen
drafter, alternating repetition after repetition so that noise falls on both alike. Its t/s is the
decode stage's: tokens after the first per second (the drafter hands out the same tokens).
"""

from __future__ import annotations

from collections.abc import Iterator

from llmcli.bench.llama import LlamaTarget, row_fields
from llmcli.bench.memory import peak_rss_bytes
from llmcli.bench.records import LLAMA, BenchPlan, BenchRow, Progress

COPY_TEXT = (
    "A key-value cache stores the attention keys and values of every token a transformer has already "
    "processed, so that generating the next token only computes attention for the new position instead of "
    "recomputing the whole sequence. Its size grows linearly with the context: two tensors per layer, each "
    "holding one vector per key-value head and per token. Grouped-query attention shares key-value heads "
    "between several query heads, which shrinks the cache. Chat servers keep the cache between the turns "
    "of a conversation, so a follow-up question only pays for its own tokens."
)
COPY_PROMPT = f"Repeat this text exactly:\n\n{COPY_TEXT}"
PROMPT_ROOM = 256  # the templated prompt's tokens, with room to spare


def copy_test_name(n_gen: int, draft: str) -> str:
    return f"copy{n_gen}" + ("" if draft == "none" else f"+{draft}")


def run_copy(target: LlamaTarget, plan: BenchPlan, draft: str) -> Iterator[Progress | BenchRow]:
    """For each thread count and each tg<N> of the plan: a copy<N> row plain and one drafted."""
    from llmcli.engine.events import drain
    from llmcli.engine.local.chat import ChatSession
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig
    from llmcli.engine.sampling import SamplingParams
    from llmcli.gguf_check import model_facts

    facts = model_facts(target.path)
    gens = [t.n_gen for t in plan.tests if t.n_gen]
    rt = Runtime(
        target.path,
        RuntimeConfig(
            n_ctx=PROMPT_ROOM + max(gens),
            n_threads=plan.threads[0],
            n_batch=plan.n_batch,
            flash_attn=plan.flash_attn,
            gpu_layers=plan.gpu_layers,
        ),
    )
    modes = ("none", draft)
    try:
        common = row_fields(target, rt, plan, facts)
        for n_threads in plan.threads:
            rt.ll.llama_set_n_threads(rt.ctx_ptr, n_threads, n_threads)
            for n_gen in gens:
                params = SamplingParams(temperature=0.0, max_tokens=n_gen)

                def ask(mode: str, params: SamplingParams = params):
                    rt.clear()
                    return drain(ChatSession(rt, params=params, draft=mode).ask(COPY_PROMPT)).stats

                if plan.warmup:
                    yield Progress(target.name, LLAMA, "warmup", copy_test_name(n_gen, draft), n_threads)
                    for mode in modes:
                        ask(mode)
                samples: dict[str, list[int]] = {mode: [] for mode in modes}
                last = {}
                for rep in range(plan.repetitions):
                    yield Progress(
                        target.name,
                        LLAMA,
                        "run",
                        copy_test_name(n_gen, draft),
                        n_threads,
                        rep + 1,
                        plan.repetitions,
                    )
                    for mode in modes:
                        stats = last[mode] = ask(mode)
                        samples[mode].append(max(1, round((stats.decode_ms or 0.0) * 1e6)))
                for mode in modes:
                    stats = last[mode]
                    row = BenchRow.measured(
                        samples[mode],
                        stats.decode_steps,
                        n_threads=n_threads,
                        n_prompt=0,
                        n_gen=stats.decode_steps,
                        n_depth=stats.prompt_tokens,
                        test=copy_test_name(n_gen, mode),
                        peak_rss_bytes=peak_rss_bytes(),
                        **common,
                    )
                    if stats.draft is not None:
                        row.draft_acceptance = stats.draft.acceptance_rate
                    yield row
    finally:
        rt.close()
