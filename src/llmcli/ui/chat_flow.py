"""How `llmcli chat` shows one answer: the reply on stdout as it streams, or one JSON record; stats on stderr."""

from __future__ import annotations

from llmcli.ui.output import Output
from llmcli.usecases.chat import ChatOptions


def one_shot(session, model_name: str, prompt: str, opts: ChatOptions, recorder=None) -> None:
    from llmcli.engine.events import drain, json_document
    from llmcli.ui.thinking import ThinkingStream

    out = Output()
    # Reasoning: on stderr with --show-thinking, or dimmed when both streams are a terminal; piped, hidden.
    thinking = ThinkingStream(
        out, opts.show_thinking or (not opts.json_out and out.env.stdout_isatty and out.env.stderr_isatty)
    )
    try:
        reply = drain(
            session.ask(prompt, keep_cache=False),
            # structured output is printed once it is validated
            on_text=None if opts.json_out or opts.constraint is not None else thinking.before(out.stream),
            on_notice=out.warn,
            on_reasoning=thinking.write,
        )
    finally:
        out.end_stream()  # also when cut short: what was generated is on stdout before any message
        session.close()  # ⑦ release: nothing follows a one-shot request
    thinking.end()
    stats, text = reply.stats, reply.text
    if stats is not None and stats.finish_reason == "length" and reply.reasoning and not text.strip():
        # Not a failure (-n is the user's cap, as on any cut reply: exit 0), but never a silent nothing.
        shown = "" if thinking.visible else " or use --show-thinking"
        out.warn(
            f"the reply ended inside its thinking after {stats.completion_tokens} tokens, "
            f"before any answer; raise -n{shown}"
        )
    structured = {}
    if opts.constraint is not None:
        from llmcli.engine.structured import finish

        checked = finish(opts.constraint, text, stats.finish_reason if stats else "stop")
        text, structured = checked.text, ({"data": checked.data} if opts.constraint.is_json else {})
        if not opts.json_out:
            out.write(text)  # the newline follows below, as for any reply
    if opts.json_out:
        # Logged first, so the document can name the conversation (`--cid` continues it; null: not logged).
        # Nothing has streamed, and a log that fails is one warning: the document still follows.
        logged = log_exchange(out, recorder, session, prompt, reply)
        out.json(
            {
                **json_document(text, model_name, stats, reply.reasoning),
                **structured,
                "conversation_id": logged.conversation_id if logged is not None else None,
            }
        )
    else:
        if text and not text.endswith("\n"):
            out.write("\n")
        log_exchange(
            out, recorder, session, prompt, reply
        )  # after the reply is out: a failure is one warning
    show_stats = opts.stats if opts.stats is not None else out.env.stderr_isatty
    if show_stats and stats is not None:
        from llmcli.ui.stats import stats_panel

        out.err.print(stats_panel(stats, model_name))


def log_exchange(out: Output, recorder, session, prompt: str, reply):
    """Log the exchange; a log that fails costs one warning, never the reply. The Exchange, None if not logged."""
    from llmcli.chatlog import LogWriteFailed

    if recorder is None:
        return None
    try:
        return recorder.record(session, prompt, reply)
    except LogWriteFailed as exc:
        out.warn(str(exc))
        return None
