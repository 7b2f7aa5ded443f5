"""`llmcli convert SRC`: a thin adapter over llmcli.convert.

Parses options, calls the convert use-case (which finds SRC, converts and registers), shows
progress on stderr and prints the registered name and the output path on stdout.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from llmcli.commands.options import DryRunOpt, JsonOpt, environment, outtype_option, renamed_option
from llmcli.convert.outtypes import CONVERT_DEFAULT
from llmcli.errors import Interrupted

if TYPE_CHECKING:
    from llmcli.convert.plan import ConversionPlan
    from llmcli.usecases.convert import ConvertJob


def convert(
    context: typer.Context,
    src: Annotated[
        str,
        typer.Argument(
            metavar="SRC",
            show_default=False,
            help="A Hugging Face model folder, or a repo id already in the HF cache.",
        ),
    ],
    # --outfile and --outtype: the names llama.cpp's convert_hf_to_gguf.py uses
    output: Annotated[
        Optional[Path],
        typer.Option(  # noqa: UP045 (typer reads the annotation)
            "-o",
            "--output",
            "--outfile",
            metavar="PATH",
            show_default=False,
            help="Where to write the GGUF (default: the store).",
        ),
    ] = None,
    outtype: Annotated[str, outtype_option(CONVERT_DEFAULT)] = CONVERT_DEFAULT,
    name: Annotated[
        Optional[str],
        typer.Option(  # noqa: UP045
            "--name", help="The name to register (default: folder name + outtype)."
        ),
    ] = None,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    old_t: Annotated[Optional[str], renamed_option("-t", now="-q/--outtype")] = None,  # noqa: UP045
) -> None:
    """Convert a Hugging Face safetensors checkpoint to GGUF and register it."""
    from llmcli.store import Store, model_name
    from llmcli.ui.convert_progress import ConvertProgress
    from llmcli.units import format_bytes, format_params
    from llmcli.usecases import convert as usecase

    env = environment(context)
    src = str(env.expand_user(src)) if src.startswith("~") else src  # a repo id keeps its text
    output = env.expand_user(output) if output is not None else None
    store = Store(env.store_root)
    job = usecase.prepare(
        src, store, outtype=outtype, name=model_name(name) if name is not None else None, output=output
    )
    if dry_run and json_out:
        from llmcli.ui.output import Output

        Output(env).json(_plan_record(usecase.plan(job), job))
        return
    if dry_run:
        _print_plan(env.stdout, usecase.plan(job))
        return
    try:
        with ConvertProgress(env.stderr) as progress:
            done = usecase.run(job, store, progress=progress.update)
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted; nothing was written to {job.out}") from None
    result = done.result
    env.stderr.write(
        f"converted {result.hf_arch} ({format_params(result.n_params)} params, {result.n_tensors} tensors) "
        f"to {job.outtype.name} in {result.seconds:.1f}s: {format_bytes(result.size)}\n"
    )
    check = result.pre_check
    if check is not None and check.verified_by == "behaviour":
        env.stderr.write(f"tokenizer: pre-tokenizer {check.describe()}\n")
    if json_out:
        from llmcli.ui.output import Output
        from llmcli.usecases.record import ModelRecord, file_sha256

        record = asdict(ModelRecord.of(done.entry, file_sha256(result.path)))
        if check is not None:  # convert's own addition to the record: how the tokenizer was matched
            record["tokenizer"] = {"model": result.tokenizer.split("/")[0], **asdict(check)}
        Output(env).json(record)
        return
    env.stdout.write(f"{done.entry.name}\t{result.path}\n")
    env.stdout.flush()


def _print_plan(out, plan) -> None:
    from llmcli.units import format_bytes as mb

    vocab = plan.vocab
    out.write(f"source:        {plan.src}\n")
    out.write(f"architecture:  {plan.hf_arch} -> {plan.arch}\n")
    out.write(f"parameters:    {plan.n_params:,}\n")
    out.write(f"source dtypes: {', '.join(plan.source_dtypes)} ({mb(plan.source_bytes)})\n")
    out.write(
        f"tokenizer:     {vocab.model}/{vocab.pre}, {len(vocab.tokens)} tokens, "
        f"chat template: {'yes' if vocab.chat_template else 'no'}\n"
    )
    out.write(f"outtype:       {plan.outtype.name}\n")
    for note in plan.notes:
        out.write(f"note:          {note}\n")
    out.write(f"tensors:       {len(plan.tensors)}\n")
    width = max(len(t.name) for t in plan.tensors)
    for t in plan.tensors:
        src = f"{t.source.dtype:>4} {t.hf_name}" if t.source else "made by the converter"
        shape = "x".join(str(d) for d in t.shape)
        out.write(f"  {t.name:<{width}}  {t.qtype:<5} {shape:<14} {mb(t.nbytes):>11}  <- {src}\n")
    size = f"{mb(plan.estimated_size)}" + (
        "" if plan.outtype.qtype else f" (estimated; via a {mb(plan.intermediate_size)} intermediate)"
    )
    out.write(f"output size:   {size}\n")


def _plan_record(plan: ConversionPlan, job: ConvertJob) -> dict:
    """`convert --dry-run --json`: every tensor decided, where the GGUF would go and its size."""
    vocab = plan.vocab
    return {
        "src": str(plan.src),
        "hf_arch": plan.hf_arch,
        "arch": plan.arch,
        "outtype": plan.outtype.name,
        "name": job.name,
        "output": str(job.out),
        "into_store": job.into_store,
        "n_params": plan.n_params,
        "source_dtypes": plan.source_dtypes,
        "source_bytes": plan.source_bytes,
        "tied_embeddings": plan.tied_embeddings,
        "tokenizer": {
            "model": vocab.model,
            "pre": vocab.pre,
            "n_tokens": len(vocab.tokens),
            "chat_template": bool(vocab.chat_template),
        },
        "estimated_size": plan.estimated_size,  # the tensors' bytes are exact, the metadata's an estimate
        "intermediate_size": plan.intermediate_size,
        "notes": plan.notes,
        "tensors": [
            {
                "name": t.name,
                "qtype": t.qtype,
                "shape": list(t.shape),
                "nbytes": t.nbytes,
                "source": {"name": t.hf_name, "dtype": t.source.dtype} if t.source else None,
            }
            for t in plan.tensors
        ],
    }
