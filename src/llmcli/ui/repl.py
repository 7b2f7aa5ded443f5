"""The prompt_toolkit REPL: streamed replies, slash commands, Ctrl-C that stops a reply, not the REPL."""

from __future__ import annotations

import signal
import traceback
from typing import TYPE_CHECKING

from llmcli.display import printable
from llmcli.engine.events import Reply, drain
from llmcli.environment import Environment
from llmcli.errors import LlmcliError
from llmcli.store import Store
from llmcli.ui.output import Output
from llmcli.ui.slash import ReplState, dispatch
from llmcli.ui.thinking import cut_inside_thinking

if TYPE_CHECKING:
    from llmcli.engine.session import Session

PROMPT = ">>> "
CONTINUATION = "... "


def _key_bindings():
    from prompt_toolkit.key_binding import KeyBindings

    kb = KeyBindings()

    @kb.add("escape", "enter")  # Esc+Enter; terminals send Alt+Enter as the same two keys
    def _newline(event) -> None:
        event.current_buffer.insert_text("\n")

    return kb


class Repl:
    def __init__(
        self,
        env: Environment,
        session: Session,
        model_name: str,
        store: Store,
        opts,
        recorder=None,
        resumed=None,
        tools=None,
    ) -> None:
        from llmcli.ui.tool_calls import ToolCallView

        self.session, self.model_name, self.store, self.opts = session, model_name, store, opts
        self.out = Output(env)
        self.tools = ToolCallView(tools, self.out) if tools is not None else None  # --tools: calls shown
        self.recorder, self.resumed = recorder, resumed  # the conversation log; the conversation continued
        self.state = ReplState(
            session=session, model_name=model_name, markdown=opts.markdown, recorder=recorder, home=env.home
        )
        self._wrote = ""  # the last text streamed this turn: a reply cut off by an error needs a newline
        self.show_stats = opts.stats is not False

    def _prompt_session(self):
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory, History, InMemoryHistory

        history: History
        try:
            self.store.root.mkdir(parents=True, exist_ok=True)
            history = FileHistory(str(self.store.history_path))
        except OSError:
            history = InMemoryHistory()  # a read-only store should not stop a chat
        return PromptSession(
            history=history,
            key_bindings=_key_bindings(),
            multiline=False,
            prompt_continuation=CONTINUATION,
            enable_open_in_editor=False,
        )

    def run(self) -> None:
        info = self.session.describe()
        self.out.info(
            f"llmcli · {self.model_name} · {info.banner}\n"
            "/help for commands, Esc+Enter for a newline, Ctrl-D to exit"
        )
        if self.resumed is not None:
            self.out.info(
                f"continuing conversation {self.resumed.id}: {len(self.session.messages)} messages, "
                f"model {printable(self.model_name, 80)}"
            )
        prompt = self._prompt_session()
        while self.state.running:
            try:
                line = prompt.prompt(PROMPT)
            except KeyboardInterrupt:
                self.out.info("(Ctrl-C clears the line; use Ctrl-D or /bye to exit)")
                continue
            except EOFError:
                break
            if not line.strip():
                continue
            try:
                if line.lstrip().startswith("/"):
                    self._slash(line)
                else:
                    self._turn(line)
            except KeyboardInterrupt:  # Ctrl-C during a slash command: it stops, the REPL stays
                self.out.info("(interrupted; the conversation is as it was)")
            except Exception as exc:  # noqa: BLE001 - the REPL's boundary: one line, then the next prompt
                self._error(exc)
        self.session.close()
        if warning := self.session.cache_warning:  # the prefix cache could not save the tip
            self.out.warn(warning)

    def _error(self, exc: Exception) -> None:
        """One line for any error; the type too when it is not ours; the traceback under LLMCLI_DEBUG."""
        env = self.out.env
        if env.debug:
            traceback.print_exception(exc, file=env.stderr)
        text = str(exc) if isinstance(exc, LlmcliError) else f"internal error: {type(exc).__name__}: {exc}"
        # One line, as the CLI's own boundary writes it: newlines, escapes and lone surrogates shown escaped.
        line = printable(text, limit=len(text))
        self.out.err.print(f"llmcli: error: {line}", style="red", markup=False, soft_wrap=True)

    def _slash(self, line: str) -> None:
        result = dispatch(self.state, line)
        if result.text:
            self.out.info(result.text)
        if result.renderable is not None:
            self.out.err.print(result.renderable)

    def _turn(self, text: str) -> None:
        # Ctrl-C while a reply streams asks the engine to stop after this token; the partial
        # reply stays in the conversation, marked cancelled.
        previous = signal.signal(signal.SIGINT, lambda *_: self.session.cancel())
        reply: Reply | None = None
        self._wrote = ""
        try:
            reply = self._stream(text)
            self._check(reply)  # an invalid structured reply is one error line, and is not logged
        except Exception as exc:  # noqa: BLE001 - the turn's boundary, as in run()
            # A server that fails mid-reply: say so, keep the conversation, and go on.
            if self._wrote and not self._wrote.endswith("\n"):
                self.out.write("\n")
            self._error(exc)
            last = self.session.messages[-1] if self.session.messages else None
            if last is not None and last.role == "assistant" and last.cancelled:
                self.out.warn("the failed turn is kept in the conversation, marked cancelled")
            return
        finally:
            signal.signal(signal.SIGINT, previous)
        self.state.actions.log(self.recorder, self.session, text, reply, self.out.warn)
        # The REPL's cap is /set max_tokens; --show-thinking is no advice at a prompt that is already open.
        if note := cut_inside_thinking(reply, True, "raise it with /set max_tokens N"):
            self.out.warn(note)
        stats = reply.stats
        if stats and stats.finish_reason == "cancelled":
            self.out.warn("reply cancelled (kept in the conversation, marked cancelled)")
        if stats and self.show_stats:
            from llmcli.ui.stats import stats_panel

            self.out.err.print(stats_panel(stats, self.model_name))

    def _check(self, reply: Reply) -> None:
        """With /set schema, the reply is parsed and validated as a one-shot reply is: a reply that
        fails raises RuntimeFailure, which the turn shows as one line before the next prompt."""
        constraint = self.session.constraint
        if constraint is None or (reply.stats and reply.stats.finish_reason == "cancelled"):
            return
        from llmcli.engine.structured import finish

        finish(constraint, reply.text, reply.stats.finish_reason if reply.stats else "stop")

    def _stream(self, text: str) -> Reply:
        if self.state.markdown:
            return self._stream_markdown(text)
        from llmcli.ui.thinking import ThinkingStream

        thinking = ThinkingStream(self.out, True)  # the REPL is a terminal: reasoning shows, dimmed
        on_text = thinking.before(self._write)
        tools = self.tools
        reply = drain(
            self.session.ask(text),
            on_text=tools.streaming(on_text) if tools else on_text,
            on_notice=self.out.warn,
            on_reasoning=thinking.write,
        )
        if tools:
            tools.end()
        thinking.end()  # a reply cut inside its thinking has no answer to end the reasoning's line
        if not self._wrote.endswith("\n"):
            self.out.write("\n")
        finish_reason = reply.stats.finish_reason if reply.stats else None
        parsed = tools.calls(finish_reason) if tools else None
        if tools and parsed is not None:
            tools.show(parsed)
        return reply

    def _write(self, text: str) -> None:
        self.out.write(text)
        self._wrote = text or self._wrote

    def _stream_markdown(self, text: str) -> Reply:
        from rich.live import Live
        from rich.markdown import Markdown

        parts: list[str] = []

        def show(delta: str) -> None:
            parts.append(delta)
            live.update(Markdown("".join(parts)))

        with Live(
            Markdown(""), console=self.out.out, refresh_per_second=12, vertical_overflow="visible"
        ) as live:
            return drain(self.session.ask(text), on_text=show, on_notice=self.out.warn)
