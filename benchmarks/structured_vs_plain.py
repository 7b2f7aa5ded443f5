"""Decode speed with a JSON grammar against decode without one, on the same model, side by side.

Both contestants decode exactly N_GEN tokens after the same prompt, in alternation round by
round (a loaded machine hurts both alike). The constrained one follows a grammar for a JSON array
of objects that never closes, so it cannot finish early; the plain one ignores end-of-generation.
Timed: sample + llama_decode per token, as `llmcli chat` runs them.

Prints the median tok/s of each and the ratio. The goal: constrained >= 0.9 x plain.

    python benchmarks/structured_vs_plain.py [--rounds 5] [--threads 1] [--tokens 96] [--temp 0.8]
"""

from __future__ import annotations

import argparse
import statistics
import time

# A list of records: every token is checked, and keys, quotes and commas are forced by the grammar.
ITEM_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer"},
        "city": {"type": "string", "maxLength": 40},
    },
    "required": ["name", "age", "city"],
}
INSTRUCTION = "List 100 people as JSON objects with name, age and city."


def open_list_grammar() -> str:
    from llmcli.engine.structured import schema_to_gbnf

    item = schema_to_gbnf(ITEM_SCHEMA).replace("root ::=", "item ::=")
    return item + '\nroot ::= "[" space item ("," space item)*\n'


def run(rt, prompt_tokens: list[int], n_gen: int, temp: float, grammar_text: str | None) -> tuple[float, int]:
    from llmcli.engine.local.grammar import ThinkGate, grammar_sampler
    from llmcli.engine.local.sampler import GrammarCheck, Sampler
    from llmcli.engine.sampling import SamplingParams

    rt.clear()
    rt.prefill(prompt_tokens)
    rt.synchronize()
    check = None
    if grammar_text is not None:
        check = GrammarCheck(rt, grammar_sampler(rt.vocab, grammar_text, "bench"), ThinkGate(None))
    sampler = Sampler(rt, SamplingParams(temperature=temp, seed=42, max_tokens=n_gen), check)
    t0 = time.perf_counter()
    for _ in range(n_gen):
        rt.step(sampler.sample())
    rt.synchronize()
    elapsed = time.perf_counter() - t0
    resamples = check.resamples if check else 0
    sampler.close()
    return n_gen / elapsed, resamples


def main() -> None:
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig
    from llmcli.engine.messages import Message
    from llmcli.engine.templates.render import ChatTemplate
    from llmcli.store import embedded_model_path

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--temp", type=float, default=0.8)
    ap.add_argument("--model", default=None, help="a GGUF (default: the embedded model)")
    args = ap.parse_args()

    rt = Runtime(args.model or embedded_model_path(), RuntimeConfig(n_ctx=1024, n_threads=args.threads))
    template = ChatTemplate(rt.chat_template, bos_token="", eos_token="")
    prompt = template.tokenize(rt, [Message("user", INSTRUCTION)]).tokens
    grammar = open_list_grammar()
    plain, constrained, resamples = [], [], []
    for r in range(args.rounds):
        # Who goes first alternates too: the first run of a round pays for a cold cache.
        for which in (None, grammar) if r % 2 == 0 else (grammar, None):
            tps, rejected = run(rt, prompt, args.tokens, args.temp, which)
            if which is None:
                plain.append(tps)
            else:
                constrained.append(tps)
                resamples.append(rejected)
        print(
            f"round {r + 1}: plain {plain[-1]:7.1f} tok/s   json grammar {constrained[-1]:7.1f} tok/s "
            f"({resamples[-1]}/{args.tokens} tokens resampled)"
        )
    p, c = statistics.median(plain), statistics.median(constrained)
    print(
        f"median over {args.rounds} rounds, {args.tokens} tokens each, {args.threads} thread(s), "
        f"temperature {args.temp}"
    )
    print(f"  plain        {p:7.1f} tok/s")
    print(f"  json grammar {c:7.1f} tok/s")
    paired = statistics.median(b / a for a, b in zip(plain, constrained, strict=True))
    print(f"  ratio        {c / p:7.3f}   (goal >= 0.9; median of the per-round ratios: {paired:.3f})")
    rt.close()


if __name__ == "__main__":
    main()
