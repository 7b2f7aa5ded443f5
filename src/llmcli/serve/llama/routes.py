"""llama-server's utility routes, with its bodies and answers: POST /tokenize ({"content",
"add_special", "with_pieces"} -> {"tokens"}), /detokenize ({"tokens"} -> {"content"}) and
/apply-template (a chat body -> {"prompt"}: the text the model would be given). Each reads the
served model's vocabulary or template in the render thread, where prompts are made; nothing is
generated. `model` picks the model in store mode, as on the other routes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request

from llmcli.serve.openai.protocol import ChatCompletionRequest
from llmcli.serve.protocol import Body, Flag, Text, checked, refuse
from llmcli.serve.state import Server

router = APIRouter()
MAX_TOKENS = 1 << 20  # ids one /detokenize takes (a body cap bounds them anyway)


def _content(value: Any) -> str:
    if not isinstance(value, str):
        raise refuse("must be a string")
    return value


def _tokens(value: Any) -> list[int]:
    ok = isinstance(value, list) and len(value) <= MAX_TOKENS
    if not ok or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value):
        raise refuse("must be a list of token ids (integers of at least 0)")
    return value


class TokenizeRequest(Body):
    model: Text = None
    content: checked(_content, {"type": "string"}, nullable=False) = ""
    add_special: Flag = False
    with_pieces: Flag = False


class DetokenizeRequest(Body):
    model: Text = None
    tokens: checked(_tokens, {"type": "array", "items": {"type": "integer"}}, nullable=False) = []


async def _with_model(request: Request, kind: type, work: Callable[[Any, Any], Any]) -> Any:
    """`work(body, model)` in the render thread, with the model the body names leased meanwhile."""
    server: Server = request.app.state.server
    body = await server.read(request, kind)
    lease = await server.lease(server.find(body.model), None, request.state.t_arrival)
    try:
        return await asyncio.get_running_loop().run_in_executor(server.renderer, work, body, lease.model)
    finally:
        lease.release()


def _piece(rt, token: int) -> str | list[int]:
    """A token's text, or its bytes where they are not UTF-8 on their own (as llama-server answers)."""
    data = rt.piece(token, special=True)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return list(data)


@router.post("/tokenize")
async def tokenize(request: Request):
    def work(body: TokenizeRequest, model) -> dict:
        ids = model.rt.tokenize(body.content, parse_special=True, add_special=bool(body.add_special))
        if body.with_pieces:
            return {"tokens": [{"id": t, "piece": _piece(model.rt, t)} for t in ids]}
        return {"tokens": ids}

    return await _with_model(request, TokenizeRequest, work)


@router.post("/detokenize")
async def detokenize(request: Request):
    def work(body: DetokenizeRequest, model) -> dict:
        from llmcli.serve.errors import bad

        n_vocab = model.rt.n_vocab
        for i, token in enumerate(body.tokens):
            if token >= n_vocab:
                shown = f"tokens[{i}] {token} is not a token of this model (0..{n_vocab - 1})"
                raise bad(f"tokens[{i}]", shown)
        data = b"".join(model.rt.piece(t, special=True) for t in body.tokens)
        return {"content": data.decode("utf-8", "replace")}

    return await _with_model(request, DetokenizeRequest, work)


@router.post("/apply-template")
async def apply_template(request: Request):
    server: Server = request.app.state.server

    def work(body: ChatCompletionRequest, model) -> dict:
        return {"prompt": model.prompts.text(body.generation(server.defaults(model)))}

    return await _with_model(request, ChatCompletionRequest, work)


BODIES = {
    "/tokenize": TokenizeRequest,
    "/detokenize": DetokenizeRequest,
    "/apply-template": ChatCompletionRequest,
}
