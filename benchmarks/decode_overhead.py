"""Per-token work around llama_decode, counted in instructions (callgrind), robust on a loaded machine.

Wall-clock ratios need an idle machine; instruction counts do not. This runs each contestant under
`valgrind --tool=callgrind` twice, with a short and a long reply, and divides the difference by
the extra tokens: the slope is the cost of one more decoded token, with start-up, model load and
prefill cancelled out. Contestants:

  bare     the floor: llama_decode + the native sampler chain, one ctypes call each, nothing else
  stream   `llmcli chat PROMPT` as a user runs it, reply streamed to stdout (a pipe to /dev/null)
  json     `llmcli chat --json PROMPT`, the path benchmarks/chat_vs_native.py times
  lookup   `llmcli chat --draft lookup` on a copy prompt (a text with typos to fix), against plain
           `llmcli chat` on the same prompt, both with --no-cache; per emitted token, with the
           functions whose counts grow with the reply (see lookup_rows)

`--profile KIND` instead runs one contestant once, with a callgrind profile part dumped at each
entry to and exit from llama_decode: the parts between two calls are exactly the work of one token
outside llama_decode. It prints their mean and the functions they spend it in (exclusive), over the
decode loop's steady tokens (the first parts hold start-up and the prefill).

It prints each one's instructions per token, the part inside llama_decode, and the rest: the
Python overhead per token, also as a fraction of llama_decode's cost (at 1 thread, where no
thread spins at a barrier; the overhead does not depend on the thread count, llama_decode's
instructions hardly do).

valgrind cannot run AVX-512 code, so the children load llama.cpp built without it
(`benchmarks/build_native.sh --callgrind`, the same llama.cpp as the wheel, through
LLAMA_CPP_LIB_PATH): llama_decode's own count is that build's, the Python overhead is the same.

    python benchmarks/decode_overhead.py [--short 16] [--long 80] [--model PATH] [--only stream,json]
                                         [--lib DIR] [--src DIR] [--profile KIND [--tokens 12]]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# Greedy SmolLM2 lists animals for thousands of tokens, so every run decodes its full -n.
PROMPT = "List 200 animals, one per line."

BARE = """
import sys
from llmcli.engine.local.chat import ChatSession
from llmcli.engine.local.runtime import Runtime, RuntimeConfig
from llmcli.engine.sampling import SamplingParams
from llmcli.engine.local.sampler import Sampler
from llmcli.engine.messages import Message
rt = Runtime(sys.argv[1], RuntimeConfig(n_ctx=512, n_threads=1))
session = ChatSession(rt, params=SamplingParams(temperature=0.0))
prompt = session.template.tokenize(rt, [Message("user", sys.argv[3])], limit=rt.n_ctx)
rt.prefill(prompt.tokens)
sampler = Sampler(rt, session.params)
token = sampler.sample()
for _ in range(int(sys.argv[2]) - 1):  # as the chat loop: the first token comes from the prefill
    rt.step(token)
    token = sampler.sample()
