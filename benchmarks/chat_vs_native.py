"""Prefill and decode speed of `llmcli chat` (one-shot) against llama.cpp itself, side by side.

Three contestants on the same model and thread count, interleaved round by round so a noisy
machine hurts them all alike:

  native   llama-bench, built from the llama.cpp inside the llama-cpp-python sdist: pp512, tg128,
           and tg128 at the depth where chat decodes (after its short prompt), llama-bench -d
  raw      llama-cpp-python's high-level API: Llama.eval for the prompt, Llama.generate for decode
  llmcli   `llmcli chat --json`: prefill_tps from a ~512-token prompt, decode_tps from a short one
           (decode slows as the KV cache fills, so a short prompt keeps the depth near tg128's 0)

Prints each contestant's median and the ratios llmcli/native and raw/native. The goal:
llmcli decode >= 0.95 x native tg128.

    python benchmarks/chat_vs_native.py [--rounds 3] [--threads 2] [--model PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
N_PROMPT, N_GEN = 512, 128
# Greedy SmolLM2 keeps listing for thousands of tokens on this request, so decode runs the full N_GEN.
INSTRUCTION = "List 200 animals, one per line."


def llama_bench_binary() -> str:
    if path := os.environ.get("LLAMA_BENCH"):
        return path
    script = HERE / "build_native.sh"
    if not script.exists():
        sys.exit("no llama-bench: set LLAMA_BENCH=/path/to/llama-bench or add benchmarks/build_native.sh")
    return subprocess.run(["bash", str(script)], check=True, capture_output=True, text=True).stdout.strip()


def native(binary: str, model: str, threads: int, depth: int) -> dict[str, float]:
    def run(*args: str) -> list[dict]:
        out = subprocess.run(
            [
                binary,
                "-m",
                model,
                "-t",
                str(threads),
                "-fa",
                "1",
                "-r",
                "3",
                "-b",
                "512",
                "-ub",
                "512",
                "-o",
                "json",
                *args,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        return json.loads(out.stdout)

    rows = run("-p", str(N_PROMPT), "-n", str(N_GEN))
    got = {("pp" if r["n_prompt"] else "tg"): r["avg_ts"] for r in rows}
    got["tg@depth"] = run("-p", "0", "-n", str(N_GEN), "-d", str(depth))[0]["avg_ts"]
    return got


def document_of(n_tokens: int, model: str) -> str:
    """A prompt body that the chat template turns into about n_tokens tokens."""
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig

    sentence = "The quick brown fox jumps over the lazy dog while the river keeps flowing. "
    with Runtime(model, RuntimeConfig(n_ctx=256)) as rt:
        per = len(rt.tokenize(sentence))
    overhead = 40  # system prompt and markup of the embedded template
    return sentence * max(1, (n_tokens - overhead) // per)


def llmcli_json(model: str, threads: int, document: str | None) -> dict:
    # --no-cache: every round must prefill the document (the disk prefix cache would load it from the
    # round before, and the prefill rate would be that of a dozen tokens).
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmcli",
            "chat",
            "-m",
            model,
            "--json",
            "--temp",
            "0",
            "--no-cache",
            "-n",
            str(N_GEN),
            "-t",
            str(threads),
            INSTRUCTION,
        ],
        input=document or "",
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    doc = json.loads(out)
    if doc["usage"]["completion_tokens"] < N_GEN:
        print(f"  note: llmcli stopped after {doc['usage']['completion_tokens']} tokens", file=sys.stderr)
    return doc


def llmcli_chat(model: str, threads: int, document: str) -> dict[str, float]:
    long, short = llmcli_json(model, threads, document), llmcli_json(model, threads, None)
    return {
        "pp": long["timings"]["prefill_tps"],
        "tg": short["timings"]["decode_tps"],
        "depth": short["usage"]["prompt_tokens"],
    }


def raw_llama_cpp_python(model: str, threads: int) -> dict[str, float]:
    """What a user of llama-cpp-python's high-level API gets: eval() then generate()."""
    code = f"""
import json, random, time
from llama_cpp import Llama
llm = Llama({model!r}, n_ctx=4096, n_threads={threads}, n_threads_batch={threads}, n_batch=512,
            flash_attn=True, verbose=False)
random.seed(0)
prompt = [random.randrange(100, llm.n_vocab()) for _ in range({N_PROMPT})]
t = time.perf_counter(); llm.eval(prompt); pp = {N_PROMPT} / (time.perf_counter() - t)
llm.reset()
gen = llm.generate([1, 2, 3], temp=0.0, top_k=1, reset=True)
next(gen)  # the first token comes from the prompt's logits; time the decode steps after it
t = time.perf_counter()
for i, _ in enumerate(gen):
    if i + 1 == {N_GEN}:
        break
tg = {N_GEN} / (time.perf_counter() - t)
print(json.dumps({{"pp": pp, "tg": tg}}))
"""
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", default=None, help="a GGUF (default: the embedded SmolLM2)")
    args = parser.parse_args()
    from llmcli.store import embedded_model_path

    model = args.model or str(embedded_model_path())
    binary = llama_bench_binary()
    document = document_of(N_PROMPT, model)
    depth = llmcli_json(model, args.threads, None)["usage"]["prompt_tokens"]  # where chat's decode starts
    results: dict[str, dict[str, list[float]]] = {
        k: {"pp": [], "tg": []} for k in ("native", "raw", "llmcli")
    }
    results["native"]["tg@depth"] = []
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
        for name, run in (
            ("native", lambda: native(binary, model, args.threads, depth)),
            ("raw", lambda: raw_llama_cpp_python(model, args.threads)),
            ("llmcli", lambda: llmcli_chat(model, args.threads, document)),
        ):
            t = time.perf_counter()
            got = run()
            for k in results[name]:
                results[name][k].append(got[k])
            print(
                f"  {name:<7} pp {got['pp']:8.1f} tok/s   tg {got['tg']:7.1f} tok/s   "
                f"({time.perf_counter() - t:.1f} s)",
                file=sys.stderr,
            )
    med = {name: {k: statistics.median(v) for k, v in d.items()} for name, d in results.items()}
    print(f"\nmodel {Path(model).name}, {args.threads} threads, {args.rounds} interleaved rounds, medians")
    print(f"{'':<8}{'prefill tok/s':>15}{'decode tok/s':>15}{'pp ratio':>10}{'tg ratio':>10}")
    for name in ("native", "raw", "llmcli"):
        m = med[name]
        print(
            f"{name:<8}{m['pp']:>15.1f}{m['tg']:>15.1f}{m['pp'] / med['native']['pp']:>10.3f}"
            f"{m['tg'] / med['native']['tg']:>10.3f}"
        )
    print(
        f"\nllmcli decode / native tg{N_GEN}: {med['llmcli']['tg'] / med['native']['tg']:.3f} (goal >= 0.95)"
    )
    print(
        f"llmcli decode / native tg{N_GEN} @ d{depth} (the same KV depth): "
        f"{med['llmcli']['tg'] / med['native']['tg@depth']:.3f}"
    )
    print(f"raw llama-cpp-python decode / native: {med['raw']['tg'] / med['native']['tg']:.3f}")


if __name__ == "__main__":
    main()
