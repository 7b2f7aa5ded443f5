"""How `llmcli chat` shows one answer: the reply on stdout as it streams, or one JSON record; stats on stderr."""

from __future__ import annotations

from llmcli.environment import env
from llmcli.ui.output import Output
from llmcli.usecases.chat import ChatOptions


def one_shot(session, model_name: str, prompt: str, opts: ChatOptions) -> None:
    from llmcli.engine.events import drain, json_document
    from llmcli.ui.thinking import ThinkingStream

    out = Output()
    # Reasoning: on stderr with --show-thinking, or dimmed when both streams are a terminal; piped, hidden.
    thinking = ThinkingStream(out, opts.show_thinking or (not opts.json_out and env.stdout_isatty
                                                          and env.stderr_isatty))
    try:
        reply = drain(session.ask(prompt, keep_cache=False),
                      on_text=None if opts.json_out else thinking.before(out.write), on_notice=out.warn,
                      on_reasoning=thinking.write)
    finally:
        session.close()  # ⑦ release: nothing follows a one-shot request
    thinking.end()
    stats = reply.stats
    if opts.json_out:
        out.json(json_document(reply.text, model_name, stats, reply.reasoning))
    elif reply.text and not reply.text.endswith("\n"):
        out.write("\n")
    show_stats = opts.stats if opts.stats is not None else env.stderr_isatty
    if show_stats and stats is not None:
        from llmcli.ui.stats import stats_panel

        out.err.print(stats_panel(stats, model_name))
