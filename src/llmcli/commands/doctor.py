"""`llmcli doctor`: whether llama.cpp's build fits this machine, and a one-token decode in a child."""

from __future__ import annotations

import typer

from llmcli.commands.options import JsonOpt, environment


def doctor(context: typer.Context, json_out: JsonOpt = False) -> None:
    """Check llama.cpp on this machine: its build's features, the CPU's, the devices, and one decoded token.

    The decode runs in a child process, so a llama.cpp that crashes on this CPU is reported in one
    line naming the fix (exit 1) instead of killing llmcli. docs/build.md says what the install builds.
    """
    from llmcli.errors import RuntimeFailure, UsageError
    from llmcli.model_ref import EMBEDDED_NAME
    from llmcli.store import embedded_model_path
    from llmcli.ui.output import Output
    from llmcli.usecases.doctor import doctor as check

    out = Output(environment(context))
    model = embedded_model_path()
    if model is None:
        raise UsageError(
            "the embedded model is not installed, so there is nothing to decode; run `make install`"
        )
    report = check(str(model))
    if json_out:
        out.json(report.as_json())
    else:
        verdict = report.fit
        rows = [
            ("llama.cpp", f"llama-cpp-python {report.version}"),
            ("build", report.system_info or "-"),
            ("cpu", f"{report.cpu.model} ({report.cpu.arch})"),
            ("cpu flags", " ".join(report.cpu.relevant_flags()) or "-"),
            ("devices", ", ".join(f"{d['name']} ({d['description']})" for d in report.devices) or "-"),
            ("fits the cpu", verdict.text() if verdict else "-"),
            ("decode", f"{EMBEDDED_NAME}: {report.check.line()}"),
        ]
        from llmcli.display import printable

        # key and value, one line each: the build line is long, and a table would wrap it
        out.write("".join(f"{key:<14}{printable(value, 2000)}\n" for key, value in rows))
    if (problem := report.problem()) is not None:
        raise RuntimeFailure(problem)
