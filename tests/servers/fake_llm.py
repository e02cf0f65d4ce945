"""A scriptable OpenAI-compatible chat-completions server for tests, run as a real process.
Stdlib only so it starts fast; `FakeLLMServer` starts, scripts, inspects and stops it from tests.

Chaos option (for soaks): a script with `"transient_error_rate": 0.1` (and an optional `"seed"`)
answers that fraction of its requests with a transient error instead of its step: HTTP 429 with
`Retry-After: 0` or HTTP 503, half each. An injected error consumes no step (in sequence mode the
next request gets the step this one would have had) and is recorded like any request, with the
error as its `step` and `"chaos": true` in it, so `requests()` counts what was injected.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

Step = dict[str, Any]
JSON = dict[str, Any]

COMPLETION_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
SEQUENCE = "sequence"
BY_ITERATION = "by_iteration"
DEFAULT_STEP: Step = {"text": "ok"}
TRANSIENT_STATUSES = (429, 503)
REPO_ROOT = Path(__file__).resolve().parents[2]

# litellm maps any error whose text says "invalid_request_error" to BadRequestError whatever the
# status (OpenAI's own 401 escapes only through its "Incorrect API key provided" wording), so the
# 401/403/404 defaults use types that keep litellm's status-based mapping.
ERROR_TYPES = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", "permission_denied"),
    404: ("not_found_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


# ---------------------------------------------------------------- scripts and state


@dataclass
class Script:
    steps: list[Step]
    match: str | None = None
    mode: str = SEQUENCE
    default: Step | None = None
    transient_error_rate: float = 0.0
    seed: int | None = None
    served: int = 0
    rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def transient_error(self) -> Step | None:
        """An injected 429/503 step for this request, or None (then the script's step answers)."""
        if self.transient_error_rate <= 0 or self.rng.random() >= self.transient_error_rate:
            return None
        status = self.rng.choice(TRANSIENT_STATUSES)
        if status == 429:
            message = "fake_llm chaos: rate limit exceeded, retry later"
            return {"error": 429, "retry_after": 0, "message": message, "chaos": True}
        return {"error": 503, "message": "fake_llm chaos: the model is overloaded", "chaos": True}

    def next_step(self, messages: list[Any]) -> tuple[Step | None, int]:
        """Return the step for this request and its index; None when the script is exhausted."""
        if self.mode == BY_ITERATION:
            index = assistant_turns_since_last_user(messages)
        else:
            index = self.served
            self.served += 1
        if index < len(self.steps):
            return self.steps[index], index
        return self.default, index


def assistant_turns_since_last_user(messages: list[Any]) -> int:
    count = 0
    for message in reversed(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "user":
            break
        if role == "assistant":
            count += 1
    return count


def messages_text(body: Any) -> str:
    messages = body.get("messages", []) if isinstance(body, dict) else []
    return json.dumps(messages, ensure_ascii=False)


@dataclass
class ServerState:
    scripts: list[Script] = field(default_factory=list)
    requests: list[JSON] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def install(self, script: Script) -> None:
        with self.lock:
            for i, existing in enumerate(self.scripts):
                if existing.match == script.match:
                    self.scripts[i] = script
                    return
            self.scripts.append(script)

    def reset(self) -> None:
        with self.lock:
            self.scripts.clear()
            self.requests.clear()

    def choose_step(self, body: Any) -> tuple[Step | None, str]:
        """Pick the step answering `body`; the string explains an exhausted script."""
        text = messages_text(body)
        messages = body.get("messages", []) if isinstance(body, dict) else []
        with self.lock:
            script = self._script_for(text)
            if script is None:
                return DEFAULT_STEP, ""
            injected = script.transient_error()
            if injected is not None:
                return injected, ""
            step, index = script.next_step(messages if isinstance(messages, list) else [])
        if step is None:
            return None, (
                f"fake_llm: script exhausted (match={script.match!r}, mode={script.mode}, "
                f"step index {index}, {len(script.steps)} steps, no default)"
            )
        return step, ""

    def _script_for(self, text: str) -> Script | None:
        matching = [s for s in self.scripts if s.match is not None and s.match in text]
        if matching:
            return matching[0]
        fallbacks = [s for s in self.scripts if s.match is None]
        return fallbacks[0] if fallbacks else None

    def record(self, entry: JSON) -> None:
        with self.lock:
            self.requests.append(entry)

    def recorded(self, match: str | None) -> list[JSON]:
        with self.lock:
            entries = list(self.requests)
        if match is None:
            return entries
        return [e for e in entries if match in messages_text(e["body"])]


def parse_json_object(raw: bytes) -> JSON | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def parse_script(payload: Any) -> Script:
    if not isinstance(payload, dict) or not isinstance(payload.get("steps"), list):
        raise ValueError(
            'a script is {"steps": [...], "match"?, "mode"?, "default"?, '
            '"transient_error_rate"?, "seed"?}'
        )
    mode = payload.get("mode") or SEQUENCE
    if mode not in (SEQUENCE, BY_ITERATION):
        raise ValueError(f"unknown mode {mode!r}")
    rate = payload.get("transient_error_rate") or 0.0
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
        raise ValueError(f"transient_error_rate must be a number from 0 to 1, not {rate!r}")
    seed = payload.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError(f"seed must be an integer, not {seed!r}")
    return Script(
        steps=payload["steps"],
        match=payload.get("match"),
        mode=mode,
        default=payload.get("default"),
        transient_error_rate=float(rate),
        seed=seed,
    )


# ---------------------------------------------------------------- OpenAI payloads


def estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def tool_call_arguments(call: JSON) -> str:
    arguments = call.get("arguments", "{}")
    # A string goes out verbatim so tests can send malformed JSON.
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def tool_calls_of(step: Step) -> list[JSON]:
    return [
        {
            "id": call.get("id", f"call_{i}"),
            "type": "function",
            "function": {"name": call["name"], "arguments": tool_call_arguments(call)},
        }
        for i, call in enumerate(step.get("tool_calls") or [])
    ]


def finish_reason_of(step: Step) -> str:
    if "finish_reason" in step:
        return str(step["finish_reason"])
    return "tool_calls" if step.get("tool_calls") else "stop"


def usage_of(body: JSON, step: Step) -> JSON:
    produced = (step.get("text") or "") + "".join(
        c["function"]["name"] + c["function"]["arguments"] for c in tool_calls_of(step)
    )
    prompt = estimate_tokens(messages_text(body))
    completion = estimate_tokens(produced)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def envelope(body: JSON, obj: str) -> JSON:
    return {
        "id": f"chatcmpl-fake-{time.monotonic_ns()}",
        "object": obj,
        "created": int(time.time()),
        "model": body.get("model", "fake-model"),
    }


def completion_of(body: JSON, step: Step) -> JSON:
    calls = tool_calls_of(step)
    message: JSON = {"role": "assistant", "content": step.get("text")}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    choices = (
        []
        if step.get("empty_choices")
        else [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason_of(step),
                "logprobs": None,
            }
        ]
    )
    return {**envelope(body, "chat.completion"), "choices": choices, "usage": usage_of(body, step)}


def error_body(status: int, step: Step) -> JSON:
    default_type, default_code = ERROR_TYPES.get(status, ("server_error", "server_error"))
    return {
        "error": {
            "message": step.get("message", f"fake_llm: HTTP {status}"),
            "type": step.get("type", default_type),
            "param": None,
            "code": step.get("code", default_code),
        }
    }


def split_text(text: str, parts: int = 3) -> list[str]:
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


def stream_chunks(body: JSON, step: Step) -> Iterator[JSON]:
    """Yield chat.completion.chunk objects in the order OpenAI streams them."""
    base = envelope(body, "chat.completion.chunk")

    def chunk(delta: JSON, finish: str | None = None) -> JSON:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    if step.get("empty_choices"):
        yield {**base, "choices": []}
        return
    yield chunk({"role": "assistant", "content": ""})
    for piece in split_text(step.get("text") or ""):
        yield chunk({"content": piece})
    for index, call in enumerate(tool_calls_of(step)):
        function = call["function"]
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": function["name"], "arguments": ""},
                    }
                ]
            }
        )
        for fragment in split_text(function["arguments"]):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
    yield chunk({}, finish_reason_of(step))
    if (body.get("stream_options") or {}).get("include_usage"):
        yield {**base, "choices": [], "usage": usage_of(body, step)}


