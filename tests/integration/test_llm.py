"""`LiteLLMClient` over real HTTP against the scriptable fake LLM server: replies become plain
values, transient failures are retried by the one policy, and no error message leaks a key.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.testing.fake_llm import FakeLLMServer
from app.worker.llm import LiteLLMClient
from app.worker.offer import check_call
from app.worker.plan import Entry, ToolCall
from app.worker.ports import ModelError, ModelReply, ModelRequest, Usage
from app.worker.transcript import Transcript

API_KEY = "sk-test-canary-1234567890"
ENV_CANARY = "sk-canary-abcdefgh12345"
MODEL = "openai/fake-model"
USER_HI = [{"role": "user", "content": "hi"}]
ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two numbers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    },
}


class RecordingSleep:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


@pytest.fixture(autouse=True)
def fresh_server(server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.reset()
    monkeypatch.setenv("CANARY_API_KEY", ENV_CANARY)


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()


def complete(
    server: FakeLLMServer,
    sleep: RecordingSleep,
    *,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: str = "auto",
    timeout: float = 10,
) -> ModelReply:
    client = LiteLLMClient(timeout=timeout, api_base=server.api_base, api_key=API_KEY, sleep=sleep)
    request = ModelRequest(MODEL, USER_HI, tools or [], tool_choice)
    return asyncio.run(client.complete(request))


def failure(server: FakeLLMServer, sleep: RecordingSleep, **kwargs: Any) -> str:
    with pytest.raises(ModelError) as caught:
        complete(server, sleep, **kwargs)
    message = str(caught.value)
    assert API_KEY not in message
    assert ENV_CANARY not in message
    return message


# ---------------------------------------------------------------- replies


def test_a_text_reply_becomes_content_finish_reason_and_usage(
    server: FakeLLMServer, sleep: RecordingSleep
) -> None:
    server.script([{"text": "hello there"}])

    reply = complete(server, sleep)

    assert reply.content == "hello there"
    assert reply.tool_calls == ()
    assert reply.finish_reason == "stop"
    assert type(reply.usage) is Usage
    assert reply.usage.prompt_tokens > 0
    assert reply.usage.completion_tokens > 0
    [request] = server.requests()
    headers = {name.lower(): value for name, value in request["headers"].items()}
    assert headers["authorization"] == f"Bearer {API_KEY}"
    assert request["body"]["messages"] == USER_HI


def test_several_tool_calls_keep_order_ids_and_raw_arguments(
    server: FakeLLMServer, sleep: RecordingSleep
) -> None:
    calls = [
        {"id": "call_a", "name": "add", "arguments": '{"a": 1, "b": 2}'},
        {"id": "call_b", "name": "add", "arguments": '{"a": 1,'},  # malformed, kept verbatim
        {"id": "call_c", "name": "lookup", "arguments": {"q": "x"}},
    ]
    server.script([{"tool_calls": calls, "text": "let me check"}])

    reply = complete(server, sleep, tools=[ADD_TOOL])

    assert reply.content == "let me check"
    assert reply.finish_reason == "tool_calls"
    assert reply.tool_calls == (
        ToolCall("call_a", "add", '{"a": 1, "b": 2}'),
        ToolCall("call_b", "add", '{"a": 1,'),
        ToolCall("call_c", "lookup", '{"q": "x"}'),
    )
    assert all(type(call) is ToolCall for call in reply.tool_calls)


def test_tools_and_tool_choice_reach_the_server(
    server: FakeLLMServer, sleep: RecordingSleep
) -> None:
    complete(server, sleep, tools=[ADD_TOOL], tool_choice="required")

    [request] = server.requests()
    assert request["body"]["tools"] == [ADD_TOOL]
    assert request["body"]["tool_choice"] == "required"


def test_no_tools_sends_neither_tools_nor_tool_choice(
    server: FakeLLMServer, sleep: RecordingSleep
) -> None:
    complete(server, sleep, tools=[])

    [request] = server.requests()
    assert "tools" not in request["body"]
    assert "tool_choice" not in request["body"]


# ---------------------------------------------------------------- the retry policy


def test_two_rate_limits_then_success_is_one_reply_after_waits_of_3_and_6(
    server: FakeLLMServer, sleep: RecordingSleep
) -> None:
    rate_limited = {"error": 429, "message": "Rate limit reached"}
    server.script([rate_limited, rate_limited, {"text": "finally"}])

    reply = complete(server, sleep)

    assert reply.content == "finally"
    assert sleep.waits == [3, 6]
    assert len(server.requests()) == 3


@pytest.mark.parametrize("route", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [False, True])
def test_the_provider_s_retry_after_is_honoured_in_both_formats(
    server: FakeLLMServer, sleep: RecordingSleep, route: str, stream: bool
) -> None:
    """Through litellm's real HTTP path: a 429 asking for 5 s waits 5 s (longer than the 3 s
    step), a 503 asking for 1 s waits the 6 s step; then the answer."""
    model, base = (
        (MODEL, server.api_base)
        if route == "openai"
        else ("anthropic/claude-fake", server.anthropic_base)
    )
    server.script(
        [
            {"error": 429, "message": "Rate limit reached", "retry_after": 5},
            {"error": 503, "message": "Service unavailable", "retry_after": 1},
            {"text": "at last"},
        ]
    )
    client = LiteLLMClient(timeout=10, api_base=base, api_key=API_KEY, sleep=sleep, stream=stream)
    reply = asyncio.run(client.complete(ModelRequest(model, USER_HI, [], "auto")))
    assert reply.content == "at last"
    assert sleep.waits == [5.0, 6.0]
    assert len(server.requests()) == 3


@pytest.mark.parametrize("route", ["openai", "anthropic"])
def test_a_retry_after_beyond_the_cap_fails_at_once_with_the_provider_s_wait(
    server: FakeLLMServer, sleep: RecordingSleep, route: str
) -> None:
    model, base = (
        (MODEL, server.api_base)
        if route == "openai"
        else ("anthropic/claude-fake", server.anthropic_base)
    )
    server.script([{"error": 429, "message": "Slow down", "retry_after": 90}, {"text": "no"}])
    client = LiteLLMClient(
        timeout=10, api_base=base, api_key=API_KEY, sleep=sleep, max_retry_after=30
    )
    with pytest.raises(ModelError) as caught:
        asyncio.run(client.complete(ModelRequest(model, USER_HI, [], "auto")))
    message = str(caught.value)
    assert message.startswith("LLM call failed (HTTP 429 RateLimitError): ")
    assert message.endswith(
        "; the provider asked to wait 90 s before retrying, more than the 30 s this worker "
        "waits (CHATWORKER_LLM_MAX_RETRY_AFTER_SECONDS)"
    )
    assert API_KEY not in message
    assert sleep.waits == [] and len(server.requests()) == 1


def test_a_call_s_cost_is_litellm_s_price_and_an_unpriced_model_s_is_unknown(
    server: FakeLLMServer, sleep: RecordingSleep
) -> None:
    import litellm

    server.script([{"text": "priced"}, {"text": "unpriced"}])
    client = LiteLLMClient(timeout=10, api_base=server.api_base, api_key=API_KEY, sleep=sleep)
    known = asyncio.run(client.complete(ModelRequest("openai/gpt-4o-mini", USER_HI, [], "auto")))
    prompt, completion = litellm.cost_per_token(
        model="openai/gpt-4o-mini",
        prompt_tokens=known.usage.prompt_tokens,
        completion_tokens=known.usage.completion_tokens,
    )
    assert known.usage.prompt_tokens > 0
    assert known.usage.cost_usd == pytest.approx(prompt + completion) and prompt > 0
    unknown = asyncio.run(client.complete(ModelRequest(MODEL, USER_HI, [], "auto")))
    assert unknown.usage.prompt_tokens > 0 and unknown.usage.cost_usd is None


def test_three_unavailable_answers_fail_after_exactly_three_requests(
    server: FakeLLMServer, sleep: RecordingSleep
) -> None:
    server.script([{"error": 503, "message": "upstream down"}] * 3)

    message = failure(server, sleep)

    assert message == (
        "LLM call failed after 3 attempts (HTTP 503 ServiceUnavailableError): upstream down"
    )
    assert sleep.waits == [3, 6]
    assert len(server.requests()) == 3


def test_a_bad_request_fails_at_once(server: FakeLLMServer, sleep: RecordingSleep) -> None:
    server.script([{"error": 400, "message": "messages: field required"}])

    message = failure(server, sleep)

    assert message == "LLM call failed (HTTP 400 BadRequestError): messages: field required"
    assert sleep.waits == []
    assert len(server.requests()) == 1


def test_a_rejected_key_fails_at_once_with_every_key_redacted(
    server: FakeLLMServer, sleep: RecordingSleep
) -> None:
    server.script(
        [{"error": 401, "message": f"Incorrect API key provided: {ENV_CANARY} ({API_KEY})"}]
    )

    message = failure(server, sleep)

    assert message == (
        "LLM call failed (HTTP 401 AuthenticationError): "
        "Incorrect API key provided: [REDACTED] ([REDACTED])"
    )
    assert sleep.waits == []
    assert len(server.requests()) == 1


def test_a_hanging_model_times_out_quickly_and_is_not_retried(
    server: FakeLLMServer, sleep: RecordingSleep
) -> None:
    server.script([{"hang": 60}])
    started = time.monotonic()

    message = failure(server, sleep, timeout=1)

    assert message == "LLM request timed out after 1 s"
    # Cut short by the 1 s timeout, not the 60 s hang; the slack is for a loaded machine (a CI
    # run once took 6.8 s here).
    assert time.monotonic() - started < 30
    assert sleep.waits == []
    assert len(server.requests()) == 1


def test_empty_choices_are_a_model_error(server: FakeLLMServer, sleep: RecordingSleep) -> None:
    server.script([{"empty_choices": True}])

    assert failure(server, sleep) == "The model returned no choices"
    assert len(server.requests()) == 1


# --- the history as litellm converts it for Anthropic -----------------------------------------


def anthropic_tool_inputs(messages: list[dict[str, Any]]) -> list[Any]:
    """The `input` of every tool_use block litellm's Anthropic conversion makes of `messages`."""
    from app.worker.llm import prepare_litellm

    prepare_litellm()
    from litellm.litellm_core_utils.prompt_templates.factory import anthropic_messages_pt

    converted = anthropic_messages_pt(
        messages,  # type: ignore[arg-type]
        model="claude-sonnet-4-5",
        llm_provider="anthropic",
    )
    return [
        block["input"]
        for message in converted
        if isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "tool_use"
    ]


