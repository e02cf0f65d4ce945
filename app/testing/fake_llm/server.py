"""The fake LLM's HTTP server (the standard library only at start, so it starts fast; tiktoken,
which litellm brings, is loaded by the first request that counts tokens: a script's window, a
prompt cache's mark): the OpenAI chat-completions and Anthropic messages routes, and the control
routes its `FakeLLMServer` client drives. Run it with `python -m app.testing.fake_llm`.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from app.testing.fake_llm import anthropic, payloads
from app.testing.fake_llm.script import (
    ANTHROPIC_TRANSIENT_STATUSES,
    JSON,
    TRANSIENT_STATUSES,
    ServerState,
    Step,
    parse_json_object,
    parse_script,
)
from app.testing.fake_llm.tokens import count_prompt


@dataclass(frozen=True)
class Dialect:
    """One wire format the fake speaks: what a step becomes in it, streamed or not."""

    answer: Callable[[JSON, Step], JSON]
    error: Callable[[int, Step], JSON]
    # The SSE frames of a stream, its end marker excluded.
    frames: Callable[[JSON, Step], Iterator[str]]
    error_frame: Callable[[int, Step], str]
    end_marker: str | None
    transient_statuses: tuple[int, int]
    # The error step of a request longer than the script's `context_window` (tokens, window).
    overflow: Callable[[int, int], Step]


def openai_frames(body: JSON, step: Step) -> Iterator[str]:
    for chunk in payloads.stream_chunks(body, step):
        yield f"data: {json.dumps(chunk)}\n\n"


def openai_error_frame(status: int, spec: Step) -> str:
    return f"data: {json.dumps(payloads.stream_error_body(status, spec))}\n\n"


def anthropic_frames(body: JSON, step: Step) -> Iterator[str]:
    for event, data in anthropic.stream_events(body, step):
        yield f"event: {event}\ndata: {json.dumps(data)}\n\n"


def anthropic_error_frame(status: int, spec: Step) -> str:
    return f"event: error\ndata: {json.dumps(anthropic.error_body(status, spec))}\n\n"


OPENAI = Dialect(
    answer=payloads.completion_of,
    error=payloads.error_body,
    frames=openai_frames,
    error_frame=openai_error_frame,
    end_marker="data: [DONE]\n\n",
    transient_statuses=TRANSIENT_STATUSES,
    overflow=payloads.overflow_step,
)
# litellm's anthropic/ provider appends /v1/messages to the api_base it is given.
ANTHROPIC = Dialect(
    answer=anthropic.message_of,
    error=anthropic.error_body,
    frames=anthropic_frames,
    error_frame=anthropic_error_frame,
    end_marker=None,  # message_stop, the last event, ends the stream
    transient_statuses=ANTHROPIC_TRANSIENT_STATUSES,
    overflow=anthropic.overflow_step,
)
# Step options that only make sense in a stream, so they stream whatever the request asked.
MAX_WAIT_S = 30.0  # the longest a GET /_requests?wait= waits for a request
STREAM_ENDINGS = frozenset({"stream_error", "stream_cut"})
DIALECTS = {
    "/v1/chat/completions": OPENAI,
    "/chat/completions": OPENAI,
    "/v1/messages": ANTHROPIC,
}


class FakeLLMHandler(BaseHTTPRequestHandler):
    """Routes: POST /v1/chat/completions (and /chat/completions), POST /v1/messages,
    POST /_script, GET /_requests[?match=...][&count=1][&wait=SECONDS], POST /_reset,
    GET /_health."""

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
            query = parse_qs(url.query)
            wait = min(float(query.get("wait", ["0"])[0]), MAX_WAIT_S)
            found = self.server.state.recorded(query.get("match", [None])[0], wait)
            if query.get("count"):  # (how many only: a benchmark's requests hold megabytes)
                self.send_json(200, {"count": len(found)})
            else:
                self.send_json(200, {"requests": found})
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
            dialect = DIALECTS.get(path, OPENAI)
            self.send_json(500, dialect.error(500, {"message": message, "type": "fake_llm"}))

    def route_post(self, path: str, raw: bytes) -> None:
        dialect = DIALECTS.get(path)
        if dialect is not None:
            self.answer_completion(path, raw, dialect)
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

    def answer_completion(self, path: str, raw: bytes, dialect: Dialect) -> None:
        body = parse_json_object(raw)
        if body is None:
            self.record_request(path, None, None)
            message = "fake_llm: body is not a JSON object"
            self.send_json(400, dialect.error(400, {"message": message}))
            return
        step, problem = self.server.state.choose_step(body, dialect.transient_statuses)
        if step is not None and "error" not in step:
            step = self.cached(body, step, dialect)
        # Recorded before answering, so a test sees the attempt even while the answer hangs.
        self.record_request(path, body, step)
        if step is None:
            spec = {"message": problem, "type": "fake_llm", "code": "script_exhausted"}
            self.send_json(500, dialect.error(500, spec))
            return
        self.answer_step(body, step, dialect)

    def cached(self, body: JSON, step: Step, dialect: Dialect) -> Step:
        """The step, with what the request read from the prompt cache and wrote to it when it
        asked for caching (its prompt then counted by the tokenizer)."""
        marked = "prompt_cache_key" in body or "cache_control" in json.dumps(body)
        if not marked:
            return step
        cache = self.server.state.cache
        prompt = step.get("prompt_tokens") or count_prompt(body)
        if dialect is ANTHROPIC:
            read, written = cache.anthropic(body, prompt)
        else:
            read, written = cache.openai(body, prompt), 0
        return {**step, "prompt_tokens": prompt, "cache": {"read": read, "written": written}}

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

    def answer_step(self, body: JSON, step: Step, dialect: Dialect) -> None:
        time.sleep(float(step.get("hang", 0)) + float(step.get("delay", 0)))
        if "error" in step:
            self.send_error_step(int(step["error"]), step, dialect)
        elif "raw" in step:
            self.send_json(200, step["raw"])
        elif step.get("stream") or body.get("stream") or STREAM_ENDINGS & step.keys():
            self.send_stream(body, step, dialect)
        else:
            self.send_json(200, dialect.answer(body, step))

    def send_error_step(self, status: int, step: Step, dialect: Dialect) -> None:
        if "overflow" in step:
            step = {
                **step,
                **dialect.overflow(step["overflow"]["tokens"], step["overflow"]["window"]),
            }
        headers = {}
        if step.get("retry_after") is not None:
            headers["Retry-After"] = str(step["retry_after"])
        self.send_json(status, dialect.error(status, step), headers)

    def send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def send_stream(self, body: JSON, step: Step, dialect: Dialect) -> None:
        # Chunked, as real providers stream over HTTP/1.1: a connection dropped mid-stream
        # (`stream_cut`) is then a truncated body the client can tell from a finished one. A
        # finished stream keeps its connection for the next request, as a provider's does (a
        # new connection per call cost the worker a TCP connect in every model call measured).
        error, cut = step.get("stream_error"), step.get("stream_cut")
        self.close_connection = cut is not None
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        if cut is not None:
            self.send_header("Connection", "close")
        self.end_headers()
        frames = list(dialect.frames(body, step))
        ending = error if error is not None else cut
        if ending is not None:
            frames = frames[: int(ending.get("after", 0))]
        elif dialect.end_marker is not None:
            frames.append(dialect.end_marker)
        if error is not None:
            frames.append(dialect.error_frame(int(error.get("status", 500)), error))
        chunk_delay = float(step.get("chunk_delay", 0))
        for i, frame in enumerate(frames):
            if i and chunk_delay:
                time.sleep(chunk_delay)
            self.write_chunk(frame)
        if cut is not None:
            return  # no last chunk: the client sees the connection drop mid-body
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def write_chunk(self, frame: str) -> None:
        data = frame.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
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
    parser = argparse.ArgumentParser(
        description="Scriptable fake OpenAI and Anthropic chat server."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    serve(args.host, args.port)
