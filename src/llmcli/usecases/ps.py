"""`llmcli ps`: what a running server has loaded, asked of its /api/ps (Ollama's route, which
`llmcli serve` answers). No terminal here: the command renders the records."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from urllib.parse import urlsplit

from llmcli.display import printable
from llmcli.errors import RuntimeFailure, UsageError
from llmcli.serve.options import HOST, PORT

DEFAULT_URL = f"http://{HOST}:{PORT}"  # where `llmcli serve` listens unless told otherwise
TIMEOUT_S = 10.0
FOREVER_AFTER_S = 100 * 365 * 86400  # keep_alive -1: Ollama's expires_at lies centuries ahead


@dataclass(frozen=True)
class Loaded:
    """One loaded model as /api/ps gives it (Ollama's fields)."""

    name: str
    size: int  # bytes it takes, estimated
    size_vram: int  # of which on the GPU
    expires_at: datetime | None  # None: never (or not said)
    record: dict  # the server's record, as it came (--json)

    @property
    def processor(self) -> str:
        """Where it runs, as `ollama ps` words it: 100% CPU, 100% GPU, or 48%/52% CPU/GPU."""
        if self.size <= 0 or self.size_vram <= 0:
            return "100% CPU"
        gpu = min(round(100 * self.size_vram / self.size), 100)
        return "100% GPU" if gpu == 100 else f"{100 - gpu}%/{gpu}% CPU/GPU"

    def until(self, now: datetime) -> str:
        """When it unloads, as `ollama ps` words it: '4 minutes from now', 'Forever', 'Stopping...'."""
        if self.expires_at is None:
            return "Forever"
        left = (self.expires_at - now).total_seconds()
        if left > FOREVER_AFTER_S:
            return "Forever"
        if left <= 0:
            return "Stopping..."
        for unit, seconds in (("hour", 3600), ("minute", 60), ("second", 1)):
            if left >= seconds:
                n = int(left // seconds)
                return f"{n} {unit}{'s' if n != 1 else ''} from now"
        return "Less than a second from now"


def base_url(text: str) -> str:
    """--url: http(s)://host[:port], nothing after it (a path is the server's business)."""
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        raise UsageError(
            f"--url {printable(text, 80)} is not a server's address; give http://HOST:PORT "
            f"(`llmcli serve` listens on {DEFAULT_URL} by default)"
        )
    return f"{parts.scheme}://{parts.netloc}"


def _when(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def loaded(url: str, api_key: str | None = None, timeout: float = TIMEOUT_S) -> list[Loaded]:
    """The models the server at `url` has loaded; RuntimeFailure naming the fix when it cannot say."""
    import httpx

    fix = "start one with `llmcli serve`, or give its address with --url"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(url + "/api/ps", headers=headers, timeout=timeout)
    except httpx.TimeoutException:
        raise RuntimeFailure(f"the server at {url} did not answer within {timeout:g} s; {fix}") from None
    except httpx.HTTPError as exc:
        reason = printable(str(exc) or type(exc).__name__, 100)
        raise RuntimeFailure(f"no server answers at {url} ({reason}); {fix}") from None
    if r.status_code == 401:
        raise RuntimeFailure(f"the server at {url} wants an API key; set LLMCLI_API_KEY (or give --api-key)")
    try:
        body = r.json() if r.status_code == 200 else None
    except ValueError:
        body = None
    models = body.get("models") if isinstance(body, dict) else None
    if not isinstance(models, list) or not all(isinstance(m, dict) for m in models):
        raise RuntimeFailure(
            f"{url}/api/ps answered {r.status_code} without a list of models; "
            f"is it `llmcli serve` (or Ollama)? {fix}"
        )
    return [
        Loaded(
            name=str(m.get("name") or m.get("model") or "?"),
            size=_count(m.get("size")),
            size_vram=_count(m.get("size_vram")),
            expires_at=_when(m.get("expires_at")),
            record=m,
        )
        for m in models
    ]
