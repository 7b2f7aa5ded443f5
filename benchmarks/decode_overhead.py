"""Per-token work around llama_decode, counted in instructions (callgrind), robust on a loaded machine.

Wall-clock ratios need an idle machine; instruction counts do not. This runs each contestant under
`valgrind --tool=callgrind` twice, with a short and a long reply, and divides the difference by
the extra tokens: the slope is the cost of one more decoded token, with start-up, model load and
prefill cancelled out. Contestants:

  bare     the floor: llama_decode + the native sampler chain, one ctypes call each, nothing else
  stream   `llmcli chat PROMPT` as a user runs it, reply streamed to stdout (a pipe to /dev/null)
  json     `llmcli chat --json PROMPT`, the path benchmarks/chat_vs_native.py times
  serve    (--profile only) `llmcli serve -t 1` under valgrind, one client outside it streaming
           /v1/chat/completions: the engine thread's work between two decode calls
  engine   (--profile only) serve's engine thread alone (Engine, Model, one streamed chat request, its
           events handed to an event loop that never runs): the serve row without the loop's work
  batch64  (--profile only) the engine's Scheduler stepping 64 sequences of one short prompt: the
           instructions outside llama_decode in a step, / 64 (per sequence per step)
  lookup   `llmcli chat --draft lookup` on a copy prompt (a text with typos to fix), against plain
           `llmcli chat` on the same prompt, both with --no-cache; per emitted token, with the
           functions whose counts grow with the reply (see lookup_rows)

`--profile KIND` instead runs one contestant once, with a callgrind profile part dumped at each
entry to and exit from llama_decode: the parts between two calls are exactly the work of one token
outside llama_decode. It prints their mean and the functions they spend it in (exclusive), over the
decode loop's steady tokens (the first parts hold start-up and the prefill). Collection is off
inside llama_decode (--toggle-collect, which callgrind keeps per thread), so the parts dumped at
its exits hold what other threads did meanwhile, and count too (serve counts each thread apart).

It prints each one's instructions per token, the part inside llama_decode, and the rest: the
Python overhead per token, also as a fraction of llama_decode's cost (at 1 thread, where no
thread spins at a barrier; the overhead does not depend on the thread count, llama_decode's
instructions hardly do).

valgrind cannot run AVX-512 code, so the children load llama.cpp built without it
(`benchmarks/build_native.sh --callgrind`, the same llama.cpp as the wheel, through
LLAMA_CPP_LIB_PATH): llama_decode's own count is that build's, the Python overhead is the same.

    python benchmarks/decode_overhead.py [--short 16] [--long 80] [--model PATH] [--only stream,json]
                                         [--lib DIR] [--src DIR] [--profile KIND [--tokens 12]]
                                         [--pick default|host|graph]  (batch64's greedy picks)
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
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


# The Scheduler as serve's engine thread steps it, B sequences of one prompt (the first prefills it,
# the others share its cells), every event consumed. A step of 64 under callgrind's counters took
# 25 minutes on this loaded 2-core machine: llama_decode runs uninstrumented (callgrind_marks.c,
# through the scheduler's own binding), few steps (argv[2]) and a small context.
BATCH = """
import ctypes, sys, types
from llmcli.engine.local.runtime import Runtime, RuntimeConfig
from llmcli.engine.local.scheduler import Scheduler
from llmcli.engine.local.scheduler_config import SchedulerConfig
from llmcli.engine.local.sequence import Request
from llmcli.engine.sampling import SamplingParams
B, steps = 64, int(sys.argv[2])
rt = Runtime(sys.argv[1], RuntimeConfig(n_ctx=B * 32, n_threads=1, n_seq_max=B, kv_unified=True))
sched = Scheduler(rt, SchedulerConfig(greedy_in_graph={"host": False, "graph": True}.get(sys.argv[6])))
marks, ll = ctypes.CDLL(sys.argv[5]), sched.ll
def decode(ctx, batch):
    marks.mark_before_decode()
    try:
        return ll.llama_decode(ctx, batch)
    finally:
        marks.mark_after_decode()
