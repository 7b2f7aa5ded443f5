"""`bench`: what to measure, on which models and backends (or on a server); rows out, progress by callback.

The command parses the options into `BenchOptions`, passes what it read from the process
($LLMCLI_MODEL, $HOME, the endpoint) and renders the rows; every check of the options happens here,
before the first model loads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Union

from llmcli.bench import runner
from llmcli.bench.records import LLAMA, BenchRow, Progress
from llmcli.errors import UsageError
from llmcli.offload import GpuLayers
from llmcli.store import Store
from llmcli.usecases.endpoint import refuse_endpoint_only

if TYPE_CHECKING:
    from llmcli.bench.chat import ChatRow
    from llmcli.bench.serve_stats import ServeRow
    from llmcli.engine.openai.client import Endpoint

Row = Union[BenchRow, "ChatRow", "ServeRow"]


@dataclass(frozen=True)
class BenchOptions:
    models: list[str] | None = None  # MODEL...: none means $LLMCLI_MODEL, else the embedded model
    n_prompt: str = "512"  # -p, a list
    n_gen: str = "128"  # --n-gen, a list
    repetitions: int = 5
    threads: str | None = None  # -t, a list (None: every usable core)
    n_batch: int = 512
    n_ctx: int | None = None
    backend: list[str] | None = None
    chat: bool = False  # --chat: the scripted conversation instead of pp/tg
    flash_attn: bool = True
    gpu_layers: GpuLayers | None = None  # --gpu-layers (None: every layer, llama.cpp's default)
    draft: str | None = None
    save: Path | None = None  # --save FILE: checked here, before minutes of measuring
    # With an endpoint: vLLM-style serving levels
    concurrency: str = "1"
    num_requests: int = 64
    duration: float = 60.0
    # goodput's SLOs in ms (None: not given)
    slo_ttft: float | None = None
    slo_tpot: float | None = None
    slo_e2el: float | None = None
    wait: float | None = None  # seconds a server may take to load its model (None: serve.WAIT_S)

    def endpoint_only(self) -> dict[str, object]:
        """The options that measure a server, by flag (None: not given); without one they are refused."""
        return {
            "--slo-ttft": self.slo_ttft,
            "--slo-tpot": self.slo_tpot,
            "--slo-e2el": self.slo_e2el,
            "--wait": self.wait,
        }


def run_bench(
    opts: BenchOptions,
    store: Store,
    *,
    endpoint: Endpoint | None,
    progress: Callable[[Progress], None],
    default_model: str | None = None,
    home: Path | None = None,
) -> list[Row]:
    """Measure, on the server at `endpoint` or on local models; `progress` sees every step."""
    if endpoint is not None:
        from llmcli.usecases.endpoint import refuse_local_only

        local_only = {
            "-t": opts.threads,
            "--ctx": opts.n_ctx,
            "--backend": opts.backend,
            "--chat": opts.chat or None,
            "--draft": opts.draft,
            "--gpu-layers": opts.gpu_layers,
        }
        refuse_local_only(local_only, endpoint)
        runner.check_save_path(opts.save)
        return _collect(_remote_events(endpoint, opts), progress)
    refuse_endpoint_only(opts.endpoint_only())
    plan = runner.make_plan(
        n_prompt=opts.n_prompt,
        n_gen=opts.n_gen,
        repetitions=opts.repetitions,
        threads=opts.threads,
        n_batch=opts.n_batch,
        n_ctx=opts.n_ctx,
        default_threads=runner.usable_cores(),
        flash_attn=opts.flash_attn,
        draft=opts.draft or "none",
        gpu_layers=opts.gpu_layers,
    )
    runner.check_save_path(opts.save)
    backends = runner.parse_backends(opts.backend)
    if opts.chat and backends != [LLAMA]:
        raise UsageError("--chat measures llmcli's own chat pipeline on llama.cpp; leave out --backend")
    if opts.chat and plan.draft != "none":
        raise UsageError("--draft adds a copy-task row to the pp/tg table; leave out --chat")
    runner.check_backend_installed(backends)
    targets = [runner.resolve_target(spec, backends, store, default_model, home) for spec in _specs(opts)]
    events = runner.run_chat(targets, plan) if opts.chat else runner.run(targets, backends, plan)
    rows = _collect(events, progress)
    if not opts.chat:
        runner.pair_speedups([row for row in rows if isinstance(row, BenchRow)])
    return rows


def _specs(opts: BenchOptions) -> list[str | None]:
    """MODEL...; none given is one None: the default model (or a server's only one)."""
    return list(opts.models) if opts.models else [None]


def _collect(events: Iterable, progress: Callable[[Progress], None]) -> list[Row]:
    """The rows of a run; every other event goes to `progress` as it comes."""
    rows: list[Row] = []
    for ev in events:
        if isinstance(ev, Progress):
            progress(ev)
        else:
            rows.append(ev)
    return rows


def _remote_events(server: Endpoint, opts: BenchOptions) -> Iterable:
    from llmcli.bench.runner import parse_int_list
    from llmcli.bench.serve import StartupWindow, make_serve_plan, run_serve
    from llmcli.bench.serve_stats import Slo
    from llmcli.engine.openai.models import list_models, pick_model

    prompts, gens = parse_int_list(opts.n_prompt, "-p", 1), parse_int_list(opts.n_gen, "--n-gen", 1)
    if len(prompts) > 1 or len(gens) > 1:
        raise UsageError(
            "with --endpoint give one -p (prompt words) and one --n-gen (reply tokens); "
            "sweep --concurrency instead"
        )
    plan = make_serve_plan(
        concurrency=opts.concurrency,
        num_requests=opts.num_requests,
        duration=opts.duration,
        n_prompt=prompts[0],
        n_gen=gens[0],
        slo=Slo.parse(opts.slo_ttft, opts.slo_tpot, opts.slo_e2el),
        wait=opts.wait,
    )
    # One window for the model list and the first warm-up: llama-server answers 503 to both while
    # it loads, llmcli serve lists its model at once and answers 503 to the warm-up.
    startup = StartupWindow(server, plan.wait_s)
    available = yield from startup.until_ready(lambda: list_models(server))
    targets = [pick_model(server, available, spec) for spec in _specs(opts)]
    for i, target in enumerate(targets):
        # A later model's warm-up gets a window of its own: a server may load a model when asked for it.
        yield from run_serve(server, target, plan, startup if i == 0 else None)


def run_parallel(parallel: str, models: list[str] | None, **options) -> str:
    """`bench --parallel`: B sequences decoded together by the scheduler, as llama-batched-bench
    measures them; the rows rendered in the asked format."""
    from llmcli.bench.parallel import bench_parallel

    return bench_parallel(parallel, models, **options)