def test_a_call_whose_arguments_are_not_an_object_is_resent_to_anthropic_as_an_object() -> None:
    call = ToolCall("call_1", "add", "[1,2]")
    refusal = check_call(call, offered={"add"}, known={"add"})
    assert isinstance(refusal, str) and "expected a JSON object" in refusal
    transcript = Transcript(
        None,
        [
            Entry(1, "user", "add one and two"),
            Entry(2, "assistant", None, (call,)),
            Entry(3, "tool", refusal, tool_call_id=call.id, tool_name=call.name, is_error=True),
        ],
    )
    messages = transcript.provider_messages()

    inputs = anthropic_tool_inputs(messages)
    assert len(inputs) == 1
    assert all(isinstance(tool_input, dict) for tool_input in inputs)
    # The model's raw arguments, resent verbatim, become a list `input`, which Anthropic rejects.
    verbatim = copy.deepcopy(messages)
    verbatim[1]["tool_calls"][0]["function"]["arguments"] = call.arguments
    assert anthropic_tool_inputs(verbatim) == [[1, 2]]


# ---------------------------------------------------------------- streaming


class RecordingSink:
    """A `ReplySink` that keeps what it was sent."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.calls: list[tuple[int, str | None, str | None, str]] = []
        self.restarts: list[str] = []

    def text(self, fragment: str) -> None:
        self.texts.append(fragment)

    def call(self, index: int, call_id: str | None, name: str | None, fragment: str) -> None:
        self.calls.append((index, call_id, name, fragment))

    def restart(self, reason: str) -> None:
        self.restarts.append(reason)


ROUTES = {"openai": MODEL, "anthropic": "anthropic/claude-fake"}


def stream(
    server: FakeLLMServer,
    sleep: RecordingSleep,
    sink: RecordingSink,
    route: str = "openai",
    tools: list[dict[str, Any]] | None = None,
) -> ModelReply:
    base = server.anthropic_base if route == "anthropic" else server.api_base
    client = LiteLLMClient(timeout=10, api_base=base, api_key=API_KEY, sleep=sleep)
    request = ModelRequest(ROUTES[route], USER_HI, tools or [], "auto")
    return asyncio.run(client.complete(request, sink))


@pytest.mark.parametrize("route", ROUTES)
def test_a_streamed_reply_reaches_the_sink_piece_by_piece_and_the_caller_whole(
    server: FakeLLMServer, sleep: RecordingSleep, route: str
) -> None:
    text = "The answer comes in many small pieces, like a real model's."
    server.script([{"text": text, "chunks": 8}])
    sink = RecordingSink()

    reply = stream(server, sleep, sink, route)

    assert len(sink.texts) >= 8 and "".join(sink.texts) == text == reply.content
    assert reply.finish_reason == "stop"
    assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
    assert sink.restarts == []
    assert server.requests()[0]["body"]["stream"] is True


@pytest.mark.parametrize("route", ROUTES)
def test_streamed_tool_calls_come_with_id_and_name_first_then_their_arguments(
    server: FakeLLMServer, sleep: RecordingSleep, route: str
) -> None:
    server.script(
        [
            {
                "tool_calls": [
                    {"id": "call_a", "name": "add", "arguments": {"a": 1, "b": 2}},
                    {"id": "call_b", "name": "add", "arguments": {"a": 3, "b": 4}},
                ]
            }
        ]
    )
    sink = RecordingSink()

    reply = stream(server, sleep, sink, route, tools=[ADD_TOOL])

    assert [(c.id, c.name) for c in reply.tool_calls] == [("call_a", "add"), ("call_b", "add")]
    assert [json.loads(c.arguments) for c in reply.tool_calls] == [
        {"a": 1, "b": 2},
        {"a": 3, "b": 4},
    ]
    for index, call in enumerate(reply.tool_calls):
        sent = [c for c in sink.calls if c[0] == index]
        assert sent[0][1:3] == (call.id, call.name)
        assert all(c[1] is None and c[2] is None for c in sent[1:])
        assert "".join(c[3] for c in sent) == call.arguments
    assert reply.finish_reason == "tool_calls"


@pytest.mark.parametrize(("route", "status"), [("openai", 503), ("anthropic", 529)])
def test_a_transient_error_during_the_stream_restarts_the_sink_and_the_retry_answers(
    server: FakeLLMServer, sleep: RecordingSleep, route: str, status: int
) -> None:
    server.script(
        [
            {
                "text": "a first try that breaks",
                "chunks": 6,
                "stream_error": {"after": 4, "status": status},
            },
            {"text": "the whole answer"},
        ]
    )
    sink = RecordingSink()

    reply = stream(server, sleep, sink, route)

    assert reply.content == "the whole answer"
    assert sleep.waits == [3]
    assert len(sink.restarts) == 1 and sink.restarts[0].endswith("; retrying in 3 s")
    assert "".join(sink.texts).endswith("the whole answer")
    assert len(server.requests()) == 2


def test_a_stream_that_never_recovers_fails_after_three_attempts_like_any_call(
    server: FakeLLMServer, sleep: RecordingSleep
) -> None:
    broken = {"text": "never whole", "stream_error": {"after": 2, "status": 503}}
    server.script([broken, broken, broken])
    sink = RecordingSink()
    with pytest.raises(ModelError, match="after 3 attempts"):
        stream(server, sleep, sink)
    assert sleep.waits == [3, 6] and len(sink.restarts) == 2


def test_without_streaming_the_sink_hears_nothing_and_the_reply_is_the_same(
    server: FakeLLMServer, sleep: RecordingSleep
) -> None:
    server.script([{"text": "whole at once"}])
    sink = RecordingSink()
    client = LiteLLMClient(
        timeout=10, api_base=server.api_base, api_key=API_KEY, sleep=sleep, stream=False
    )
    reply = asyncio.run(client.complete(ModelRequest(MODEL, USER_HI), sink))
    assert reply.content == "whole at once" and sink.texts == []
    assert (
        "stream" not in server.requests()[0]["body"] or not server.requests()[0]["body"]["stream"]
    )


def _connections_to(port: int) -> int:
    """Established TCP connections of this machine whose remote end is 127.0.0.1:`port`."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote, state = fields[2], fields[3]
        if remote == f"0100007F:{port:04X}" and state == "01":
            count += 1
    return count


