"""Decode speed of `--draft lookup` against `--draft none`, side by side, on copy-heavy and free prompts.

One model load; each round runs every task once per mode, the two modes in alternating order, so
a noisy machine hurts both alike. Greedy (temperature 0), so both modes must produce the very same
reply: the script checks it. Per task it prints each round's ratio (lookup / none decode tok/s,
the decode stage's tokens after the first per second), the median ratio, and the acceptance rate.

The issue's goals: >= 1.5x on copy-heavy tasks, >= 0.97x on free-form prompts.

At 1 thread the drafted reply is identical to the plain one. At 2+ threads it can differ at a
near-tie: llama.cpp's single-token decode splits attention across threads (another rounding than
the batched kernels, which round as a single thread does), so plain decoding's own output depends
on -t. The script reports where the replies first differ instead of stopping.

    python benchmarks/lookup_vs_plain.py [--rounds 5] [--threads 2] [--max-tokens 256] [--model PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

PY_FILE = '''import json
import os
import sys


def load_config(path):
    with open(path) as fh:
        return json.load(fh)


def merge(base, override):
    result = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge(result[key], value)
        else:
            result[key] = value
    return result


def env_overrides(prefix, environ):
    found = {}
    for key, value in environ.items():
        if key.startswith(prefix):
            name = key[len(prefix):].lower()
            found[name] = value
    return found


def parse_port(value, default):
    try:
        port = int(value)
    except (TypeError, ValueError):
        return default
    if 0 < port < 65536:
        return port
    return default


class Settings:
    def __init__(self, values):
        self.host = values.get("host", "localhost")
        self.port = parse_port(values.get("port"), 8080)
        self.debug = str(values.get("debug", "false")).lower() == "true"
        self.workers = int(values.get("workers", 1))

    def describe(self):
        return f"{self.host}:{self.port} debug={self.debug} workers={self.workers}"


def main(argv):
    base = load_config(argv[1]) if len(argv) > 1 else {}
    values = merge(base, env_overrides("APP_", os.environ))
    settings = Settings(values)
    print(settings.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
'''

TYPO_TEXT = (
    "The lighthuose keeper climbd the narow stairs every evening at dusk. He wound the grate clock, "
    "trimed the wick, and polished the lens untill it shone like a second moon. Ships passing in the "
    "nigth never saw him, but they trusted the ligth, and the light was his hole life. In winter the "
    "storms came from the north and the waves broke over the rocks, yet the lamp never went out."
)

# (name, kind, prompt) as `cat FILE | llmcli chat "INSTRUCTION"` builds it: stdin, a blank line, the instruction.
TASKS: list[tuple[str, str, str]] = [
    ("type hints", "copy", f"{PY_FILE}\n\nAdd type hints to this Python file. Reply with the whole file."),
    ("fix typos", "copy", f"{TYPO_TEXT}\n\nFix the typos in this text. Reply with the corrected text only."),
    ("sea poem", "free", "Write a poem about the sea."),
    ("explain", "free", "Explain how a refrigerator works, in two paragraphs."),
]
MODES = ("none", "lookup")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--model", default=None, help="a GGUF path (default: the embedded model)")
    args = parser.parse_args()

    from llmcli.engine.chat import ChatSession
    from llmcli.engine.events import drain
    from llmcli.engine.runtime import Runtime, RuntimeConfig
    from llmcli.engine.sampling import SamplingParams
    from llmcli.store import embedded_model_path

    model = args.model or str(embedded_model_path())
    rt = Runtime(model, RuntimeConfig(n_ctx=4096, n_threads=args.threads))
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)

    def ask(prompt: str, mode: str):
        rt.clear()
        session = ChatSession(rt, params=params, draft=mode)
        reply = drain(session.ask(prompt))
        return reply, session.messages[-1].token_ids

    print(f"model {rt.description}, {args.threads} threads, temperature 0, max {args.max_tokens} tokens, "
          f"{args.rounds} rounds, modes alternating")
    for name, _, prompt in TASKS:  # warm-up, and the reply both modes must reproduce
        reply, _ = ask(prompt, "none")
        print(f"  {name}: {reply.stats.prompt_tokens} prompt tokens, {reply.stats.completion_tokens} reply tokens")
    ratios: dict[str, list[float]] = {name: [] for name, _, _ in TASKS}
    rates: dict[str, list[float]] = {name: [] for name, _, _ in TASKS}
    acceptance: dict[str, float | None] = {}
    differs: dict[str, int | None] = {name: None for name, _, _ in TASKS}
    try:
        for rnd in range(args.rounds):
            order = MODES if rnd % 2 == 0 else MODES[::-1]
            cells = []
            for name, _, prompt in TASKS:
                got = {mode: ask(prompt, mode) for mode in order}
                (plain, plain_ids), (drafted, drafted_ids) = got["none"], got["lookup"]
                if drafted.text != plain.text:
                    pairs = zip(plain_ids or [], drafted_ids or [], strict=False)
                    differs[name] = next((i for i, (a, b) in enumerate(pairs) if a != b), -1)
                ratio = drafted.stats.decode_tps / plain.stats.decode_tps
                ratios[name].append(ratio)
                rates[name].append(plain.stats.decode_tps)
                acceptance[name] = drafted.stats.draft.acceptance_rate
                cells.append(f"{name} {plain.stats.decode_tps:6.1f}->{drafted.stats.decode_tps:6.1f} ({ratio:.2f}x)")
            load = os.getloadavg()[0]
            print(f"round {rnd + 1} [{time.strftime('%H:%M:%S')}, load {load:.1f}]: " + "  ".join(cells))
    except KeyboardInterrupt:
        print("interrupted: summarising the rounds finished so far")
    print("\nmedian decode tok/s ratio, lookup / none (same output):")
    for name, kind, _ in TASKS:
        if ratios[name]:
            acc = acceptance.get(name)
            acc_text = f"{acc:.0%}" if acc is not None else "no drafts"
            same = "same reply" if differs[name] is None else f"replies differ from token {differs[name]}"
            print(f"  {name:<11} {kind:<5} {statistics.median(ratios[name]):.2f}x  "
                  f"(rounds: {' '.join(f'{r:.2f}' for r in ratios[name])}; accepted {acc_text}; {same})")
    rt.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
