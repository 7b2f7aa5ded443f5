"""`llmcli bench`: parse options, run the library's bench, render rows. Results on stdout only."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from llmcli.commands.options import (
    DraftOpt,
    GpuLayersOpt,
    JsonOpt,
    ServerOptions,
    complete_model_names,
    environment,
    renamed_option,
    with_server,
)
from llmcli.environment import Environment

REPETITIONS = 5  # llama-bench's default


def _progress_line(ev) -> str:
    where = f"{ev.model} [{ev.backend}]"
    if ev.stage == "load":
        return f"bench: loading {where}"
    if ev.stage == "wait":  # a server still loading its model: rep 503s so far, reps seconds at most
        return f"bench: {ev.backend} is still loading its model; waiting up to {ev.reps} s ({ev.rep} x 503)"
    if not ev.n_threads:  # a server: the test is a concurrency level, the steps are requests
        step = "warm-up request" if ev.stage == "warmup" else f"{ev.rep}/{ev.reps} requests"
        return f"bench: {where} {ev.test} {step}"
    step = "warm-up" if ev.stage == "warmup" else f"run {ev.rep}/{ev.reps}"
    return f"bench: {where} t={ev.n_threads} {ev.test} {step}"


class _ProgressPrinter:
    """On a terminal, one line rewritten in place; elsewhere, one line per load and per test."""

    def __init__(self, env: Environment) -> None:
        self.stderr = env.stderr
        self.tty = env.stderr_isatty
        self.width = 0

    def show(self, ev) -> None:
        text = _progress_line(ev)
        if self.tty:
            self.stderr.write("\r" + text.ljust(self.width))
            self.width = len(text)
        elif ev.stage in ("load", "warmup") or ev.rep == 1:
            self.stderr.write(text + "\n")
        self.stderr.flush()

    def done(self) -> None:
        if self.tty and self.width:
            self.stderr.write("\r" + " " * self.width + "\r")
            self.stderr.flush()


HELP = """Measure prefill (pp) and decode (tg) tokens/s the way llama-bench does.

\b
  llmcli bench                       pp512 and tg128, default model
  llmcli bench A B -t 1,2 --json     2 models x 2 thread counts
  llmcli bench M --backend llama,transformers
                                     beside transformers, with speedup
  llmcli bench --chat                TTFT cold vs reused, overhead
  llmcli bench --draft lookup        plus a copy task, plain and drafted
  llmcli bench --endpoint URL --concurrency 1,4,16
                                     a server, like vLLM's serving benchmark:
                                     req/s, output tok/s, TTFT, ITL and latency p50/p90/p99
  llmcli bench --endpoint URL --slo-ttft 500 --slo-tpot 50
                                     plus goodput: requests/s that meet every SLO