# ---------------------------------------------------------------- HTTP


class FakeLLMHandler(BaseHTTPRequestHandler):
    """Routes: POST /v1/chat/completions (and /chat/completions), POST /_script,
    GET /_requests[?match=...], POST /_reset, GET /_health."""

    # HTTP/1.1 keeps connections alive, which matters with hundreds of concurrent clients.
    protocol_version = "HTTP/1.1"
    server: FakeLLMHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request would drown test output

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/_health":
            self.send_json(200, {"ok": True})
        elif url.path == "/_requests":
            match = parse_qs(url.query).get("match", [None])[0]
            self.send_json(200, {"requests": self.server.state.recorded(match)})
        else:
            self.send_json(404, {"error": {"message": f"no route GET {url.path}"}})

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        raw = self.read_body()
        try:
            self.route_post(path, raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test): there is nobody left to answer
        except Exception as exc:
            # A malformed step is a test bug: say so in the response, not only on stderr.
            message = f"fake_llm: {type(exc).__name__}: {exc}"
            self.send_json(500, {"error": {"message": message, "type": "fake_llm"}})

    def route_post(self, path: str, raw: bytes) -> None:
        if path in COMPLETION_PATHS:
            self.answer_completion(path, raw)
        elif path == "/_script":
            self.install_script(raw)
        elif path == "/_reset":
            self.server.state.reset()
            self.send_json(200, {"ok": True})
        else:
            self.send_json(404, {"error": {"message": f"no route POST {path}"}})

    def read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def install_script(self, raw: bytes) -> None:
        try:
            self.server.state.install(parse_script(json.loads(raw or b"null")))
        except ValueError as exc:  # json.JSONDecodeError is a ValueError too
            self.send_json(400, {"error": {"message": str(exc)}})
            return
        self.send_json(200, {"ok": True})

    def answer_completion(self, path: str, raw: bytes) -> None:
        body = parse_json_object(raw)
        if body is None:
            self.record_request(path, None, None)
            self.send_json(400, {"error": {"message": "fake_llm: body is not a JSON object"}})
            return
        step, problem = self.server.state.choose_step(body)
        # Recorded before answering, so a test sees the attempt even while the answer hangs.
        self.record_request(path, body, step)
        if step is None:
            error = {"message": problem, "type": "fake_llm", "code": "script_exhausted"}
            self.send_json(500, {"error": error})
            return
        self.answer_step(body, step)

    def record_request(self, path: str, body: JSON | None, step: Step | None) -> None:
        self.server.state.record(
            {
                "method": self.command,
                "path": path,
                "headers": dict(self.headers.items()),
                "body": body,
                "received_at": time.time(),
                "step": step,
            }
        )

    def answer_step(self, body: JSON, step: Step) -> None:
        time.sleep(float(step.get("hang", 0)) + float(step.get("delay", 0)))
        if "error" in step:
            self.send_error_step(int(step["error"]), step)
        elif "raw" in step:
            self.send_json(200, step["raw"])
        elif step.get("stream") or body.get("stream"):
            self.send_stream(body, step)
        else:
            self.send_json(200, completion_of(body, step))

    def send_error_step(self, status: int, step: Step) -> None:
        headers = {}
        if step.get("retry_after") is not None:
            headers["Retry-After"] = str(step["retry_after"])
        self.send_json(status, error_body(status, step), headers)

    def send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def send_stream(self, body: JSON, step: Step) -> None:
        # No Content-Length: closing the connection is what ends the event stream.
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        chunk_delay = float(step.get("chunk_delay", 0))
        for chunk in stream_chunks(body, step):
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
            if chunk_delay:
                time.sleep(chunk_delay)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class FakeLLMHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # Hanging requests must never delay shutdown.
    block_on_close = False
    request_queue_size = 1024
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, FakeLLMHandler)
        self.state = ServerState()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client killed mid-request (a chaos soak SIGKILLs workers) is not a server error.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def serve(host: str, port: int) -> None:
    server = FakeLLMHTTPServer((host, port))

    def request_shutdown(*_: object) -> None:
        # shutdown() waits for serve_forever to return, so it must not run on the serving thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, request_shutdown)
    signal.signal(signal.SIGINT, request_shutdown)
    print(f"LISTENING {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Scriptable fake OpenAI chat-completions server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    serve(args.host, args.port)


# ---------------------------------------------------------------- client helper


class FakeLLMServer:
    """A fake LLM server subprocess, driven through its control API."""

    def __init__(self, startup_timeout: float = 10.0) -> None:
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[str] | None = None
        self.port: int | None = None

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("FakeLLMServer is not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base(self) -> str:
        return f"{self.base_url}/v1"

    def start(self) -> FakeLLMServer:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.servers.fake_llm", "--port", "0"],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        self.port = self._read_port(self.process)
        return self

    def _read_port(self, process: subprocess.Popen[str]) -> int:
        stdout = process.stdout
        if stdout is None:
            raise RuntimeError("fake LLM server was started without a stdout pipe")
        lines: list[str] = []
        # readline() has no timeout of its own: a thread bounds the wait for a stuck child.
        reader = threading.Thread(target=lambda: lines.append(stdout.readline()), daemon=True)
        reader.start()
        reader.join(self.startup_timeout)
        line = lines[0].strip() if lines else ""
        if not line.startswith("LISTENING "):
            self.stop()
            raise RuntimeError(
                f"fake LLM server did not print 'LISTENING <port>' within {self.startup_timeout} s "
                f"(got {line!r}, exit code {process.poll()})"
            )
        return int(line.split()[1])

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stdout is not None:
            process.stdout.close()

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def script(
        self,
        steps: list[Step],
        match: str | None = None,
        mode: str = SEQUENCE,
        default: Step | None = None,
        *,
        transient_error_rate: float = 0.0,
        seed: int | None = None,
    ) -> None:
        """Install a script; one with the same `match` is replaced.

        A request is served by the first script whose `match` occurs in the JSON text of its
        `messages` (`json.dumps(messages, ensure_ascii=False)`), else by the script with no
        match; with no script installed at all every request gets the text "ok".
        `mode="sequence"`: each request takes the next step. `mode="by_iteration"`: the step
        index is the number of assistant messages after the last user message, so a re-sent
        transcript gets the same answer. Past the last step: `default`, else HTTP 500 "exhausted".

        Steps (`delay` seconds and `finish_reason` combine with any of them):
            {"text": "hello"}
            {"tool_calls": [{"id": "call_1", "name": "add", "arguments": "{...}" or {...}}],
             "text": optional}    arguments given as a string are sent verbatim
            {"stream": true, ...}  SSE even if the request did not ask; `chunk_delay` optional
            {"error": 429, "message": ..., "retry_after": 1, "type": ..., "code": ...}
            {"hang": 30}           sleep, then answer (the client has usually given up)
            {"empty_choices": true}
            {"raw": {...}}         that exact JSON body with 200, never streamed

        Chaos: `transient_error_rate` (0 to 1) of the requests this script serves get HTTP 429
        (`Retry-After: 0`) or 503 instead, without consuming a step; `seed` makes the draw
        repeatable for a given order of requests. Injected errors are recorded with
        `step["chaos"] is True`.
        """
        payload: JSON = {"steps": steps, "mode": mode}
        if match is not None:
            payload["match"] = match
        if default is not None:
            payload["default"] = default
        if transient_error_rate:
            payload["transient_error_rate"] = transient_error_rate
        if seed is not None:
            payload["seed"] = seed
        self._call("POST", "/_script", payload)

    def requests(self, match: str | None = None) -> list[JSON]:
        query = "" if match is None else "?" + urlencode({"match": match})
        result: list[JSON] = self._call("GET", f"/_requests{query}")["requests"]
        return result

    def reset(self) -> None:
        self._call("POST", "/_reset", {})

    def health(self) -> bool:
        return bool(self._call("GET", "/_health").get("ok"))

    def _call(self, method: str, path: str, payload: Any = None) -> JSON:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                result: JSON = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"fake LLM {method} {path}: {exc.code} {exc.read()!r}") from exc
        return result


def fake_llm_server() -> Iterator[FakeLLMServer]:
    """Generator for a pytest fixture: `yield from fake_llm_server()`."""
    with FakeLLMServer() as server:
        yield server


if __name__ == "__main__":
    main()
