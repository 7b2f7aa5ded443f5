"""`llmcli bench`: parse options, run the library's bench, render rows. Results on stdout only."""

from __future__ import annotations

from pathlib import Path

import typer

from llmcli.environment import env


def _progress_line(ev) -> str:
    where = f"{ev.model} [{ev.backend}]"
    if ev.stage == "load":
        return f"bench: loading {where}"
    step = "warm-up" if ev.stage == "warmup" else f"run {ev.rep}/{ev.reps}"
    return f"bench: {where} t={ev.n_threads} {ev.test} {step}"


class _ProgressPrinter:
    """On a terminal, one line rewritten in place; elsewhere, one line per load and per test."""

    def __init__(self) -> None:
        self.tty = env.stderr_isatty
        self.width = 0

    def show(self, ev) -> None:
        text = _progress_line(ev)
        if self.tty:
            env.stderr.write("\r" + text.ljust(self.width))
            self.width = len(text)
        elif ev.stage in ("load", "warmup") or ev.rep == 1:
            env.stderr.write(text + "\n")
        env.stderr.flush()

    def done(self) -> None:
        if self.tty and self.width:
            env.stderr.write("\r" + " " * self.width + "\r")
            env.stderr.flush()


def bench(
    models: list[str] = typer.Argument(None, metavar="[MODEL]...",
                                       help="GGUF paths, store names or HF folders (default: the embedded model)."),
    n_prompt: str = typer.Option("512", "-p", "--n-prompt", help="Prompt tokens for pp tests; a list: 128,512."),
    n_gen: str = typer.Option("128", "-n", "--n-gen", help="Generated tokens for tg tests; a list: 64,128."),
    repetitions: int = typer.Option(5, "-r", "--repetitions", help="Repetitions of each test."),
    threads: str = typer.Option(None, "-t", "--threads", help="Thread counts, e.g. 1,2,4 (default: usable cores)."),
    n_batch: int = typer.Option(512, "-b", "--batch-size", help="Tokens per llama_decode call during pp."),
    n_ctx: int = typer.Option(None, "-c", "--ctx-size", help="Context size (default: -p + -n)."),
    output: str = typer.Option("md", "-o", "--output", help="md, json, jsonl or csv."),
    save: Path = typer.Option(None, "--save", help="Also append the rows to this JSONL file."),
    backend: list[str] = typer.Option(None, "--backend",
                                      help="llama, transformers, or both: llama,transformers."),
    chat: bool = typer.Option(False, "--chat",
                              help="Scripted multi-turn chat: TTFT cold vs reused, pipeline vs raw tg (-n = reply length)."),
    chart: bool = typer.Option(None, "--chart/--no-chart",
                               help="Bar chart of the rows (default: when stdout is a terminal)."),
    flash_attn: bool = typer.Option(True, "--flash-attn/--no-flash-attn", help="llama.cpp flash attention."),
) -> None:
    """Measure prefill (pp) and decode (tg) tokens/s as llama-bench does."""
    from llmcli.bench import report, runner
    from llmcli.bench.chat import ChatRow
    from llmcli.bench.records import LLAMA, BenchRow
    from llmcli.errors import UsageError
    from llmcli.store import Store

    if output not in report.FORMATS:
        raise UsageError(f"unknown output format '{output}'; choose one of {', '.join(report.FORMATS)}")
    plan = runner.make_plan(n_prompt=n_prompt, n_gen=n_gen, repetitions=repetitions, threads=threads,
                            n_batch=n_batch, n_ctx=n_ctx, default_threads=runner.usable_cores(),
                            flash_attn=flash_attn)
    backends = runner.parse_backends(backend)
    if chat and backends != [LLAMA]:
        raise UsageError("--chat measures llmcli's own chat pipeline on llama.cpp; leave out --backend")
    runner.check_backend_installed(backends)
    store = Store()
    targets = [runner.resolve_target(spec, backends, store) for spec in (models or [None])]

    progress = _ProgressPrinter()
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

    env.stdout.write(report.render(rows, output))
    env.stdout.flush()
    if save is not None:
        with open(save, "a", encoding="utf-8") as fh:
            fh.write(report.to_jsonl(rows))
    if chart or (chart is None and env.stdout_isatty):
        # After the table on a terminal; on stderr when stdout is data for a program.
        stream = env.stdout if env.stdout_isatty and output == "md" else env.stderr
        stream.write("\n" + report.bar_chart(rows))
        stream.flush()
