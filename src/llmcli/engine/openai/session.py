"""A conversation with a model on an OpenAI-compatible server: the same events as ChatSession.

Where the stages run: ① template + tokenize, ② schedule, ③ prefill, ④ decode and ⑦ release happen
on the server. We time what we can see from here (TTFT and the stream's pace, measured on this
side of the wire), take what the server reports (`usage`, and llama.cpp's `timings`), and leave
the rest None rather than invent it. ⑤ post-process runs here as well as there: the server
detokenizes, and llmcli applies the same stop strings and word filter as the local engine, so
`--stop` and `--filter` behave the same whichever backend answers. ⑥ return is ours.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from llmcli.engine.events import Event, RemoteReport, Stats, TextDelta, rate, reported
from llmcli.engine.messages import Message
from llmcli.engine.openai.client import Endpoint
from llmcli.engine.openai.stream import ChatStream
from llmcli.engine.postprocess import Postprocessor, WordFilter
from llmcli.engine.sampling import SamplingParams
from llmcli.engine.session import SessionInfo
from llmcli.engine.structured import OutputConstraint
from llmcli.errors import LlmcliError, UsageError
from llmcli.params import request_fields
from llmcli.stages import STAGES, StageRecord, num

MAX_STOPS = 4  # the OpenAI API takes at most four stop strings; more are applied here only


def _ms(start: float, end: float | None = None) -> float:
    return ((end if end is not None else time.perf_counter()) - start) * 1000


def check_remote_constraint(constraint: OutputConstraint | None) -> None:
    """--grammar is refused over --endpoint: a server may ignore a `grammar` field it does not know
    (vLLM, OpenAI), and a reply cannot be re-checked against GBNF here without a local model, so a
    script could receive text the grammar never allowed. JSON replies are re-checked, so they go."""
    if constraint is not None and constraint.kind == "grammar":
        raise UsageError(
            "--grammar needs the local engine (a server's reply cannot be checked against "
            "a GBNF grammar here); with --endpoint use --schema or --format json"
        )


def constraint_fields(constraint: OutputConstraint | None) -> dict:
    """OpenAI's response_format for a schema (json_schema; openai_http.FIELD_FALLBACKS asks again
    in the json_object form for servers that only know that) or for any JSON (json_object). The
    reply is validated here all the same: a server that ignores the field does not get through."""
    check_remote_constraint(constraint)
    if constraint is None:
        return {}
    if constraint.kind == "schema":
        return {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "reply", "schema": constraint.schema, "strict": True},
            }
        }
    return {"response_format": {"type": "json_object"}}


def request_body(
    model: str,
    messages: list[dict],
    params: SamplingParams,
    stops: list[str],
    constraint: OutputConstraint | None = None,
) -> dict:
    body: dict = {
        "model": model,
        "messages": messages,
        "stream": True,
        # Usage in the last chunk (vLLM, SGLang, OpenAI); servers that do not know it ignore it.
        "stream_options": {"include_usage": True},
    }
    # Field names come from the parameter table: OpenAI's own always, extensions only when changed.
    body.update(request_fields(params.as_dict()))
    if stops:
        body["stop"] = stops[:MAX_STOPS]
    body.update(constraint_fields(constraint))
    return body


class RemoteChatSession:
    def __init__(
        self,
        endpoint: Endpoint,
        model: str,
        *,
        system: str | None = None,
        params: SamplingParams | None = None,
        stops: list[str] | None = None,
        word_filter: WordFilter | None = None,
        constraint: OutputConstraint | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.constraint = constraint
        self.model = model
        self.system = system
        self.params = params or SamplingParams()
        self.stops = list(stops or [])
        self.word_filter_words = word_filter.words if word_filter else []
        self.think: bool | None = None  # the server's template decides; no request field sets it
        self.cache_warning: str | None = None  # the server owns its cache: there is nothing to save
        self.messages: list[Message] = []
        self.last_stats: Stats | None = None
        self._cancel = False
        self._stream: ChatStream | None = None

    # -- the Session surface ------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return self.endpoint.base_url

    def conversation(self, extra: list[Message] | None = None) -> list[dict]:
        head = [Message("system", self.system)] if self.system else []
        return [{"role": m.role, "content": m.content} for m in head + self.messages + (extra or [])]

    def clear(self) -> None:
        self.messages = []

    def cancel(self) -> None:
        """Stop the running request (safe from a signal handler): a silent server is cut off at once."""
        self._cancel = True
        stream = self._stream
        if stream is not None:
            stream.abort()

    def describe(self) -> SessionInfo:
        return SessionInfo(
            banner=f"remote · {self.endpoint.base_url}",
            details=[
                ("endpoint", self.endpoint.base_url),
                ("server model", self.model),
                ("API key", "set" if self.endpoint.api_key else "none"),
                ("timeout", f"{self.endpoint.timeout:g} s of silence"),
            ],
        )

    def close(self) -> None:
        """Nothing to free here: each request has its own connection, and the server owns its cache."""

    # -- one request --------------------------------------------------------------------------
    def ask(self, text: str, *, keep_cache: bool = True) -> Iterator[Event]:
        # keep_cache: the server decides what its KV cache keeps (⑦ runs there).
        report = RemoteReport(endpoint=self.endpoint.base_url)
        stats = Stats(remote=report)
        ms = {"postprocess": 0.0, "return": 0.0}  # the stages that run here
        self._cancel = False
        user = Message("user", text)
        body = request_body(self.model, self.conversation([user]), self.params, self.stops, self.constraint)
        post = Postprocessor(self.stops, WordFilter(self.word_filter_words))
        parts: list[str] = []
        finish = "stop"
        t0 = time.perf_counter()
        t_first = t_last = None
        stream = self._stream = ChatStream(self.endpoint, body)
        try:
            for chunk in stream:
                if report.connect_ms == 0.0:
                    report.connect_ms = _ms(t0)
                self._take_reports(chunk, report)
                for choice in chunk.get("choices") or []:
                    delta = (choice.get("delta") or {}).get("content")
                    if delta:
                        now = time.perf_counter()
                        t_first = t_first or now
                        t_last = now
                        report.chunks += 1
                        tp = time.perf_counter()
                        out = post.feed(delta.encode("utf-8"))
                        ms["postprocess"] += _ms(tp)
                        if out:
                            parts.append(out)
                            tr = time.perf_counter()
                            yield TextDelta(out)  # ⑥ the caller streams it
                            ms["return"] += _ms(tr)
                    if choice.get("finish_reason"):
                        finish = "length" if choice["finish_reason"] == "length" else "stop"
                if post.stopped:
                    break  # a stop string the server did not apply (more than it takes, or split oddly)
                if self._cancel:
                    break
        except LlmcliError:
            # The turn stays in the conversation, marked cancelled, with whatever text arrived.
            tail = post.flush()
            self.messages += [user, Message("assistant", "".join(parts) + tail, cancelled=True)]
            raise
        finally:
            stream.close()
            self._stream = None
        if self._cancel:
            finish = "cancelled"
        tail = post.flush()
        if tail:
            parts.append(tail)
            yield TextDelta(tail)
        t_end = time.perf_counter()

        stats.finish_reason = finish
        stats.masked_words = post.filter.masked
        usage = report.usage or {}
        timings = report.timings or {}
        stats.completion_tokens = _count(usage.get("completion_tokens")) or report.chunks
        stats.prompt_tokens = _count(usage.get("prompt_tokens"))
        details = usage.get("prompt_tokens_details") or {}
        stats.cached_tokens = _count(details.get("cached_tokens", timings.get("cache_n")))
        if stats.prompt_tokens is not None and stats.cached_tokens is not None:
            stats.prefill_tokens = stats.prompt_tokens - stats.cached_tokens
        if _count(timings.get("prompt_n")) is not None:
            stats.prefill_tokens = _count(timings.get("prompt_n"))
        if t_first is not None:
            stats.ttft_ms = _ms(t0, t_first)
            stats.decode_ms = _ms(t_first, t_last)
            # Tokens after the first, over the time from the first to the last: the client's view of
            # decode, comparable with vLLM's 1 / TPOT. Without usage, a chunk counts as a token.
            stats.decode_steps = max(stats.completion_tokens - 1, 0)
        stats.total_ms = _ms(t0, t_end)
        stats.stages = _stage_records(stats, report, ms)
        self.messages += [user, Message("assistant", "".join(parts), cancelled=finish == "cancelled")]
        self.last_stats = stats
        yield stats

    @staticmethod
    def _take_reports(chunk: dict, report: RemoteReport) -> None:
        """usage (OpenAI, vLLM, SGLang: the last chunk) and timings (llama.cpp's server)."""
        if isinstance(chunk.get("usage"), dict):
            report.usage = chunk["usage"]
        if isinstance(chunk.get("timings"), dict):
            report.timings = chunk["timings"]


def _count(value: object) -> int | None:
    number = reported(value)
    return None if number is None else int(number)


def _stage_records(stats: Stats, report: RemoteReport, here: dict[str, float]) -> list[StageRecord]:
    """The server's stages carry its own numbers where it sent them (llama.cpp: prefill, decode)."""
    timings = report.timings or {}
    server_ms = {
        "prefill": reported(timings.get("prompt_ms")),
        "decode": reported(timings.get("predicted_ms")),
    }
    no_usage = "" if report.usage_reported else " (the server sent no usage)"
    details = {"tokenize": f"{num(stats.prompt_tokens, 0)} prompt tokens{no_usage}"}
    if stats.cached_tokens is not None:
        details["schedule"] = f"{stats.cached_tokens} cached, {num(stats.prefill_tokens, 0)} to prefill"
    if server_ms["prefill"] is not None:
        details["prefill"] = f"{num(rate(stats.prefill_tokens, server_ms['prefill']))} tok/s (server timings)"
    if server_ms["decode"] is not None:
        details["decode"] = (
            f"{timings.get('predicted_n', '?')} tokens · {num(report.decode_tps)} tok/s (server timings)"
        )
    if stats.masked_words:
        details["postprocess"] = f"{stats.masked_words} words masked here"
    return [
        StageRecord(
            stage.key,
            server_ms.get(stage.key) if stage.on_server else here[stage.key],
            "remote" if stage.on_server else "local",
            details.get(stage.key, stage.covers_remote),
        )
        for stage in STAGES
    ]