sched.ll = types.SimpleNamespace(**{**vars(ll), "llama_decode": decode})
prompt = rt.tokenize(sys.argv[3], add_special=True)
params = SamplingParams(temperature=0.0) if sys.argv[4] == "greedy" else SamplingParams(seed=1)
seqs = [sched.submit(Request(prompt, params, max_tokens=steps, ignore_eog=True)) for _ in range(B)]
text = [[] for _ in range(B)]
while sched.busy:
    for event in sched.step():
        text[event.seq.id].append(event.text)
"""
BATCH_SIZE = 64

# serve's engine thread alone, as `llmcli serve` runs it (Engine, Model, one streamed chat request,
# each event posted to an event loop's mailbox), but the loop never runs: none of its work (the chunk,
# the socket) lands between two decode calls, as under `--profile serve` it may. (Nor is the mailbox
# drained: its wake-up byte is written once, not once a token.)
ENGINE = """
import asyncio, sys, threading
from llmcli.engine.messages import Message
from llmcli.engine.sampling import SamplingParams
from llmcli.serve.config import ServeConfig
from llmcli.serve.engine import Engine, Job
from llmcli.serve.mailbox import Mailbox
from llmcli.serve.metrics import ServeMetrics
from llmcli.serve.models import Model
from llmcli.serve.outcome import Outcome
from llmcli.serve.protocol import Generation
path, tokens = sys.argv[1], int(sys.argv[2])
config = ServeConfig(model_path=path, model_name="m", ctx=512, threads=1)
model = Model("m", path, config)
loop, done = asyncio.new_event_loop(), threading.Event()
post = Mailbox(loop).post
def deliver(event):
    post(print, event)
    if isinstance(event, Outcome):
        done.set()
