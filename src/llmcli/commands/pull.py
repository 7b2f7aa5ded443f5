"""`llmcli pull REPO[:QUANT]`: a Hugging Face model into the store. Progress on stderr, the name on stdout."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from llmcli.commands.options import DryRunOpt, JsonOpt, environment, outtype_option
from llmcli.convert.outtypes import PULL_DEFAULT
from llmcli.environment import Environment
from llmcli.errors import Interrupted

if TYPE_CHECKING:
    from llmcli.hub.plan import PlannedFile, PullPlan


def pull(
    context: typer.Context,
    spec: Annotated[
        str,
        typer.Argument(
            metavar="REPO[:QUANT]",
            show_default=False,
            help="A Hugging Face repo, with an optional quant tag: Org/Model-GGUF:Q4_K_M",
        ),
    ],
    revision: Annotated[
        Optional[str],
        typer.Option(  # noqa: UP045 (typer reads the annotation)
            "--revision",
            metavar="REF",
            show_default=False,
            help="Branch, tag or commit sha to pull (default: main).",
        ),
    ] = None,
    outtype: Annotated[
        Optional[str],  # noqa: UP045
        outtype_option(PULL_DEFAULT, " when the repo is a safetensors checkpoint"),
    ] = None,
    name: Annotated[
        Optional[str],
        typer.Option(  # noqa: UP045
            "--name", show_default=False, help="The model's name in the store (default: REPO:QUANT)."
        ),
    ] = None,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Download a model from Hugging Face (GGUF, or safetensors converted to GGUF), resumably and verified."""
    from llmcli.model_ref import hub_repo_ref
    from llmcli.store import Store, model_name
    from llmcli.ui.download import pull_report
    from llmcli.usecases import pull as usecase

    env = environment(context)
    ref = hub_repo_ref(spec)
    name = model_name(name) if name is not None else None
    if dry_run:
        plan = usecase.plan(ref, revision=revision, outtype=outtype)
        for note in plan.notes:  # for a person, on stderr; --json carries them too
            env.stderr.write(note + "\n")
        if json_out:
            from llmcli.ui.output import Output

            Output(env).json(_plan_record(plan, name))
        else:
            _show_plan(env, plan)
        return
    try:
        with pull_report(env.stderr, env.stderr_isatty) as report:
            pulled = usecase.pull(
                ref, Store(env.store_root), revision=revision, outtype=outtype, name=name, progress=report
            )
    except KeyboardInterrupt:
        # The bytes fetched so far stay on disk; the boundary says so and exits with 130.
        raise Interrupted("pull interrupted; run the same command again to resume where it stopped") from None
    entry = pulled.entry
    if json_out:
        from llmcli.ui.output import Output
        from llmcli.usecases.record import ModelRecord, cached_blob_sha256, file_sha256

        # The hub's checksum; offline it is the cache's blob name; a converted checkpoint is hashed here.
        sha256 = pulled.sha256 or cached_blob_sha256(entry.path) or file_sha256(entry.path)
        Output(env).json(asdict(ModelRecord.of(entry, sha256)))
        return
    # stdout carries the name alone, so that `m=$(llmcli pull ...)` works in a script.
    env.stdout.write(entry.name + "\n")
    env.stdout.flush()


def _show_plan(env: Environment, plan: PullPlan) -> None:
    from llmcli.units import format_bytes

    action = f"convert to {plan.outtype}" if plan.kind == "safetensors" else plan.quant
    out = env.stdout
    files = f"{len(plan.files)} file{'s' if len(plan.files) != 1 else ''}"
    out.write(
        f"{plan.repo_id} @ {plan.sha[:12]} ({plan.revision}): {action}, {files}, "
        f"{format_bytes(plan.total_bytes)}, {format_bytes(plan.bytes_to_fetch)} to fetch\n"
    )
    for f in plan.files:
        state = _state(f)
        shown = f"partial, {format_bytes(f.have)} on disk" if state == "partial" else state.replace("_", " ")
        out.write(f"{format_bytes(f.remote.size):>10}  {f.remote.name}  ({shown})\n")
    out.flush()


def _state(f: PlannedFile) -> str:
    if f.cached or f.have == f.remote.size:
        return "cached"
    return "partial" if f.have else "to_fetch"


def _plan_record(plan: PullPlan, name: str | None) -> dict:
    """`pull --dry-run --json`: what the pull would fetch, and under which name it would land."""
    return {
        "repo": plan.repo_id,
        "revision": plan.revision,
        "sha": plan.sha,
        "kind": plan.kind,
        "quant": plan.quant,
        "outtype": plan.outtype,
        "name": name or plan.default_name,
        "from_cache": plan.from_cache,
        "total_bytes": plan.total_bytes,
        "bytes_to_fetch": plan.bytes_to_fetch,
        "files": [
            {
                "name": f.remote.name,
                "size": f.remote.size,
                "sha256": f.remote.sha256,
                "have": f.have,
                "state": _state(f),
            }
            for f in plan.files
        ],
        "notes": plan.notes,
    }