def test_cancelling_a_streamed_call_closes_its_connection_at_once(
    server: FakeLLMServer, sleep: RecordingSleep
) -> None:
    server.script([{"text": "slow " * 40, "chunks": 40, "chunk_delay": 0.5}])
    sink = RecordingSink()
    client = LiteLLMClient(timeout=30, api_base=server.api_base, api_key=API_KEY, sleep=sleep)
    port = server.port
    assert port is not None
    idle = _connections_to(port)  # pooled keep-alive connections of earlier calls

    async def cancel_midway() -> int:
        task = asyncio.create_task(client.complete(ModelRequest(MODEL, USER_HI), sink))
        while not sink.texts:
            await asyncio.sleep(0.01)
        streaming = _connections_to(port)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return streaming

    # The stream takes a new connection or a pooled one of earlier calls; either way, once it
    # is cancelled its connection is closed, not pooled: one fewer than while it streamed.
    streaming = asyncio.run(cancel_midway())
    assert streaming in (idle, idle + 1)
    deadline = time.monotonic() + 2
    while _connections_to(port) >= streaming and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _connections_to(port) < streaming  # the streaming connection is gone, not pooled
    assert sink.restarts == []  # a cancel is not a retry


# ---------------------------------------------------------------- the route the worker takes


def test_openai_models_go_through_litellm_s_own_http_handler_not_the_openai_sdk(
    server: FakeLLMServer, sleep: RecordingSleep
) -> None:
    """The SDK's request transform grows with the history (docs/PERFORMANCE.md): the worker
    sets litellm's own handler for `openai/` before importing it."""
    server.script([{"text": "hi"}])
    complete(server, sleep)
    headers = server.requests()[0]["headers"]
    assert headers["user-agent"].startswith("litellm/")
    assert not any(name.startswith("x-stainless") for name in headers)