params = SamplingParams(temperature=0.0) if sys.argv[4] == "greedy" else SamplingParams(seed=1)
gen = Generation([Message("user", sys.argv[3])], None, params, tokens, stream=True)
job = Job(gen, deliver, 0.0, "m")
job.prompt = model.prompts.prepare(gen)
engine = Engine(config, ServeMetrics(), lambda: None)
engine.start()
engine.add(model)
engine.submit(job)
done.wait()
engine.stop()
"""


def command(kind: str, model: str, n: int, sampling: list[str], pick: str = "default") -> list[str]:
    py = sys.executable
    if kind in LOOKUP:
        return lookup_command(kind, model, n, sampling)
    if kind == "bare":
        return [py, "-c", BARE, model, str(n), PROMPT]
    chain = "greedy" if sampling == SAMPLING["greedy"] else "default"
    if kind == "batch64":
        return [py, "-c", BATCH, model, str(n), PROMPT, chain, str(marks_library()), pick]
    if kind == "engine":
        return [py, "-c", ENGINE, model, str(n), PROMPT, chain]
    chat = [py, "-m", "llmcli", "chat", "-m", model, *sampling, "-n", str(n), "-t", "1", "--ctx", "512"]
    return chat + (["--json"] if kind == "json" else []) + [PROMPT]


HERE = Path(__file__).resolve().parent
# chat's sampling flags: greedy (the budget's temperature 0) or the default chain with a fixed seed.
SAMPLING = {"greedy": ["--temp", "0"], "default": ["--seed", "1"]}

# llama_decode tail-calls this method: callgrind sees no llama_decode frame of its own.
DECODE = "llama_context::decode(llama_batch const&)"


def marks_library() -> Path:
    """callgrind_marks.c built (once) next to the llama.cpp build, in benchmarks/.native."""
    lib = HERE / ".native" / "libcallgrind_marks.so"
    source = HERE / "callgrind_marks.c"
    if not lib.exists() or lib.stat().st_mtime < source.stat().st_mtime:
        lib.parent.mkdir(exist_ok=True)
        subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(lib), str(source)], check=True)
    return lib


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
    """The dumped parts of one run in order, each with its trigger ("before"/"after" llama_decode).
    With --separate-threads a part is a file a thread (OUT.N-TT), given in the order of the threads."""
    found = []
    for path in out.parent.glob(out.name + ".*"):
        number = re.fullmatch(r"\.(\d+)(?:-(\d+))?", path.suffix)
        if not number:
            continue
        head = path.read_text(errors="replace")[:2000]
        trigger = re.search(r"^desc: Trigger: (?:--dump-|Client Request: )(before|after)", head, re.M)
        if trigger:
            found.append((int(number.group(1)), int(number.group(2) or 0), trigger.group(1).lower(), path))
    return [(kind, path) for _, _, kind, path in sorted(found)]


def part_total(path: Path) -> int:
    # totals, not summary: after a part whose code ran uninstrumented (batch64's llama_decode), callgrind
    # 3.19 writes a summary that wrapped below zero, and the right totals.
    m = re.search(r"^totals: (\d+)", path.read_text(errors="replace"), re.M)
    return int(m.group(1)) if m else 0


# Dumps at each entry to and exit from llama_decode, nothing collected inside it (per thread).
PROFILE = [
    f"--dump-before={DECODE}",
    f"--dump-after={DECODE}",
    f"--toggle-collect={DECODE}",
    "--collect-atstart=yes",  # --toggle-collect alone turns it off
]


def profile(
    cmd: list[str], out: Path, env: dict[str, str], top: int, per: int = 1, marked: bool = False
) -> None:
    """The mean instructions between two llama_decode calls and the functions they go to."""
    subprocess.run(
        ["valgrind", "--tool=callgrind", *([] if marked else PROFILE), f"--callgrind-out-file={out}", *cmd],
        env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    # A batch's first decode step samples every sequence's first token (stats, forks): no steady step.
    summarize(groups(parts(out))[1 if per > 1 else 0 :], top, per)


def groups(found: list[tuple[str, Path]]) -> list[list[Path]]:
    """The parts of each llama_decode call: the one dumped at its entry (the work since the last call
    ended) and the one at its exit (other threads' work meanwhile). The first holds start-up."""
    out: list[list[Path]] = []
    last = ""
    for kind, path in found:
        start = path.suffix.partition("-")[0]  # the part's number: its thread files go together
        if (kind == "before" and start != last) or not out:
            out.append([])
            last = start if kind == "before" else ""
        out[-1].append(path)
    return out[1:]


def summarize(calls: list[list[Path]], top: int, per: int = 1) -> float:
    """The mean of a run's llama_decode intervals, and the functions they go to; `per`: the tokens
    one interval decodes (the sequences of a batch)."""
    # The intervals around the prefill (the sampler made, the first token's work) are outliers, far
    # above the median: dropped.
    sizes = [(sum(part_total(path) for path in call), call) for call in calls]
    median = sorted(size for size, _ in sizes)[len(sizes) // 2] if sizes else 0
    between = [call for size, call in sizes if size <= 5 * median]
    if not between:
        raise SystemExit("decode_overhead: no decode-loop parts; decode more tokens (--tokens)")
    per_function: dict[str, int] = {}
    total = 0
    for path in (path for call in between for path in call):
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
                total += part_total(path)
            elif float(m.group(2)) < 99.9:  # a frame still on the stack at a dump is charged its callees
                name = re.sub(r"^\S*/(?=[^/\s]+:)", "", m.group(3).split(" [")[0])  # the file, no dirs
                per_function[name] = per_function.get(name, 0) + count
    per_function["(frames on the stack at the dumps: mostly the interpreter)"] = total - sum(
        per_function.values()
    )
    n = len(between) * per
    unit = "a token" if per == 1 else f"per sequence per step ({len(between)} steps of {per})"
    print(f"{n} tokens: {total / n / 1e6:.3f} M instructions {unit} outside llama_decode")
    for name, count in sorted(per_function.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{count / n / 1e3:9.1f} k  {name[:150]}")
    return total / n


def profile_serve(model: str, out: Path, env: dict[str, str], top: int, tokens: int, sampling: str) -> None:
    """`llmcli serve` under callgrind, one streamed chat completion from outside it; the engine
    thread's work between the llama_decode calls of that request's reply. Each thread is counted
    apart (--separate-threads), and a part dumped at a decode call holds the calling thread's work
    only: valgrind runs one thread at a time and hands its lock to the event loop at the engine's
    wake-up write or at the end of a time slice, or not, so a part of every thread held the loop's
    work for a token or not, 0.13 M against 0.45 M (the README's "before" rows were counted so)."""
    import httpx

    home = out.parent / "home"
    home.mkdir(exist_ok=True)
    # A prefill under callgrind takes minutes: no --timeout may cut the reply.
    serve = [sys.executable, "-m", "llmcli", "serve", model, "--port", "0", "-t", "1", "--ctx", "512"]
    serve += ["--timeout", "86400"]
    log = out.parent / "serve.log"
    grind = ["valgrind", "--tool=callgrind", *PROFILE, "--separate-threads=yes"]
    grind += [f"--callgrind-out-file={out}", f"--log-file={log}"]
    proc = subprocess.Popen(
        grind + serve,
        env={**env, "LLMCLI_HOME": str(home)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        url = None
        for line in proc.stderr:  # its first line says where it listens
            m = re.search(r"on (http://127\.0\.0\.1:\d+) ", line)
            if m:
                url = m.group(1)
                break
        if url is None:
            raise SystemExit(f"decode_overhead: serve did not start: {log.read_text()[-2000:]}")
        with httpx.Client(base_url=url, timeout=1800) as client:
            while client.get("/health").status_code != 200:  # the model loads after the port opens
                time.sleep(1)
            idle = idle_rate(proc.pid, out)
            before = len(parts(out))
            body = {"messages": [{"role": "user", "content": PROMPT}], "stream": True, "max_tokens": tokens}
            body |= {"temperature": 0} if sampling == "greedy" else {"seed": 1}
            times = []
            with client.stream("POST", "/v1/chat/completions", json=body) as response:
                times = [time.monotonic() for line in response.iter_lines() if line.startswith("data: {")]
            found = parts(out)[before:]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(600)
    # The last call's interval and what followed it (the finish, the last chunks) are no token's.
    calls = groups(found)[1:]
    print(f"{len(times)} chunks streamed; {len(calls) + 1} llama_decode calls")
    # Between a decode's exit and the next one's entry the engine thread samples, steps and posts the
    # token's events (the part dumped at entry); the part dumped at exit holds nothing of it.
    print("between the decode calls, the engine thread:")
    summarize(calls, top)
    # Timers fire by the wall clock (uvicorn's tick every 0.1 s, a call's poll every 0.25 s), and under
    # callgrind a token takes seconds, not milliseconds: most of the parts dumped at the decode exits
    # are theirs. (Their rate times the seconds does not subtract them: while the engine thread holds
    # valgrind's lock they fire less often than when the server idles.)
    seconds = (times[-2] - times[1]) / max(len(times) - 3, 1)  # the reply's tokens, not the role/last chunks
    print(f"idle server: {idle / 1e6:.3f} M instructions a second; a token took {seconds:.2f} s here")


def idle_rate(pid: int, out: Path, seconds: float = 20.0) -> float:
    """Instructions a second of the idle server (a part dumped at each end of `seconds` of waiting)."""
    subprocess.run(["callgrind_control", "--dump=idle", str(pid)], check=True, capture_output=True)
    t0 = time.monotonic()
    time.sleep(seconds)
    subprocess.run(["callgrind_control", "--dump=idle", str(pid)], check=True, capture_output=True)
    elapsed = time.monotonic() - t0
    numbered = [(re.fullmatch(r"\.(\d+)(?:-\d+)?", p.suffix), p) for p in out.parent.glob(out.name + ".*")]
    dumped = [(int(m.group(1)), p) for m, p in numbered if m]
    last = max(n for n, _ in dumped)
    return sum(part_total(p) for n, p in dumped if n == last) / elapsed  # its files, a thread each


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
    parser.add_argument(
        "--pick",
        choices=("default", "host", "graph"),
        default="default",
        help="batch64's greedy picks: the scheduler's default, numpy's argmax, or in llama.cpp's graph",
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
            if args.profile == "serve":
                profile_serve(model, out, env, args.top, args.tokens, args.sampling)
            else:
                per = BATCH_SIZE if args.profile == "batch64" else 1
                marked = args.profile == "batch64"  # its own marks (callgrind_marks.c)
                cmd = command(args.profile, model, args.tokens, sampling, args.pick)
                profile(cmd, out, env, args.top, per, marked)
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
