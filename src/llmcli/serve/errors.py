"""An HTTP answer other than 200, and its body in the shape the client's API expects.

OpenAI's routes answer `{"error": {"message", "type", "param", "code"}}`; Ollama's answer
`{"error": "message"}` (what its Python client reads into ResponseError).
"""

from __future__ import annotations

# status -> OpenAI's error type
TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout",
    413: "invalid_request_error",
    429: "rate_limit_exceeded",
    500: "server_error",
    503: "server_busy",
    504: "timeout",
}


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        retry_after: int | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.retry_after = retry_after
        self.code = code  # OpenAI's own code where it has one (context_length_exceeded), else the status

    @property
    def headers(self) -> dict[str, str]:
        found = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}
        if self.status == 401:
            found["WWW-Authenticate"] = "Bearer"
        if self.status == 408:  # the body was not read to its end: the connection cannot carry another
            found["Connection"] = "close"
        return found

    def body(self, ollama: bool) -> dict:
        if ollama:
            return {"error": self.message}
        return {
            "error": {
                "message": self.message,
                "type": TYPES.get(self.status, "server_error"),
                "param": self.param,
                "code": self.code if self.code is not None else self.status,
            }
        }


def unknown_model(message: str) -> ApiError:
    """A 404 for a model the request named: OpenAI's error object with code model_not_found, or
    Ollama's {"error": message}."""
    return ApiError(404, message, "model", code="model_not_found")


def bad(param: str | None, message: str) -> ApiError:
    return ApiError(400, message, param)


def context_exceeded(room: int, tokens: str, what: str, param: str | None) -> ApiError:
    """A prompt (and reply) over what a sequence holds, in OpenAI's words, which clients such as litellm
    read as a context-window error; `tokens`: "5000" or "more than 1024"; `what`: where they went."""
    return ApiError(
        400,
        f"This model's maximum context length is {room} tokens. However, you requested {tokens} tokens "
        f"({what}). Please reduce the length of the messages or completion "
        "(or start the server with a larger --ctx).",
        param,
        code="context_length_exceeded",
    )


def too_long(dialect: str, room: int, tokens: str, what: str, param: str | None) -> ApiError:
    """A prompt and its reply over what a sequence holds, in the request's dialect: OpenAI's words and
    code (context_exceeded), or llmcli's own. `tokens`: "5000" or "more than 1024"; `what`: where they
    went ("12 in the messages, 5000 in the completion")."""
    if dialect == "openai":
        return context_exceeded(room, tokens, what, param)
    return ApiError(
        400,
        f"the request needs {tokens} tokens ({what}), over the {room} a sequence can hold here; "
        "shorten the prompt or lower the reply's token limit (or start the server with a larger --ctx)",
        param,
    )
