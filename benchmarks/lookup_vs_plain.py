"""Decode speed of `--draft lookup` against `--draft none`, side by side, on copy-heavy and free prompts.

One model load; each round runs every task once per mode, the two modes in alternating order, so
a noisy machine hurts both alike. Greedy (temperature 0), so both modes must produce the very same
reply: the script checks it. Per task it prints each round's ratio (lookup / none decode tok/s,
the decode stage's tokens after the first per second), the median ratio, and the acceptance rate.

The goals: >= 1.5x on copy-heavy tasks, >= 0.97x on free-form prompts, and on the copy
tasks >= 1.3x native llama-bench tg at the same KV depth (given LLAMA_BENCH=/path/to/llama-bench,
see build_native.sh, each round also runs `llama-bench -p 0 -n 128 -d DEPTH` at each copy task's
depth halfway through its reply, and the drafted rate is compared with it).

--suite copy (default) runs long copy tasks: a ~1,500-token Python file with
one small change, a ~1,000-token text with typos, and quoting the sentences of a ~1,000-token text
that mention one subject; --suite small runs the earlier, shorter copy tasks (a 60-line file,
a paragraph). Both add the two free-form prompts.

At 1 thread the drafted reply is identical to the plain one. At 2+ threads it can differ at a
near-tie: llama.cpp's single-token decode splits attention across threads (another rounding than
the batched kernels, which round as a single thread does), so plain decoding's own output depends
on -t. The script reports where the replies first differ instead of stopping.

    python benchmarks/lookup_vs_plain.py [--suite copy|small] [--rounds 5] [--threads 2]
                                         [--max-tokens N] [--model PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

PY_FILE = """import json
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
"""

TYPO_TEXT = (
    "The lighthuose keeper climbd the narow stairs every evening at dusk. He wound the grate clock, "
    "trimed the wick, and polished the lens untill it shone like a second moon. Ships passing in the "
    "nigth never saw him, but they trusted the ligth, and the light was his hole life. In winter the "
    "storms came from the north and the waves broke over the rocks, yet the lamp never went out."
)

RESOURCE_CLASS = '''

class {Name}Store:
    """Keeps {name} records in memory, keyed by id."""

    def __init__(self):
        self.items = {{}}
        self.next_id = 1

    def add(self, {name}):
        item_id = self.next_id
        self.items[item_id] = dict({name}, id=item_id)
        self.next_id += 1
        return item_id

    def get(self, item_id):
        if item_id not in self.items:
            raise KeyError(f"no {name} with id {{item_id}}")
        return self.items[item_id]

    def remove(self, item_id):
        return self.items.pop(item_id, None)

    def find(self, **fields):
        return [item for item in self.items.values()
                if all(item.get(key) == value for key, value in fields.items())]
'''
RESOURCES = ["user", "order", "invoice", "product", "ticket"]
BIG_PY_FILE = PY_FILE.replace(
    "\n\nif __name__",
    "".join(RESOURCE_CLASS.format(Name=r.title(), name=r) for r in RESOURCES) + "\n\nif __name__",
)

STORY = [
    "The village sat at the mouth of a cold river, where the fishing boats came home every evening.",
    "Most families lived from the sea, and the children learned to mend nets before they could read.",
    "In the spring the harbour filled with traders who brought salt, rope and news from the south.",
    "The baker rose at four and his bread was gone by seven, so late risers ate yesterday's loaves.",
    "Old Marta kept the lighthouse and wrote the weather in a ledger that nobody else ever opened.",
    "When the storms came the boats stayed in the harbour and the men repaired their sails in the sheds.",
    "The school had one room, one stove and a teacher who had once sailed as far as the ice fields.",
    "On market days the square smelled of smoked fish, wet wool and the sweet apples from the hills.",
    "A new road was promised every year, and every year the money went to the church roof instead.",
    "At night the harbour lights were the only lights for miles, and sailors steered by them home.",
    "The doctor visited twice a month, crossing the pass on a grey horse that knew the way alone.",
    "Summer brought painters who sat on the rocks for hours and sold their pictures to each other.",
]


def story(n_sentences: int) -> str:
    """Paragraphs of five sentences, cycling through STORY with a day number so no two are equal."""
    out = [
        f"On day {i + 1}, {STORY[i % len(STORY)][0].lower()}{STORY[i % len(STORY)][1:]}"
        for i in range(n_sentences)
    ]
    return "\n\n".join(" ".join(out[i : i + 5]) for i in range(0, len(out), 5))


def with_typos(text: str, every: int = 8, seed: int = 7) -> str:
    """Swap two inner letters in about one word of every `every` (seeded): the kind of typo people fix."""
    rng, words = random.Random(seed), text.split(" ")
    for i, w in enumerate(words):
        core = w.rstrip(".,")
        if len(core) > 4 and core.isalpha() and rng.randrange(every) == 0:
            j = rng.randrange(1, len(core) - 2)
            words[i] = core[:j] + core[j + 1] + core[j] + core[j + 2 :] + w[len(core) :]
    return " ".join(words)


FREE = [
    ("sea poem", "free", "Write a poem about the sea."),
    ("explain", "free", "Explain how a refrigerator works, in two paragraphs."),
]
# (name, kind, prompt) as `cat FILE | llmcli chat "INSTRUCTION"` builds it: stdin, blank line, instruction.
SUITES: dict[str, list[tuple[str, str, str]]] = {
    "copy": [
        (
            "rename",
            "copy",
            f"{BIG_PY_FILE}\n\nRename the function parse_port to parse_tcp_port everywhere. "
            "Reply with the whole file.",
        ),
        (
            "fix typos",
            "copy",
            f"{with_typos(story(36))}\n\nFix the typos in this text. Reply with the corrected text only.",
        ),
        ("quote", "copy", f"{story(36)}\n\nQuote, word for word, every sentence that mentions the harbour."),
        *FREE,
    ],
    "small": [
        (
            "type hints",
            "copy",
            f"{PY_FILE}\n\nAdd type hints to this Python file. Reply with the whole file.",
        ),
        (
            "fix typos",
            "copy",
            f"{TYPO_TEXT}\n\nFix the typos in this text. Reply with the corrected text only.",
        ),
        *FREE,
    ],
}


def native_tg(threads: int, depth: int, model: str) -> float | None:
    """llama-bench tg128 at this KV depth (tok/s), or None without LLAMA_BENCH."""
    path = os.environ.get("LLAMA_BENCH")
    if not path:
        return None
    out = subprocess.run(
        [
            path,
            "-m",
            model,
            "-p",
            "0",
            "-n",
            "128",
            "-d",
            str(depth),
            "-t",
            str(threads),
            "-fa",
            "1",
            "-r",
            "2",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)[0]["avg_ts"]


MODES = ("none", "lookup")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--suite", choices=sorted(SUITES), default="copy")
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="default: 2,000 for the long suite (the whole file fits), 256 for the small one",
    )
    parser.add_argument("--model", default=None, help="a GGUF path (default: the embedded model)")
    args = parser.parse_args()

    from llmcli.engine.events import drain
    from llmcli.engine.local.chat import ChatSession
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig
    from llmcli.engine.sampling import SamplingParams
    from llmcli.store import embedded_model_path

    tasks = SUITES[args.suite]
    max_tokens = args.max_tokens or (2000 if args.suite == "copy" else 256)
    model = args.model or str(embedded_model_path())
    rt = Runtime(model, RuntimeConfig(n_ctx=4096, n_threads=args.threads))
    # A free-form reply is capped at 256 tokens whatever the suite: the small model's poem never ends.
    params = {
        "copy": SamplingParams(temperature=0.0, max_tokens=max_tokens),
        "free": SamplingParams(temperature=0.0, max_tokens=min(max_tokens, 256)),
    }

    def ask(prompt: str, mode: str, kind: str):
        rt.clear()
        session = ChatSession(rt, params=params[kind], draft=mode)
        reply = drain(session.ask(prompt))
        return reply, session.messages[-1].token_ids

    print(
        f"model {rt.description}, {args.threads} threads, temperature 0, max {max_tokens} tokens, "
        f"{args.rounds} rounds, modes alternating"
    )
    depth: dict[str, int] = {}
    for name, kind, prompt in tasks:  # warm-up, and the reply both modes must reproduce
        reply, _ = ask(prompt, "none", kind)
        if kind == "copy":  # the KV depth halfway through the reply: where its decode runs on average
            depth[name] = reply.stats.prompt_tokens + reply.stats.completion_tokens // 2
        print(
            f"  {name}: {reply.stats.prompt_tokens} prompt "
            f"tokens, {reply.stats.completion_tokens} reply tokens"
        )
    natives: dict[str, list[float]] = {name: [] for name in depth}
    drafted_rates: dict[str, list[float]] = {name: [] for name in depth}
    ratios: dict[str, list[float]] = {name: [] for name, _, _ in tasks}
    rates: dict[str, list[float]] = {name: [] for name, _, _ in tasks}
    acceptance: dict[str, float | None] = {}
    differs: dict[str, int | None] = {name: None for name, _, _ in tasks}
    try:
        for rnd in range(args.rounds):
            order = MODES if rnd % 2 == 0 else MODES[::-1]
            cells = []
            for name, kind, prompt in tasks:
                got = {mode: ask(prompt, mode, kind) for mode in order}
                (plain, plain_ids), (drafted, drafted_ids) = got["none"], got["lookup"]
                if drafted.text != plain.text:
                    pairs = zip(plain_ids or [], drafted_ids or [], strict=False)
                    differs[name] = next((i for i, (a, b) in enumerate(pairs) if a != b), -1)
                ratio = drafted.stats.decode_tps / plain.stats.decode_tps
                if name in depth and (native := native_tg(args.threads, depth[name], model)) is not None:
                    natives[name].append(native)
                    drafted_rates[name].append(drafted.stats.decode_tps)
                ratios[name].append(ratio)
                rates[name].append(plain.stats.decode_tps)
                acceptance[name] = drafted.stats.draft.acceptance_rate
                cells.append(
                    f"{name} {plain.stats.decode_tps:6.1f}->{drafted.stats.decode_tps:6.1f} ({ratio:.2f}x)"
                )
            load = os.getloadavg()[0]
            print(
                f"round {rnd + 1} [{time.strftime('%H:%M:%S')}, load {load:.1f}]: " + "  ".join(cells),
                flush=True,
            )
    except KeyboardInterrupt:
        print("interrupted: summarising the rounds finished so far")
    print("\nmedian decode tok/s ratio, lookup / none (same output):")
    for name, kind, _ in tasks:
        if ratios[name]:
            acc = acceptance.get(name)
            acc_text = f"{acc:.0%}" if acc is not None else "no drafts"
            same = "same reply" if differs[name] is None else f"replies differ from token {differs[name]}"
            print(
                f"  {name:<11} {kind:<5} {statistics.median(ratios[name]):.2f}x  "
                f"(rounds: {' '.join(f'{r:.2f}' for r in ratios[name])}; accepted {acc_text}; {same})"
            )
    if any(natives.values()):
        print(
            "\ncopy tasks, --draft lookup decode / native llama-bench "
            "tg128 at the reply's mid depth (goal >= 1.3x):"
        )
        for name, rates_native in natives.items():
            per_round = [d / n for d, n in zip(drafted_rates[name], rates_native, strict=True)]
            print(
                f"  {name:<11} {statistics.median(per_round):.2f}x  (native median "
                f"{statistics.median(rates_native):.1f} tok/s at depth {depth[name]})"
            )
    rt.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
