"""The fake LLM's HTTP server (stdlib only, so it starts fast): the chat-completions routes and the
control routes its `FakeLLMServer` client drives. Run it with `python -m app.testing.fake_llm`.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from app.testing.fake_llm.payloads import completion_of, error_body, stream_chunks
from app.testing.fake_llm.script import JSON, ServerState, Step, parse_json_object, parse_script

COMPLETION_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})


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