"""


def command(kind: str, model: str, n: int, sampling: list[str]) -> list[str]:
    py = sys.executable
    if kind in LOOKUP:
        return lookup_command(kind, model, n, sampling)
    if kind == "bare":
        return [py, "-c", BARE, model, str(n), PROMPT]
    chat = [py, "-m", "llmcli", "chat", "-m", model, *sampling, "-n", str(n), "-t", "1", "--ctx", "512"]
    return chat + (["--json"] if kind == "json" else []) + [PROMPT]


HERE = Path(__file__).resolve().parent
# chat's sampling flags: greedy (the budget's temperature 0) or the default chain with a fixed seed.
SAMPLING = {"greedy": ["--temp", "0"], "default": ["--seed", "1"]}

# llama_decode tail-calls this method: callgrind sees no llama_decode frame of its own.
DECODE = "llama_context::decode(llama_batch const&)"


def callgrind(cmd: list[str], out: Path, env: dict[str, str]) -> tuple[int, int]:
    """(all instructions, those inside llama_decode) of one run."""
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *cmd],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    report = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(out)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    total = decode = 0
    for line in report.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\(?[\d.%\s)]*\s*(?:\S+:)?(\S+)", line)
        if not m:
            continue
        count = int(m.group(1).replace(",", ""))
        if "PROGRAM TOTALS" in line:
            total = count
        elif DECODE in line and not decode:  # llama_decode, inlined
            decode = count
    return total, decode


def parts(out: Path) -> list[tuple[str, Path]]:
    """The dumped parts of one run in order, each with its trigger ("before"/"after" llama_decode)."""
    found = []
    for path in out.parent.glob(out.name + ".*"):
        head = path.read_text(errors="replace")[:2000]
        trigger = re.search(r"^desc: Trigger: --dump-(before|after)=", head, re.M)
        if trigger and path.suffix[1:].isdigit():
            found.append((int(path.suffix[1:]), trigger.group(1).lower(), path))
    return [(kind, path) for _, kind, path in sorted(found)]


def part_total(path: Path) -> int:
    m = re.search(r"^(?:summary|totals): (\d+)", path.read_text(errors="replace"), re.M)
    return int(m.group(1)) if m else 0


def profile(cmd: list[str], out: Path, env: dict[str, str], top: int) -> None:
    """The mean instructions between two llama_decode calls and the functions they go to."""
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--dump-before={DECODE}", f"--dump-after={DECODE}",
         f"--callgrind-out-file={out}", *cmd],
        env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    summarize(out, top)


def summarize(out: Path, top: int) -> None:
    """The mean of a run's parts between two llama_decode calls, and the functions it goes to."""
    # The first part is start-up; then come the parts between prefill chunks and before the first
    # decode step (the sampler made, the first token's work): dropped as outliers, far above the median.
    sizes = [(part_total(path), path) for kind, path in parts(out) if kind == "before"][1:]
    median = sorted(size for size, _ in sizes)[len(sizes) // 2] if sizes else 0
    between = [path for size, path in sizes if size <= 5 * median]
    if not between:
        raise SystemExit("decode_overhead: no decode-loop parts; decode more tokens (--tokens)")
    per_function: dict[str, int] = {}
    total = 0
    for path in between:
        report = subprocess.run(
            ["callgrind_annotate", "--inclusive=no", "--threshold=100", str(path)],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        for line in report.splitlines():
            m = re.match(r"\s*([\d,]+)\s+\(\s*([\d.]+)%\)\s+(.*)", line)
            if not m:
                continue
            count = int(m.group(1).replace(",", ""))
            if "PROGRAM TOTALS" in line:
                total += count
            elif float(m.group(2)) < 99.9:  # a frame still on the stack at a dump is charged its callees
                name = re.sub(r"^\S*/(?=[^/\s]+:)", "", m.group(3).split(" [")[0])  # the file, no dirs
                per_function[name] = per_function.get(name, 0) + count
    per_function["(frames on the stack at the dumps: mostly the interpreter)"] = total - sum(
        per_function.values()
    )
    n = len(between)
    print(f"{n} tokens: {total / n / 1e6:.3f} M instructions a token between two llama_decode calls")
    for name, count in sorted(per_function.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{count / n / 1e3:9.1f} k  {name[:150]}")


# --draft lookup: a copy task (the 135M model fixes typos in a text it mostly copies) run drafted and
# plain; the reply runs past --long tokens. The disk prefix cache is off: saving the KV state at
# release costs more per token of context than the decode loop and would hide it.
LOOKUP = {"lookup": "lookup", "lookup-plain": "none"}


def lookup_prompt() -> str:
    sys.path.insert(0, str(HERE))
    from lookup_vs_plain import story, with_typos

    return f"{with_typos(story(4))}\n\nFix the typos in this text. Reply with the corrected text only."


def lookup_command(kind: str, model: str, n: int, sampling: list[str]) -> list[str]:
    chat = [sys.executable, "-m", "llmcli", "chat", "-m", model, *sampling, "-n", str(n), "-t", "1"]
    return [*chat, "--ctx", "1024", "--no-cache", "--draft", LOOKUP[kind], "--json", lookup_prompt()]


def exclusive(out: Path) -> dict[str, int]:
    """Instructions per function (exclusive) of one callgrind run."""
    report = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--threshold=100", str(out)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    counts: dict[str, int] = {}
    for line in report.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*)", line)
        if m and "PROGRAM TOTALS" not in line:
            name = re.sub(r"^\S*/(?=[^/\s]+:)", "", m.group(2).split(" [")[0])
            counts[name] = counts.get(name, 0) + int(m.group(1).replace(",", ""))
    return counts


def lookup_rows(
    model: str, short: int, long: int, sampling: list[str], tmp: str, env: dict[str, str]
) -> None:
    """Drafted and plain decoding of the copy prompt: instructions outside llama_decode per emitted
    token (the slope between a short and a long reply), and the functions outside llama_decode's
    own tree whose counts grow the most with the reply."""
    extra = long - short
    for kind in LOOKUP:
        outs = [Path(tmp) / f"{kind}.{n}" for n in (short, long)]
        (t0, d0), (t1, d1) = (
            callgrind(lookup_command(kind, model, n, sampling), out, env)
            for n, out in zip((short, long), outs, strict=True)
        )
        per, dec = (t1 - t0) / extra, (d1 - d0) / extra
        print(
            f"{kind:<12} {per / 1e6:8.3f} M instr/token  llama_decode {dec / 1e6:8.3f} M  "
            f"rest {(per - dec) / 1e6:7.3f} M (copy prompt, per emitted token)",
            flush=True,
        )
        before, after = (exclusive(out) for out in outs)
        grown = {name: (after[name] - before.get(name, 0)) / extra for name in after}
        # The files of llama_decode's tree: ggml and llama.cpp's context, graph, model and KV cache.
        inside = r"ggml|sgemm|quants|ops\.cpp|vec\.|llama-(context|graph|model|kv|batch|memory)"
        outside = {name: g for name, g in grown.items() if not re.search(inside, name)}
        for name, g in sorted(outside.items(), key=lambda kv: -kv[1])[:12]:
            print(f"    {g / 1e3:8.1f} k  {name[:120]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", type=int, default=16)
    parser.add_argument("--long", type=int, default=80)
    parser.add_argument("--model", default=None)
    parser.add_argument("--only", default="bare,stream,json")
    parser.add_argument(
        "--lib", default=None, help="llama.cpp without AVX-512 (default: build_native.sh --callgrind)"
    )
    parser.add_argument("--keep", default=None, help="a directory to keep the callgrind files in")
    parser.add_argument("--src", default=None, help="the llmcli source tree to measure (default: this one's)")
    parser.add_argument("--profile", default=None, help="one contestant's per-function profile instead")
    parser.add_argument("--tokens", type=int, default=12, help="the reply's length for --profile")
    parser.add_argument("--top", type=int, default=40, help="functions --profile lists")
    parser.add_argument(
        "--sampling",
        choices=list(SAMPLING),
        default="greedy",
        help="chat's sampling: greedy (--temp 0) or the default chain, seeded (bare is always greedy)",
    )
    args = parser.parse_args()
    lib = (
        args.lib
        or subprocess.run(
            ["bash", str(HERE / "build_native.sh"), "--callgrind"], check=True, capture_output=True, text=True
        ).stdout.strip()
    )
    # A fixed hash seed: start-up (imports) then costs the same in both runs and cancels out.
    env = {
        **os.environ,
        "LLAMA_CPP_LIB_PATH": lib,
        "PYTHONPATH": args.src or str(HERE.parent / "src"),
        "PYTHONHASHSEED": "0",
    }
    from llmcli.store import embedded_model_path

    model = args.model or str(embedded_model_path())
    sampling = SAMPLING[args.sampling]
    if args.profile:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(args.keep or tmp) / f"{args.profile}.parts"
            profile(command(args.profile, model, args.tokens, sampling), out, env, top=args.top)
        return 0
    extra = args.long - args.short
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = args.keep or tmp
        for kind in args.only.split(","):
            if kind == "lookup":
                lookup_rows(model, args.short, args.long, sampling, tmp, env)
                continue
            (t0, d0), (t1, d1) = (
                callgrind(command(kind, model, n, sampling), Path(tmp) / f"{kind}.{n}", env)
                for n in (args.short, args.long)
            )
            per, dec = (t1 - t0) / extra, (d1 - d0) / extra
            rows[kind] = (per, dec)
            share = f" ({(per - dec) / dec:.2%} of llama_decode)" if dec else ""
            print(
                f"{kind:<7} {per / 1e6:8.3f} M instr/token  llama_decode {dec / 1e6:8.3f} M  "
                f"rest {(per - dec) / 1e6:7.3f} M{share}",
                flush=True,
            )
    if "bare" in rows and all(dec for _, dec in rows.values()):
        bare = rows["bare"][0]
        for kind, (per, dec) in rows.items():
            if kind != "bare":
                print(
                    f"{kind}: {(per - bare) / 1e3:.0f} k instr/token over bare "
                    f"({(per - bare) / dec:.2%} of llama_decode) -> at most "
                    f"{dec / (per - bare + dec):.3f}x of bare if instructions were time"
                )
    print(
        f"(callgrind, 1 thread, {extra} tokens between a {args.short}- and a {args.long}-token reply; "
        f"load {os.getloadavg()[0]:.1f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
