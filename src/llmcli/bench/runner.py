"""From options to rows: validate into a plan, resolve models per backend, run, pair speedups.

Every user mistake is caught here, before the first model loads, as one UsageError (exit 2).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from llmcli.bench.records import (
    BACKEND_ALIASES,
    LLAMA,
    TRANSFORMERS,
    BenchPlan,
    BenchRow,
    BenchTest,
    Progress,
)
from llmcli.engine.local.lookup import parse_draft
from llmcli.errors import UsageError
from llmcli.limits import usable_cores  # noqa: F401  (the default -t: every usable core, as a given -t)
from llmcli.offload import EVERY_LAYER, GpuLayers
from llmcli.store import Store

MAX_THREADS = 1024  # far above any machine; catches typos such as -t 22222
# What a correct list looks like, per option, for the error message.
LIST_EXAMPLES = {"-t": "1,2,4", "-p": "128,512", "--n-gen": "64,128"}


def parse_int_list(text: str, option: str, minimum: int) -> list[int]:
    """'1,2,4' -> [1, 2, 4]; anything else is a UsageError naming the option and an example."""
    values: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        try:
            value = int(part)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise UsageError(
                f"bad {option} list '{text}': give integers >= {minimum} separated by commas, "
                f"e.g. {option} {LIST_EXAMPLES.get(option, '1,2')}"
            )
        values.append(value)
    return list(dict.fromkeys(values))  # keep the order, drop repeats


def parse_threads(text: str | None, default: int) -> list[int]:
    if text is None:
        return [default]
    threads = parse_int_list(text, "-t", 1)
    if max(threads) > MAX_THREADS:
        raise UsageError(f"bad -t list '{text}': {max(threads)} threads is more than {MAX_THREADS}")
    return threads


def parse_backends(values: Iterable[str] | None) -> list[str]:
    names: list[str] = []
    for value in values or ["llama"]:
        for part in value.split(","):
            key = part.strip().lower()
            if key not in BACKEND_ALIASES:
                raise UsageError(
                    f"unknown backend '{part}'; choose llama or transformers (or both: llama,transformers)"
                )
            names.append(BACKEND_ALIASES[key])
    return list(dict.fromkeys(names))


def make_plan(
    *,
    n_prompt: str,
    n_gen: str,
    repetitions: int,
    threads: str | None,
    n_batch: int,
    n_ctx: int | None,
    default_threads: int,
    flash_attn: bool = True,
    warmup: bool = True,
    draft: str = "none",
    gpu_layers: GpuLayers | None = None,
) -> BenchPlan:
    prompts = parse_int_list(n_prompt, "-p", 0)
    gens = parse_int_list(n_gen, "--n-gen", 0)
    # llama-bench's shape: every non-zero -p is a pp test, every non-zero --n-gen a tg test.
    tests = [BenchTest(p, 0) for p in prompts if p] + [BenchTest(0, n) for n in gens if n]
    if not tests:
        raise UsageError(
            "nothing to measure: -p and --n-gen are both 0; give -p N for prefill or --n-gen N for decode"
        )
    if repetitions < 1:
        raise UsageError(f"-r {repetitions}: give at least 1 repetition")
    if n_batch < 1:
        raise UsageError(f"-b {n_batch}: the batch size must be at least 1")
    plan = BenchPlan(
        tests=tests,
        threads=parse_threads(threads, default_threads),
        repetitions=repetitions,
        n_batch=n_batch,
        n_ctx=n_ctx,
        flash_attn=flash_attn,
        warmup=warmup,
        draft=parse_draft(draft),
        gpu_layers=gpu_layers or EVERY_LAYER,
    )
    if plan.draft != "none" and not any(t.n_gen for t in tests):
        raise UsageError(f"--draft {plan.draft} adds a copy task of --n-gen tokens; give --n-gen N > 0")
    if n_ctx is not None and n_ctx < plan.ctx_needed:
        raise UsageError(
            f"--ctx {n_ctx} is smaller than -p + --n-gen ({max(prompts)} + {max(gens)} = {plan.ctx_needed} "
            f"tokens); give --ctx {plan.ctx_needed} or more, or leave --ctx out"
        )
    return plan


@dataclass
class Target:
    """One MODEL argument, with what each backend needs of it."""

    name: str
    gguf: str | None = None  # llama.cpp
    hf_dir: str | None = None  # transformers


def _is_hf_dir(path: Path) -> bool:
    return path.is_dir() and (path / "config.json").is_file()


def resolve_target(
    spec: str | None,
    backends: list[str],
    store: Store,
    default_model: str | None = None,
    home: Path | None = None,
) -> Target:
    """MODEL -> what to load for each backend; a missing piece is a UsageError that says what to do.

    `default_model` is $LLMCLI_MODEL and `home` $HOME (what a leading `~` names), read by the command.
    """
    from llmcli.fsutil import expand_home

    folder = (expand_home(spec, home) if home is not None else Path(spec)) if spec else None
    if folder is not None and _is_hf_dir(folder):
        hf_dir = str(folder.resolve())
        # A GGUF converted from this folder lets the two backends sit side by side.
        converted = next(
            (m for m in store.list() if m.hf_dir and Path(m.hf_dir).resolve() == Path(hf_dir)), None
        )
        if LLAMA in backends and converted is None:
            raise UsageError(
                f"{spec} is a Hugging Face folder and llama.cpp needs a GGUF: run `llmcli "
                f"convert {spec}` first, or measure it alone with --backend transformers"
            )
        return Target(
            name=converted.name if converted else Path(hf_dir).name,
            gguf=converted.path if converted else None,
            hf_dir=hf_dir,
        )
    from llmcli.model_ref import chosen_model_ref

    entry = store.resolve(chosen_model_ref(spec, default_model, home))  # ModelNotFound (exit 2) names the fix
    if TRANSFORMERS in backends and not entry.hf_dir:
        raise UsageError(
            f"{entry.name} has no Hugging Face checkpoint for the transformers backend (only GGUFs that "
            "`llmcli convert` made remember theirs); give an HF model folder as MODEL"
        )
    return Target(name=entry.name, gguf=entry.path, hf_dir=entry.hf_dir)


def check_save_path(path: Path | None) -> None:
    """--save FILE (its `~` expanded by the command) must be writable before minutes of measuring."""
    if path is not None and not path.parent.is_dir():
        raise UsageError(f"--save {path}: the folder {path.parent} does not exist; create it first")


def check_backend_installed(backends: list[str]) -> None:
    if TRANSFORMERS in backends:
        missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
        if missing:
            raise UsageError(
                f"the transformers backend needs {' and '.join(missing)}: pip install 'llmcli[transformers]'"
            )


def run(targets: list[Target], backends: list[str], plan: BenchPlan) -> Iterator[Progress | BenchRow]:
    """Every target on every backend, in order; progress events between rows."""
    for target in targets:
        for backend in backends:
            if backend == LLAMA:
                from llmcli.bench.llama import LlamaTarget, run_llama

                yield from run_llama(LlamaTarget(target.name, target.gguf or ""), plan)
                if plan.draft != "none":
                    from llmcli.bench.copy import run_copy

                    yield from run_copy(LlamaTarget(target.name, target.gguf or ""), plan, plan.draft)
            else:
                from llmcli.bench.hf import run_transformers

                yield from run_transformers(target.name, target.hf_dir or "", plan)


def run_chat(targets: list[Target], plan: BenchPlan) -> Iterator:
    """The scripted conversation (bench --chat) on every target, llama.cpp only; --n-gen: the reply length."""
    from llmcli.bench.chat import run_chat as run_one

    max_tokens = max(t.n_gen for t in plan.tests)
    if not max_tokens:
        raise UsageError("--chat needs --n-gen N > 0: the longest reply each turn may generate")
    for target in targets:
        yield from run_one(target.name, target.gguf or "", plan, max_tokens)


def pair_speedups(rows: list[BenchRow]) -> None:
    """Set `speedup` on rows that have a transformers twin (same model, test, threads).

    The transformers row is the baseline (1.0); the llama.cpp row says how many times faster it is.
    """
    key = lambda r: (r.model, r.test, r.n_threads)  # noqa: E731
    baseline = {key(r): r for r in rows if r.backend == TRANSFORMERS}
    paired = {key(r) for r in rows if r.backend != TRANSFORMERS and key(r) in baseline}
    for row in rows:
        base = baseline.get(key(row))
        if key(row) in paired and base is not None and base.avg_ts:
            row.speedup = row.avg_ts / base.avg_ts