@pytest.mark.parametrize("route", ROUTES)
def test_on_that_route_a_stream_that_stalls_times_out_and_is_not_retried(
    server: FakeLLMServer, sleep: RecordingSleep, route: str
) -> None:
    server.script([{"text": "one two three four", "chunks": 4, "chunk_delay": 20}])
    base = server.anthropic_base if route == "anthropic" else server.api_base
    client = LiteLLMClient(timeout=1, api_base=base, api_key=API_KEY, sleep=sleep)
    started = time.monotonic()
    with pytest.raises(ModelError, match=r"^LLM request timed out after 1 s$"):
        asyncio.run(client.complete(ModelRequest(ROUTES[route], USER_HI), RecordingSink()))
    assert time.monotonic() - started < 10  # cut at 1 s, not after the 20 s stall
    assert sleep.waits == [] and len(server.requests()) == 1


@pytest.mark.parametrize("route", ROUTES)
def test_on_that_route_a_429_is_a_rate_limit_retried_3_s_later(
    server: FakeLLMServer, sleep: RecordingSleep, route: str
) -> None:
    server.script([{"error": 429, "message": "Rate limit reached"}, {"text": "ok now"}])
    reply = stream(server, sleep, RecordingSink(), route)
    assert reply.content == "ok now"
    assert sleep.waits == [3] and len(server.requests()) == 2


def test_an_error_body_passed_on_whole_is_reported_by_its_message(
    server: FakeLLMServer, sleep: RecordingSleep
) -> None:
    server.script([{"error": 400, "message": "The 'tools' parameter is malformed"}])
    assert failure(server, sleep) == (
        "LLM call failed (HTTP 400 BadRequestError): The 'tools' parameter is malformed"
    )