Results go to stdout (a Markdown table, or --json, --jsonl, --csv); progress goes to stderr.
"""

# llama-bench's -o and llmcli's old -f picked the report format by value; each is a flag now.
REPORT_FLAGS = {"md": "the default (no flag)", "json": "--json", "jsonl": "--jsonl", "csv": "--csv"}


def _slo_option(flag: str, what: str) -> Any:
    """A goodput bound of `bench --endpoint`, in milliseconds."""
    return typer.Option(
        flag,
        metavar="MS",
        show_default=False,
        help=f"With --endpoint: a good request's longest {what}, for goodput.",
    )


@with_server
def bench(
    context: typer.Context,
    *,
    models: Annotated[
        Optional[list[str]],
        typer.Argument(
            metavar="MODEL",
            show_default=False,
            autocompletion=complete_model_names,
            help="GGUF paths, store names or HF folders. Default: $LLMCLI_MODEL, else the embedded model.",
        ),
    ] = None,
    n_prompt: Annotated[
        str, typer.Option("-p", "--n-prompt", help="Prompt tokens of the pp tests; a list: 128,512.")
    ] = "512",
    n_gen: Annotated[
        str,
        typer.Option(  # long only: -n is chat's --max-tokens
            "--n-gen",
            help="Generated tokens of the tg tests; a list: 64,128. With --chat: the longest reply per turn.",
        ),
    ] = "128",
    repetitions: Annotated[
        int, typer.Option("-r", "--repetitions", help="Repetitions of each test.")
    ] = REPETITIONS,
    threads: Annotated[
        Optional[str],
        typer.Option(
            "-t",
            "--threads",
            show_default=False,
            help="Thread counts, e.g. 1,2,4. Default: every usable core.",
        ),
    ] = None,
    n_batch: Annotated[
        int, typer.Option("-b", "--batch-size", help="Tokens per llama_decode call in pp.")
    ] = 512,
    n_ctx: Annotated[
        Optional[int],
        typer.Option(  # long only, as everywhere: -c is chat's --continue
            "--ctx",
            min=16,
            show_default=False,
            help="Context size in tokens. Default: -p + --n-gen (--chat: 2048).",
        ),
    ] = None,
    # Flags, not llama-bench's -o FORMAT: in llmcli -o is an output path and --format is chat's
    # constrained decoding; --json is the one JSON document every command prints.
    json_out: JsonOpt = False,
    jsonl_out: Annotated[bool, typer.Option("--jsonl", help="Print one JSON object per row.")] = False,
    csv_out: Annotated[bool, typer.Option("--csv", help="Print the rows as CSV.")] = False,
    save: Annotated[
        Optional[Path],
        typer.Option("--save", show_default=False, help="Also append the rows to this JSONL file."),
    ] = None,
    backend: Annotated[
        Optional[list[str]],
        typer.Option(
            "--backend",
            show_default=False,
            help="llama (default), transformers, or both: llama,transformers.",
        ),
    ] = None,
    chat: Annotated[
        bool,
        typer.Option("--chat", help="Scripted multi-turn chat: TTFT cold vs reused, pipeline vs raw tg."),
    ] = False,
    chart: Annotated[
        Optional[bool],
        typer.Option(
            "--chart/--no-chart",
            show_default=False,
            help="Bar chart of the rows. Default: when stdout is a terminal.",
        ),
    ] = None,
    flash_attn: Annotated[
        bool, typer.Option("--flash-attn/--no-flash-attn", help="llama.cpp flash attention.")
    ] = True,
    gpu_layers: GpuLayersOpt = None,
    draft: DraftOpt = None,
    server_options: ServerOptions,  # --endpoint, --api-key, --timeout (with_server)
    concurrency: Annotated[
        str,
        typer.Option("--concurrency", help="With --endpoint: requests in flight at once, a list: 1,4,16."),
    ] = "1",
    num_requests: Annotated[
        int,
        typer.Option(
            "--num-requests", help="With --endpoint: at most this many requests per concurrency level."
        ),
    ] = 64,
    duration: Annotated[
        float,
        typer.Option(
            "--duration",
            metavar="SECONDS",
            help="With --endpoint: no new request after this long, per level.",
        ),
    ] = 60.0,
    slo_ttft: Annotated[Optional[float], _slo_option("--slo-ttft", "time to first token")] = None,
    slo_tpot: Annotated[Optional[float], _slo_option("--slo-tpot", "time per output token")] = None,
    slo_e2el: Annotated[Optional[float], _slo_option("--slo-e2el", "end-to-end latency")] = None,
    wait: Annotated[
        Optional[float],
        typer.Option(
            "--wait",
            metavar="SECONDS",
            show_default=False,
            help="With --endpoint: how long a server still loading its model (503) is waited for "
            "before measuring. Default: 60.",
        ),
    ] = None,
    old_n: Annotated[Optional[str], renamed_option("-n", now="--n-gen")] = None,
    old_c: Annotated[Optional[str], renamed_option("-c", now="--ctx")] = None,
    old_format: Annotated[Optional[str], renamed_option("-f", "--format", now=REPORT_FLAGS)] = None,
    old_output: Annotated[Optional[str], renamed_option("-o", "--output", now=REPORT_FLAGS)] = None,
    parallel: Annotated[
        Optional[str],
        typer.Option(
            "--parallel",
            show_default=False,
            help="B sequences decoded together, a list: 1,2,4,8; rows as llama-batched-bench's "
            "(S_TG: decode tok/s).",
        ),
    ] = None,
) -> None:
    from llmcli.store import Store
    from llmcli.usecases.bench import BenchOptions, run_bench

    out_format = _report_format(json=json_out, jsonl=jsonl_out, csv=csv_out)
    env = environment(context)
    save = env.expand_user(save) if save is not None else None
    server = server_options.endpoint(env)
    opts = BenchOptions(
        models=models,
        n_prompt=n_prompt,
        n_gen=n_gen,
        repetitions=repetitions,
        threads=threads,
        n_batch=n_batch,
        n_ctx=n_ctx,
        backend=backend,
        chat=chat,
        flash_attn=flash_attn,
        gpu_layers=gpu_layers,
        draft=draft,
        save=save,
        concurrency=concurrency,
        num_requests=num_requests,
        duration=duration,
        slo_ttft=slo_ttft,
        slo_tpot=slo_tpot,
        slo_e2el=slo_e2el,
        wait=wait,
    )
    if parallel is not None:
        from llmcli.usecases.bench import run_parallel

        others = {
            "--endpoint": server,
            "--chat": chat,
            "--backend": backend,
            "--draft": draft,
            "--save": save,
            "-r": repetitions != REPETITIONS,  # llama-batched-bench measures each B once
            **{flag: value is not None for flag, value in opts.endpoint_only().items()},
        }
        env.stdout.write(
            run_parallel(
                parallel,
                models,
                n_prompt=n_prompt,
                n_gen=n_gen,
                threads=threads,
                n_ctx=n_ctx,
                n_batch=n_batch,
                flash_attn=flash_attn,
                gpu_layers=gpu_layers,
                out_format=out_format,
                store_root=env.store_root,
                default_model=env.default_model,
                conflicts=others,
                home=env.home,
            )
        )
        return
    progress = _ProgressPrinter(env)
    try:
        rows = run_bench(
            opts,
            Store(env.store_root),
            endpoint=server,
            progress=progress.show,
            default_model=env.default_model,
            home=env.home,
        )
    finally:
        progress.done()
    _emit(env, rows, out_format, save, chart)


def _report_format(**flags: bool) -> str:
    """--json, --jsonl or --csv (at most one) -> the report's format; none: the Markdown table."""
    from llmcli.errors import UsageError

    given = [name for name, on in flags.items() if on]
    if len(given) > 1:
        raise UsageError(f"give one report format, not {' and '.join('--' + g for g in given)}")
    return given[0] if given else "md"


def _emit(env: Environment, rows: list, out_format: str, save: Path | None, chart: bool | None) -> None:
    from llmcli.bench import report

    env.stdout.write(report.render(rows, out_format))
    env.stdout.flush()
    for row in rows:  # the table counts failed requests; a person needs to know why (--json has it too)
        if getattr(row, "failed", 0) and getattr(row, "first_error", ""):
            env.stderr.write(f"llmcli: {row.failed} requests failed; the first: {row.first_error}\n")
    if save is not None:
        with open(save, "a", encoding="utf-8") as fh:
            fh.write(report.to_jsonl(rows))
    if chart or (chart is None and env.stdout_isatty):
        # After the table on a terminal; on stderr when stdout is data for a program.
        stream = env.stdout if env.stdout_isatty and out_format == "md" else env.stderr
        stream.write("\n" + report.bar_chart(rows))
        stream.flush()


bench.__doc__ = HELP
