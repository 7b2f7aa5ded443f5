"""`llmcli bench`: parse options, run the library's bench, render rows. Results on stdout only."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from llmcli.commands.options import (
    ApiKeyOpt,
    DraftOpt,
    EndpointOpt,
    TimeoutOpt,
    complete_model_names,
    renamed_option,
)
from llmcli.environment import Environment, current


def _progress_line(ev) -> str:
    where = f"{ev.model} [{ev.backend}]"
    if ev.stage == "load":
        return f"bench: loading {where}"
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
  llmcli bench A B -t 1,2 -f json    2 models x 2 thread counts
  llmcli bench M --backend llama,transformers
                                     beside transformers, with speedup
  llmcli bench --chat                TTFT cold vs reused, overhead
  llmcli bench --draft lookup        plus a copy task, plain and drafted
  llmcli bench --endpoint URL --concurrency 1,4,16
                                     a server, like vLLM's serving benchmark:
                                     req/s, output tok/s, TTFT and latency p50/p90/p99

Results go to stdout (md, json, jsonl, csv); progress goes to stderr.
"""


def bench(
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
        typer.Option(
            "-n",
            "--n-gen",
            help="Generated tokens of the tg tests; a list: 64,128. With --chat: the longest reply per turn.",
        ),
    ] = "128",
    repetitions: Annotated[int, typer.Option("-r", "--repetitions", help="Repetitions of each test.")] = 5,
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
        typer.Option(
            "-c", "--ctx", show_default=False, help="Context size. Default: -p + -n (--chat: 2048)."
        ),
    ] = None,
    # -f, not llama-bench's -o: in llmcli, -o is always an output path (convert -o FILE).
    out_format: Annotated[
        str, typer.Option("-f", "--format", metavar="FORMAT", help="md, json, jsonl or csv.")
    ] = "md",
    old_output: Annotated[Optional[str], renamed_option("-o", "--output", now="-f/--format")] = None,
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
    draft: DraftOpt = None,
    endpoint: EndpointOpt = None,
    api_key: ApiKeyOpt = None,
    timeout: TimeoutOpt = None,
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
    from llmcli.bench import report, runner
    from llmcli.bench.chat import ChatRow
    from llmcli.bench.records import LLAMA, BenchRow
    from llmcli.engine.openai_http import Endpoint
    from llmcli.errors import UsageError
    from llmcli.store import Store

    if out_format not in report.FORMATS:
        raise UsageError(f"unknown output format '{out_format}'; choose one of {', '.join(report.FORMATS)}")
    env = current()
    server = Endpoint.from_options(endpoint or env.endpoint, api_key, timeout, default_api_key=env.api_key)
    if parallel is not None:
        from llmcli.bench.parallel import bench_parallel

        others = {
            "--endpoint": server,
            "--chat": chat,
            "--backend": backend,
            "--draft": draft,
            "--save": save,
        }
        env.stdout.write(
            bench_parallel(
                parallel,
                models,
                n_prompt=n_prompt,
                n_gen=n_gen,
                threads=threads,
                n_ctx=n_ctx,
                n_batch=n_batch,
                flash_attn=flash_attn,
                out_format=out_format,
                store_root=env.store_root,
                default_model=env.default_model,
                conflicts=others,
            )
        )
        return
    if server is not None:
        local_only = {
            "-t": threads,
            "-c": n_ctx,
            "--backend": backend,
            "--chat": chat or None,
            "--draft": draft,
        }
        given = [name for name, value in local_only.items() if value is not None]
        if given:
            raise UsageError(f"{', '.join(given)} measure the local engine; leave them out with --endpoint")
        runner.check_save_path(save)
        rows = _bench_remote(server, models, n_prompt, n_gen, concurrency, num_requests, duration)
        _emit(env, rows, out_format, save, chart)
        return
    plan = runner.make_plan(
        n_prompt=n_prompt,
        n_gen=n_gen,
        repetitions=repetitions,
        threads=threads,
        n_batch=n_batch,
        n_ctx=n_ctx,
        default_threads=runner.usable_cores(),
        flash_attn=flash_attn,
        draft=draft or "none",
    )
    runner.check_save_path(save)
    backends = runner.parse_backends(backend)
    if chat and backends != [LLAMA]:
        raise UsageError("--chat measures llmcli's own chat pipeline on llama.cpp; leave out --backend")
    if chat and plan.draft != "none":
        raise UsageError("--draft adds a copy-task row to the pp/tg table; leave out --chat")
    runner.check_backend_installed(backends)
    store = Store(env.store_root)
    targets = [runner.resolve_target(spec, backends, store, env.default_model) for spec in (models or [None])]

    progress = _ProgressPrinter(env)
    rows: list[BenchRow | ChatRow] = []
    events = runner.run_chat(targets, plan) if chat else runner.run(targets, backends, plan)
    try:
        for ev in events:
            if isinstance(ev, BenchRow | ChatRow):
                rows.append(ev)
            else:
                progress.show(ev)
    finally:
        progress.done()
    if not chat:
        runner.pair_speedups(rows)

    _emit(env, rows, out_format, save, chart)


def _emit(env: Environment, rows: list, out_format: str, save: Path | None, chart: bool | None) -> None:
    from llmcli.bench import report

    env.stdout.write(report.render(rows, out_format))
    env.stdout.flush()
    if save is not None:
        with open(save, "a", encoding="utf-8") as fh:
            fh.write(report.to_jsonl(rows))
    if chart or (chart is None and env.stdout_isatty):
        # After the table on a terminal; on stderr when stdout is data for a program.
        stream = env.stdout if env.stdout_isatty and out_format == "md" else env.stderr
        stream.write("\n" + report.bar_chart(rows))
        stream.flush()


def _bench_remote(
    server,
    models: list[str] | None,
    n_prompt: str,
    n_gen: str,
    concurrency: str,
    num_requests: int,
    duration: float,
) -> list:
    from llmcli.bench.runner import parse_int_list
    from llmcli.bench.serve import ServeRow, make_serve_plan, run_serve
    from llmcli.engine.openai_http import list_models, pick_model
    from llmcli.errors import UsageError

    prompts, gens = parse_int_list(n_prompt, "-p", 1), parse_int_list(n_gen, "-n", 1)
    if len(prompts) > 1 or len(gens) > 1:
        raise UsageError(
            "with --endpoint give one -p (prompt words) and one -n (reply tokens); "
            "sweep --concurrency instead"
        )
    plan = make_serve_plan(
        concurrency=concurrency,
        num_requests=num_requests,
        duration=duration,
        n_prompt=prompts[0],
        n_gen=gens[0],
    )
    available = list_models(server)
    targets = [pick_model(server, available, spec) for spec in (models or [None])]
    progress = _ProgressPrinter(current())
    rows: list[ServeRow] = []
    try:
        for target in targets:
            for ev in run_serve(server, target, plan):
                if isinstance(ev, ServeRow):
                    rows.append(ev)
                else:
                    progress.show(ev)
    finally:
        progress.done()
    return rows


bench.__doc__ = HELP
