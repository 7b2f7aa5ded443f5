"""How `llmcli chat` shows one answer: the reply on stdout as it streams, or one JSON record;
the stats on stderr."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from llmcli.environment import Environment
from llmcli.ui.output import Output
from llmcli.ui.thinking import ThinkingStream, cut_inside_thinking

if TYPE_CHECKING:
    from llmcli.chatlog import Exchange
    from llmcli.usecases.answer import Answer, AnswerHooks
    from llmcli.usecases.chat import ChatOptions
    from llmcli.usecases.tools import ToolReader


class AnswerView:
    def __init__(
        self, env: Environment, opts: ChatOptions, model_name: str, tools: ToolReader | None = None
    ) -> None:
        from llmcli.ui.tool_calls import ToolCallView

        self.out, self.opts, self.model_name = Output(env), opts, model_name
        self.tools = ToolCallView(tools, self.out) if tools is not None else None
        # Reasoning: on stderr with --show-thinking, or dimmed when both streams are a terminal;
        # piped, hidden.
        shown = opts.show_thinking or (not opts.json_out and env.stdout_isatty and env.stderr_isatty)
        self.thinking = ThinkingStream(self.out, shown)

    def hooks(self) -> AnswerHooks:
        from llmcli.usecases.answer import AnswerHooks

        # Structured output is printed once it is validated; --json prints one document at the end.
        streams = not self.opts.json_out and self.opts.constraint is None
        on_text = self.thinking.before(self.out.stream) if streams else None

        def end() -> None:
            self.out.end_stream()  # what was generated is on stdout before any message

        return AnswerHooks(
            on_text=on_text, on_notice=self.out.warn, on_reasoning=self.thinking.write, on_end=end
        )

    def show(self, answer: Answer, log: Callable[[], Exchange | None]) -> None:
        """The answer after it streamed; `log` logs the exchange (a failure is one warning)."""
        from llmcli.engine.events import json_document

        out, opts, reply = self.out, self.opts, answer.reply
        self.thinking.end()
        if note := cut_inside_thinking(reply, self.thinking.visible):
            out.warn(note)
        if opts.constraint is not None and not opts.json_out:
            out.write(answer.text)  # the newline follows below, as for any reply
        text, calls = answer.text, {}
        parsed = answer.parsed
        if parsed is not None:
            text, calls = parsed.content, {"tool_calls": [call.as_wire() for call in parsed.calls]}
        if opts.json_out:
            if parsed is not None and self.tools is not None:
                self.tools.warn_malformed(parsed)
            # Logged first, so the document can name the conversation (`--cid` continues it; null: not
            # logged). Nothing has streamed, and a log that fails is one warning: the document still follows.
            logged = log()
            assert reply.stats is not None, "a reply that does not raise ends with its stats"
            document = json_document(text, self.model_name, reply.stats, reply.reasoning)
            if calls.get("tool_calls"):
                document["finish_reason"] = "tool_calls"  # as OpenAI says it
            out.json(
                {
                    **document,
                    **answer.structured,
                    **calls,
                    "conversation_id": logged.conversation_id if logged is not None else None,
                }
            )
        else:
            if text and not text.endswith("\n"):
                out.write("\n")
            if parsed is not None and self.tools is not None:
                self.tools.show(parsed)
            log()  # after the reply is out: a failure is one warning
        show_stats = opts.stats if opts.stats is not None else out.env.stderr_isatty
        if show_stats and reply.stats is not None:
            from llmcli.ui.stats import stats_panel

            out.err.print(stats_panel(reply.stats, self.model_name))
