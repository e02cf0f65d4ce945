"""`FakeLLMServer`: starts the fake LLM as a real process, scripts it, reads what it was asked,
and stops it, from a test or a benchmark.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

from app.testing.fake_llm.script import JSON, SEQUENCE, Step


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
        """The api_base of litellm's `openai/` models: it appends /chat/completions."""
        return f"{self.base_url}/v1"

    @property
    def anthropic_base(self) -> str:
        """The api_base of litellm's `anthropic/` models: it appends /v1/messages itself, so
        `api_base` (which ends in /v1) would make it ask for /v1/v1/messages."""
        return self.base_url

    def start(self) -> FakeLLMServer:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app.testing.fake_llm", "--port", "0"],
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
        context_window: int | None = None,
        model: str | None = None,
    ) -> None:
        """Install a script; one with the same `match` (and `model`) is replaced.

        The scripts serve both routes: OpenAI chat completions (`openai/` models, `api_base`)
        and Anthropic messages (`anthropic/` models, `anthropic_base`); each step is answered
        in the format of the route it came in on. A request is served by the first script whose
        `match` occurs in the JSON text of its `messages` (`json.dumps(messages,
        ensure_ascii=False)`, preceded by the JSON of a top-level `system`, where the Anthropic
        format keeps the system prompt), else by the script with no match; with no script
        installed at all every request gets the text "ok".
        `mode="sequence"`: each request takes the next step. `mode="by_iteration"`: the step
        index is the number of assistant messages after the last user message (an Anthropic
        user message holding only `tool_result` blocks is not one), so a re-sent transcript
        gets the same answer. Past the last step: `default`, else HTTP 500 "exhausted".

        Steps (`delay` seconds and `finish_reason` combine with any of them):
            {"text": "hello"}
            {"tool_calls": [{"id": "call_1", "name": "add", "arguments": "{...}" or {...}}],
             "text": optional}    arguments given as a string are sent verbatim to OpenAI
                                   clients; Anthropic's `input` is an object, so there a string
                                   that is not a JSON object arrives as {"_raw": the string}
            {"stream": true, ...}  SSE even if the request did not ask; `chunk_delay` seconds
                                   between events and `chunks` (the text's pieces, 3 by
                                   default) optional
            {"error": 429, "message": ..., "retry_after": 1, "type": ..., "code": ...}
                                   in each route's error body (Anthropic: no `code`; its type
                                   follows the status: 429 rate_limit_error, 529
                                   overloaded_error, other 5xx api_error, ...)
            {"hang": 30}           sleep, then answer (the client has usually given up)
            {"empty_choices": true}  OpenAI: "choices": []; Anthropic: "content": []
            {"raw": {...}}         that exact JSON body with 200, never streamed
            {"stream_error": {"after": N, "status": 529, "message": optional}, ...}
                                   streamed (whatever the request asked): the first N
                                   chunks (OpenAI `data:` lines) or events (Anthropic,
                                   message_start and ping included), then the route's
                                   in-stream error (OpenAI `data: {"error": ...}`, Anthropic
                                   `event: error`) instead of the rest and the end marker,
                                   then a clean end of the body; `after` defaults to 0,
                                   `status` to 500
            {"stream_cut": {"after": N}, ...}
                                   streamed: N chunks or events, then the connection closes
                                   mid-body (the chunked body is never terminated)

        Model: a script with `model` serves only the requests for that model (the body's
        `model`, as the provider sees it: `gpt-4o-mini` for litellm's `openai/gpt-4o-mini`),
        before any script without one: a fallback model can answer where another fails.

        Chaos: `transient_error_rate` (0 to 1) of the requests this script serves get HTTP 429
        (`Retry-After: 0`) or the route's overload status (503 OpenAI, 529 Anthropic) instead,
        without consuming a step; `seed` makes the draw repeatable for a given order of
        requests. Injected errors are recorded with `step["chaos"] is True`.

        Window: with `context_window`, a request whose prompt holds more tokens than that
        (counted by a real tokenizer, `tokens.count_prompt`) gets the route's own overflow
        error (OpenAI: 400 `context_length_exceeded`, "maximum context length is N tokens";
        Anthropic: 400 "prompt is too long: M tokens > N maximum") instead of its step, and
        the usage of the others reports that count as the prompt's tokens.
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
        if context_window is not None:
            payload["context_window"] = context_window
        if model is not None:
            payload["model"] = model
        self._call("POST", "/_script", payload)

    def requests(self, match: str | None = None, wait: float = 0.0) -> list[JSON]:
        """The requests received (whose messages hold `match`); with `wait`, the server waits
        up to that many seconds for the first to arrive (no polling)."""
        parameters = {} if match is None else {"match": match}
        if wait:
            parameters["wait"] = str(wait)
        query = "?" + urlencode(parameters) if parameters else ""
        timeout = 10 + wait
        result: list[JSON] = self._call("GET", f"/_requests{query}", timeout=timeout)["requests"]
        return result

    def request_count(self) -> int:
        """How many requests it answered (without their bodies)."""
        found: int = self._call("GET", "/_requests?count=1")["count"]
        return found

    def reset(self) -> None:
        self._call("POST", "/_reset", {})

    def health(self) -> bool:
        return bool(self._call("GET", "/_health").get("ok"))

    def _call(self, method: str, path: str, payload: Any = None, timeout: float = 10) -> JSON:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                result: JSON = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"fake LLM {method} {path}: {exc.code} {exc.read()!r}") from exc
        return result


def fake_llm_server() -> Iterator[FakeLLMServer]:
    """Generator for a pytest fixture: `yield from fake_llm_server()`."""
    with FakeLLMServer() as server:
        yield server
