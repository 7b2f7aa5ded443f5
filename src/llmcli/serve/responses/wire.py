"""OpenAI's Responses replies as data: the response object, its output items and the stream's
events, made from the one call's pieces and Outcome. Pure: no I/O, no server state.

Output items come as the model writes them: `reasoning` (rs_), then the `message` (msg_) with one
output_text part, then each `function_call` (fc_, its call_id the one the client sends back). A
stream is the events the openai SDK's accumulator and Codex's parser read, each with its
sequence_number, item_id, output_index and content_index: response.created and .in_progress; per
item output_item.added, its part's content_part.added, the deltas (reasoning_text, output_text,
function_call_arguments), their .done, content_part.done and output_item.done; then
response.completed with the whole response (see Events.end), or response.failed.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from llmcli.engine.templates.thinking import REASONING
from llmcli.engine.tools import ToolCall
from llmcli.serve.errors import ApiError
from llmcli.serve.outcome import Outcome


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def usage(o: Outcome) -> dict:
    """output_tokens include the reasoning's, which output_tokens_details counts apart (the engine
    counts the tokens of the thinking block, its tags included)."""
    return {
        "input_tokens": o.prompt_tokens,
        "input_tokens_details": {"cached_tokens": o.cached_tokens},
        "output_tokens": o.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": o.reasoning_tokens},
        "total_tokens": o.prompt_tokens + o.completion_tokens,
    }


def reasoning_item(item_id: str, text: str, status: str = "completed") -> dict:
    content = [{"type": "reasoning_text", "text": text}]
    return {"type": "reasoning", "id": item_id, "summary": [], "content": content, "status": status}


def text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, text: str | None, status: str = "completed") -> dict:
    content = [] if text is None else [text_part(text)]
    return {"type": "message", "id": item_id, "role": "assistant", "status": status, "content": content}


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str = "completed") -> dict:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def output(text: str, reasoning: str, calls: tuple[ToolCall, ...]) -> list[dict]:
    """A whole reply's items: reasoning, the message (when it has text or makes no call), the calls."""
    items: list[dict] = []
    if reasoning:
        items.append(reasoning_item(new_id("rs"), reasoning))
    if text or not (calls or reasoning):  # an empty reply is one empty message
        items.append(message_item(new_id("msg"), text))
    for call in calls:
        arguments = json.dumps(call.arguments, ensure_ascii=False)
        items.append(call_item(new_id("fc"), call.id or "", call.name, arguments))
    return items


class Shell:
    """What every response object of one request repeats: its id, time, model and what was asked."""

    def __init__(self, model: str, asked: dict[str, Any]) -> None:
        self.id, self.created, self.model, self.asked = new_id("resp"), int(time.time()), model, asked

    def response(
        self, status: str, items: list[dict], o: Outcome | None = None, error: dict | None = None
    ) -> dict:
        cut = o is not None and o.finish_reason == "length"
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": "incomplete" if cut and status == "completed" else status,
            "model": self.model,
            "output": items,
            "usage": usage(o) if o is not None else None,
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
            "error": error,
            "previous_response_id": None,
            "store": False,
            "truncation": "disabled",
            "metadata": {},
            **self.asked,
        }


class Events:
    """One streamed reply's events: the items so far, the open one, the sequence number."""

    def __init__(self, shell: Shell) -> None:
        self.shell = shell
        self.items: list[dict] = []
        self.open: str | None = None  # reasoning | message | function_call
        self.calls: dict[int, int] = {}  # a call's index in the reply -> its output_index
        self.seq = 0

    def _event(self, kind: str, **data: Any) -> bytes:
        body = {"type": kind, "sequence_number": self.seq, **data}
        self.seq += 1
        return f"event: {kind}\ndata: {json.dumps(body)}\n\n".encode()

    def start(self) -> bytes:
        shell = self.shell.response("in_progress", [])
        return self._event("response.created", response=shell) + self._event(
            "response.in_progress", response=shell
        )

    def _where(self) -> dict:
        return {"item_id": self.items[-1]["id"], "output_index": len(self.items) - 1}

    def _close(self) -> bytes:
        if self.open is None:
            return b""
        item, where, out = self.items[-1], self._where(), b""
        if self.open == "reasoning":
            text = item["content"][0]["text"]
            out += self._event("response.reasoning_text.done", **where, content_index=0, text=text)
        elif self.open == "message":
            part = item["content"][0]
            out += self._event(
                "response.output_text.done", **where, content_index=0, text=part["text"], logprobs=[]
            )
            out += self._event("response.content_part.done", **where, content_index=0, part=part)
        else:
            args = item["arguments"]
            out += self._event(
                "response.function_call_arguments.done", **where, name=item["name"], arguments=args
            )
        self.open = None
        item["status"] = "completed"
        return out + self._event("response.output_item.done", output_index=where["output_index"], item=item)

    def _add(self, kind: str, item: dict) -> bytes:
        out = self._close()
        self.open = kind
        self.items.append(item)
        shown = {**item, "status": "in_progress"}
        if kind == "message":
            shown["content"] = []  # the part comes with content_part.added
        out += self._event("response.output_item.added", output_index=len(self.items) - 1, item=shown)
        if kind == "message":
            part = text_part("")
            out += self._event("response.content_part.added", **self._where(), content_index=0, part=part)
        return out

    def piece(self, kind: str, text: str, call: Any = None) -> bytes | None:
        """A piece of the reply (serve.call.Piece's kind, text and call) as its events."""
        if call is not None:
            out = b""
            if call.name is not None:
                item = call_item(new_id("fc"), call.id or "", call.name, "", "in_progress")
                out = self._add("function_call", item)
                self.calls[call.index] = len(self.items) - 1
            if call.arguments:
                self.items[-1]["arguments"] += call.arguments
                out += self._event(
                    "response.function_call_arguments.delta", **self._where(), delta=call.arguments
                )
            return out or None
        if not text:
            return None
        if kind == REASONING:
            out = (
                b"" if self.open == "reasoning" else self._add("reasoning", reasoning_item(new_id("rs"), ""))
            )
            self.items[-1]["content"][0]["text"] += text
            return out + self._event(
                "response.reasoning_text.delta", **self._where(), content_index=0, delta=text
            )
        out = b"" if self.open == "message" else self._add("message", message_item(new_id("msg"), ""))
        self.items[-1]["content"][0]["text"] += text
        return out + self._event(
            "response.output_text.delta", **self._where(), content_index=0, delta=text, logprobs=[]
        )

    def end(self, o: Outcome) -> bytes:
        """The open item's end, and response.completed with the whole response: its status says
        "incomplete" when max_output_tokens cut it. Never a response.incomplete event, which the
        openai SDK's accumulator does not finish on (it waits for response.completed)."""
        out = self._close()
        return out + self._event(
            "response.completed", response=self.shell.response("completed", self.items, o)
        )

    def failed(self, exc: ApiError) -> bytes:
        error = {"code": exc.code or "server_error", "message": exc.message}
        return self._event("response.failed", response=self.shell.response("failed", self.items, error=error))
