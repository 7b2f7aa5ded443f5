"""How `llmcli chat` shows one answer: the reply on stdout as it streams, or one JSON record; stats on stderr."""

from __future__ import annotations

from llmcli.environment import env
from llmcli.ui.output import Output
from llmcli.usecases.chat import ChatOptions


def one_shot(session, model_name: str, prompt: str, opts: ChatOptions) -> None:
    from llmcli.engine.events import Notice, Stats, TextDelta

    out = Output()
    parts: list[str] = []
    stats: Stats | None = None
    try:
        for event in session.ask(prompt, keep_cache=False):
            if isinstance(event, TextDelta):
                parts.append(event.text)
                if not opts.json_out:
                    out.write(event.text)
            elif isinstance(event, Notice):
                out.warn(event.text)
            elif isinstance(event, Stats):
                stats = event
    finally:
        session.close()  # ⑦ release: nothing follows a one-shot request
    text = "".join(parts)
    if opts.json_out:
        out.json({"text": text, "model": model_name, "finish_reason": stats.finish_reason,
                  "usage": stats.usage(), "timings": stats.timings(), **stats.report_extras()})
    elif text and not text.endswith("\n"):
        out.write("\n")
    show_stats = opts.stats if opts.stats is not None else env.stderr_isatty
    if show_stats and stats is not None:
        from llmcli.ui.stats import stats_panel

        out.err.print(stats_panel(stats, model_name))
