"""Decode speed of a named-tool reply (tool_choice naming a function) against the same length of reply
unconstrained, on the same model, side by side.

Each round the constrained side answers with the named function's calls under the tool grammar
(engine/tools/grammar.py, the family's markup with the arguments from the function's schema), to
its end or --tokens; the plain side then decodes exactly as many tokens after the same prompt with
no grammar (end-of-generation ignored). Who goes first alternates by round, so a loaded machine
hurts both alike. Timed: sample + llama_decode per token, as `llmcli chat` runs them (prefill is
not timed).

Prints each round, the median tok/s of each side and the ratio. The goal: named >= 0.9 x plain.

    python benchmarks/tool_choice_speed.py [--rounds 7] [--threads 1] [--tokens 160] [--form hermes]
"""

from __future__ import annotations

import argparse
import statistics
import time

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 40},
                    "unit": {"enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 14},
                },
                "required": ["city", "unit", "days"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    },
]
SEED = 7
INSTRUCTION = "What will the weather be in Paris, London, Rome and Oslo this week? Use the tools."


def run(rt, prompt: list[int], n_gen: int, temp: float, seed: int, constraint) -> tuple[int, float, int]:
    """Decode up to n_gen tokens (to the grammar's end when constrained): (tokens, tok/s, resamples)."""
    from llmcli.engine.local.grammar import Grammars
    from llmcli.engine.local.sampler import Sampler
    from llmcli.engine.sampling import SamplingParams

    rt.clear()
    rt.prefill(prompt)
    rt.synchronize()
    check = Grammars(rt).check(constraint, False) if constraint is not None else None
    sampler = Sampler(rt, SamplingParams(temperature=temp, seed=seed, max_tokens=n_gen), check)
    n = 0
    t0 = time.perf_counter()
    while n < n_gen:
        token = sampler.sample()
        n += 1
        if check is not None and rt.is_eog(token):
            break
        rt.step(token)
    rt.synchronize()
    elapsed = time.perf_counter() - t0
    resamples = check.resamples if check else 0
    sampler.close()
    return n, n / elapsed, resamples


def main() -> None:
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig
    from llmcli.engine.messages import Message
    from llmcli.engine.templates.render import ChatTemplate
    from llmcli.engine.tools import FORMATS
    from llmcli.engine.tools.grammar import ToolChoice, tool_constraint
    from llmcli.store import embedded_model_path

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=160)
    ap.add_argument("--temp", type=float, default=0.8)
    ap.add_argument("--form", default="hermes", choices=sorted(FORMATS))
    ap.add_argument("--model", default=None, help="a GGUF (default: the embedded model)")
    args = ap.parse_args()

    rt = Runtime(args.model or embedded_model_path(), RuntimeConfig(n_ctx=1024, n_threads=args.threads))
    template = ChatTemplate(rt.chat_template, bos_token="", eos_token="")
    prompt = template.tokenize(rt, [Message("user", INSTRUCTION)], tools=TOOLS).tokens
    named = tool_constraint(TOOLS, FORMATS[args.form], ToolChoice("named", "get_weather"))
    # One seed for every run: the named reply is the same each round, so a warm-up run gives its
    # length, and the plain side decodes exactly that many tokens.
    n, _, _ = run(rt, prompt, args.tokens, args.temp, SEED, named)
    plain, constrained, ratios = [], [], []
    for r in range(args.rounds):
        # Who goes first alternates too: the first run of a round pays for a cold cache.
        for side in ("named", "plain") if r % 2 == 0 else ("plain", "named"):
            if side == "named":
                got, tps, resamples = run(rt, prompt, args.tokens, args.temp, SEED, named)
                assert got == n, "the same seed wrote another reply"
                constrained.append(tps)
            else:
                plain.append(run(rt, prompt, n, args.temp, SEED, None)[1])
        ratios.append(constrained[-1] / plain[-1])
        print(
            f"round {r + 1}: plain {plain[-1]:7.1f} tok/s   named tool {constrained[-1]:7.1f} tok/s "
            f"({n} tokens, {resamples} resampled)   ratio {ratios[-1]:.3f}"
        )
    p, c = statistics.median(plain), statistics.median(constrained)
    print(f"median over {args.rounds} rounds, {args.threads} thread(s), temperature {args.temp}, {args.form}")
    print(f"  plain       {p:7.1f} tok/s")
    print(f"  named tool  {c:7.1f} tok/s")
    paired = statistics.median(ratios)
    print(f"  ratio       {c / p:7.3f}   (goal >= 0.9; median of the per-round ratios: {paired:.3f})")
    rt.close()


if __name__ == "__main__":
    main()
