"""Each error class the anthropic SDK picks by status, met through the server's own behaviour: a bad
body (400), a wrong key (401), an unknown model (404), a body past --max-body (413), a request past
--token-limit (429), a model file in the store that fails to load (500) and a full queue (529,
Anthropic's overload). Each body is Anthropic's `{"type": "error", "error": {"type", "message"}}`,
also where the middleware answers before any route (401, 413).

No 403 here: the server refuses with 403 only a change to the store under --read-only (Ollama's
/api/pull, /api/delete), never a Messages route.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from llmcli.store import EMBEDDED_NAME, ModelEntry, Store
from tests.serve.server import KEY, ServeProcess
from tests.support.deps import require

HI = [{"role": "user", "content": "Say hello."}]
HOLDER_KEY = "sk-test-holder"  # the key of the stream that keeps the one sequence busy
MAX_BODY = 4096
TOKEN_LIMIT = 500  # a key's tokens a minute: a reply of 600 can never fit


@pytest.fixture(scope="module")
def sdk():
    return require("anthropic")


@pytest.fixture(scope="module")
def store_server(tmp_path_factory, embedded_path):
    """The store's server (so that a name it lacks is a 404), with a model whose file is cut in half,
    one sequence and no queue."""
    home = tmp_path_factory.mktemp("anthropic-errors")
    whole = Path(embedded_path).read_bytes()
    broken = home / "broken.gguf"
    broken.write_bytes(whole[: len(whole) // 2])  # a download that stopped half way
    Store(home).register(ModelEntry(name="broken", path=str(broken), files=[str(broken)], source="test"))
    srv = ServeProcess(
        home, "--api-key", KEY, "--api-key", HOLDER_KEY, "--parallel", "1", "--max-queue", "0",
        "--max-body", str(MAX_BODY), "--token-limit", str(TOKEN_LIMIT), model=None,
    )  # fmt: skip
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def claude(store_server, sdk):
    return sdk.Anthropic(base_url=store_server.url, api_key=KEY, max_retries=0)


def refused(sdk, kind: str, call) -> object:
    """The SDK's exception, checked to carry Anthropic's error shape."""
    with pytest.raises(getattr(sdk, kind)) as caught:
        call()
    body = caught.value.body
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    return caught.value


# (the SDK's class, the status, Anthropic's error type, the request's arguments, words of the message)
CASES = [
    ("BadRequestError", 400, "invalid_request_error", {"max_tokens": 0}, "max_tokens must be an integer"),
    ("NotFoundError", 404, "not_found_error", {"model": "no-such-model"}, "no-such-model"),
    (
        "RequestTooLargeError",
        413,
        "request_too_large",
        {"messages": [{"role": "user", "content": "x" * MAX_BODY}]},
        "--max-body",
    ),
    # the request's own max_tokens, named as its own (Anthropic's is a cap, held in the sampling params)
    ("RateLimitError", 429, "rate_limit_error", {"max_tokens": 600}, "its max_tokens (600), over this key's"),
    ("InternalServerError", 500, "api_error", {"model": "broken"}, "is not a valid GGUF"),
]


@pytest.mark.parametrize("kind, status, error_type, given, words", CASES, ids=[c[0] for c in CASES])
def test_each_status_is_the_sdks_class_with_anthropics_error_type(
    claude, sdk, kind, status, error_type, given, words
):
    asked = {"model": EMBEDDED_NAME, "max_tokens": 4, "messages": HI, **given}
    exc = refused(sdk, kind, lambda: claude.messages.create(**asked))
    assert exc.status_code == status
    assert exc.body["error"]["type"] == error_type and words in exc.body["error"]["message"], exc.body


def test_a_wrong_key_is_the_sdks_authentication_error_from_the_middleware(store_server, sdk):
    wrong = sdk.Anthropic(base_url=store_server.url, api_key="sk-wrong", max_retries=0)
    exc = refused(
        sdk, "AuthenticationError", lambda: wrong.messages.count_tokens(model=EMBEDDED_NAME, messages=HI)
    )
    message = "the API key is not valid for this server"
    assert exc.body["error"] == {"type": "authentication_error", "message": message}


def test_a_full_queue_is_anthropics_overload_529_with_retry_after(store_server, claude, sdk):
    # A count goes on for its whole budget: the one sequence stays taken while the client asks.
    body = {"model": EMBEDDED_NAME, "prompt": "1, 2, 3, 4, 5, 6, 7, 8,", "max_tokens": 300, "stream": True}
    headers = {"Authorization": f"Bearer {HOLDER_KEY}"}
    url = store_server.url
    with httpx.stream("POST", url + "/v1/completions", json=body, headers=headers, timeout=60) as held:
        lines = held.iter_lines()  # kept: a dropped iterator closes the response, and the server cancels
        assert next(line for line in lines if line.startswith("data: "))
        ask = lambda: claude.messages.create(model=EMBEDDED_NAME, max_tokens=4, messages=HI)  # noqa: E731
        exc = refused(sdk, "OverloadedError", ask)
        assert exc.status_code == 529 and exc.response.headers["retry-after"] == "1"
        error = exc.body["error"]
        assert error["type"] == "overloaded_error" and "queue is full" in error["message"]
        # every other dialect keeps HTTP's 503 for the same refusal
        chat = {"model": EMBEDDED_NAME, "messages": HI, "max_tokens": 4}
        busy = httpx.post(url + "/v1/chat/completions", json=chat, headers=headers, timeout=60)
        assert busy.status_code == 503
