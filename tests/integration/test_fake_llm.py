"""Specification of the fake LLM server, driven through the real litellm client over HTTP.
Also pins down how litellm 1.106 reports each failure the worker must classify.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest

from app.testing.fake_llm import FakeLLMServer
from app.worker.llm import is_transient, prepare_litellm

# litellm as the worker configures it (the routes it takes depend on the environment, which is
# read at every call), whichever test of this process ran first.
prepare_litellm()

import litellm  # noqa: E402
from litellm.exceptions import MidStreamFallbackError  # noqa: E402

USER_HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


@pytest.fixture(autouse=True)
def fresh_server(server: FakeLLMServer) -> None:
    server.reset()


def complete(
    server: FakeLLMServer, messages: list[dict[str, Any]] | None = None, **kwargs: Any
) -> Any:
    options: dict[str, Any] = {"max_retries": 0, "timeout": 10, **kwargs}
    return litellm.completion(
        model="openai/fake-model",
        api_base=server.api_base,
        api_key="sk-test",
        messages=messages or USER_HI,
        **options,
    )


def tool_calls_as_dicts(message: Any) -> list[dict[str, str]]:
    return [
        {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
        for c in message.tool_calls
    ]


# ---------------------------------------------------------------- answers


def test_a_wait_for_a_request_returns_when_it_arrives_and_empty_when_none_does(
    server: FakeLLMServer,
) -> None:
    """`requests(match, wait=)`: the benchmark's probe waits on the server, not by polling."""
    assert server.requests("[never sent]", wait=0.3) == []  # waited, nothing came
    found: list[list[Any]] = []
    waiting = threading.Thread(target=lambda: found.append(server.requests("[awaited]", wait=20)))
    waiting.start()
    time.sleep(0.2)
    complete(server, [{"role": "user", "content": "unrelated"}])  # wakes it; not a match
    time.sleep(0.2)
    assert waiting.is_alive()
    started = time.monotonic()
    complete(server, [{"role": "user", "content": "[awaited] hi"}])
    waiting.join(20)
    assert time.monotonic() - started < 10  # (far under the 20 s it would otherwise wait)
    assert [r["body"]["messages"][0]["content"] for r in found[0]] == ["[awaited] hi"]


def test_with_no_script_every_request_gets_ok(server: FakeLLMServer) -> None:
    assert complete(server).choices[0].message.content == "ok"


def test_text_answer_returns_content_and_usage_and_is_recorded(server: FakeLLMServer) -> None:
    server.script([{"text": "hello there"}])

    response = complete(server, [{"role": "system", "content": "be brief"}, *USER_HI])

    assert response.choices[0].message.content == "hello there"
    assert response.choices[0].finish_reason == "stop"
    assert response.model == "fake-model"
    usage = response.usage
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    [request] = server.requests()
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-test"
    assert request["body"]["model"] == "fake-model"
    assert request["body"]["messages"] == [{"role": "system", "content": "be brief"}, *USER_HI]
    assert request["step"] == {"text": "hello there"}


def test_async_completion_uses_the_same_server(server: FakeLLMServer) -> None:
    server.script([{"text": "async hello"}])

    async def call() -> Any:
        return await litellm.acompletion(
            model="openai/fake-model",
            api_base=server.api_base,
            api_key="sk-test",
            messages=USER_HI,
            max_retries=0,
            timeout=10,
        )

    assert asyncio.run(call()).choices[0].message.content == "async hello"


def test_one_tool_call_comes_back_as_sent(server: FakeLLMServer) -> None:
    server.script(
        [{"tool_calls": [{"id": "call_1", "name": "add", "arguments": {"a": 1, "b": 2}}]}]
    )

    choice = complete(server).choices[0]

    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert tool_calls_as_dicts(choice.message) == [
        {"id": "call_1", "name": "add", "arguments": '{"a": 1, "b": 2}'}
    ]


def test_several_tool_calls_in_one_message_keep_order_ids_and_text(
    server: FakeLLMServer,
) -> None:
    calls = [
        {"id": "call_a", "name": "add", "arguments": '{"a":1,"b":2}'},
        {"id": "call_b", "name": "lookup", "arguments": '{"q":"x"}'},
        {"id": "call_c", "name": "add", "arguments": "{}"},
    ]
    server.script([{"tool_calls": calls, "text": "let me check"}])

    message = complete(server).choices[0].message

    assert message.content == "let me check"
    assert tool_calls_as_dicts(message) == calls


def test_malformed_tool_arguments_arrive_verbatim(server: FakeLLMServer) -> None:
    server.script([{"tool_calls": [{"id": "call_1", "name": "add", "arguments": '{"a": 1,'}]}])

    [call] = complete(server).choices[0].message.tool_calls

    assert call.function.arguments == '{"a": 1,'
    with pytest.raises(json.JSONDecodeError):
        json.loads(call.function.arguments)


def test_finish_reason_can_be_overridden(server: FakeLLMServer) -> None:
    server.script([{"text": "truncat", "finish_reason": "length"}])

    assert complete(server).choices[0].finish_reason == "length"


def test_empty_choices_are_returned_not_raised(server: FakeLLMServer) -> None:
    # litellm does not treat "choices": [] as an error: the caller must check.
    server.script([{"empty_choices": True}])

    response = complete(server)

    assert response.choices == []
    assert response.usage.total_tokens > 0


def test_raw_step_sends_that_exact_body(server: FakeLLMServer) -> None:
    raw = {
        "id": "chatcmpl-raw",
        "object": "chat.completion",
        "created": 1,
        "model": "raw-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "raw"},
                "finish_reason": "stop",
            }
        ],
    }
    server.script([{"raw": raw}])

    response = complete(server)

    assert response.id == "chatcmpl-raw"
    assert response.choices[0].message.content == "raw"


# ---------------------------------------------------------------- failures


def test_rate_limit_raises_rate_limit_error_with_retry_after_and_no_sdk_retry(
    server: FakeLLMServer,
) -> None:
    server.script([{"error": 429, "message": "Rate limit reached", "retry_after": 1}])

    with pytest.raises(litellm.RateLimitError) as caught:
        complete(server)

    assert caught.value.status_code == 429
    assert "Rate limit reached" in str(caught.value)
    headers = {k.lower(): v for k, v in caught.value.litellm_response_headers.items()}
    assert headers["retry-after"] == "1"
    assert len(server.requests()) == 1


@pytest.mark.parametrize(
    ("status", "exception"),
    [
        (400, litellm.BadRequestError),
        (401, litellm.AuthenticationError),
        (404, litellm.NotFoundError),
        (500, litellm.InternalServerError),
        (502, litellm.BadGatewayError),
        (503, litellm.ServiceUnavailableError),
    ],
)
def test_error_status_maps_to_litellm_exception(
    server: FakeLLMServer, status: int, exception: type[Exception]
) -> None:
    server.script([{"error": status, "message": f"boom {status}"}])

    with pytest.raises(exception) as caught:
        complete(server)

    assert caught.value.status_code == status  # type: ignore[attr-defined]
    assert f"boom {status}" in str(caught.value)
    assert len(server.requests()) == 1


def test_litellm_maps_by_error_text_before_status(server: FakeLLMServer) -> None:
    # Why the worker must classify on status_code, never on the exception class alone.
    server.script([{"error": 401, "message": "bad key", "type": "invalid_request_error"}])

    with pytest.raises(litellm.BadRequestError) as caught:
        complete(server)

    assert caught.value.status_code == 401


def test_hanging_model_raises_timeout_within_the_call_timeout(server: FakeLLMServer) -> None:
    server.script([{"hang": 20}])
    started = time.monotonic()

    with pytest.raises(litellm.Timeout):
        complete(server, timeout=1)

    assert time.monotonic() - started < 10  # cut at 1 s, not after the 20 s hang
    assert len(server.requests()) == 1


def test_a_slow_request_does_not_block_others(server: FakeLLMServer) -> None:
    server.script([{"delay": 3.0, "text": "slow"}], match="slow please")
    server.script([{"text": "fast"}])
    slow_answers: list[str] = []
    slow = threading.Thread(
        target=lambda: slow_answers.append(
            complete(server, [{"role": "user", "content": "slow please"}])
            .choices[0]
            .message.content
        )
    )
    slow.start()
    while not server.requests(match="slow please"):
        time.sleep(0.01)

    fast = complete(server).choices[0].message.content

    assert fast == "fast"
    assert slow_answers == [] and slow.is_alive()  # answered while the slow one was held
    slow.join()
    assert slow_answers == ["slow"]


# ---------------------------------------------------------------- streaming


def test_streamed_text_rebuilds_to_the_full_content(server: FakeLLMServer) -> None:
    server.script([{"text": "hello streaming world"}])

    chunks = list(complete(server, stream=True, stream_options={"include_usage": True}))
    rebuilt = litellm.stream_chunk_builder(chunks)

    assert len(chunks) > 3
    assert rebuilt.choices[0].message.content == "hello streaming world"
    assert rebuilt.choices[0].finish_reason == "stop"
    assert rebuilt.usage.completion_tokens > 0


def test_streamed_tool_calls_rebuild_with_stream_chunk_builder(server: FakeLLMServer) -> None:
    calls = [
        {"id": "call_1", "name": "add", "arguments": '{"a": 1, "b": 2}'},
        {"id": "call_2", "name": "lookup", "arguments": '{"query": "weather in Paris"}'},
    ]
    server.script([{"tool_calls": calls}])

    rebuilt = litellm.stream_chunk_builder(list(complete(server, stream=True)))

    assert rebuilt.choices[0].finish_reason == "tool_calls"
    assert tool_calls_as_dicts(rebuilt.choices[0].message) == calls


# ---------------------------------------------------------------- scripts


def test_by_iteration_answers_are_a_function_of_the_transcript(server: FakeLLMServer) -> None:
    call = {"id": "call_1", "name": "add", "arguments": "{}"}
    server.script([{"tool_calls": [call]}, {"text": "done"}], mode="by_iteration")
    first_turn = [{"role": "user", "content": "add"}]
    after_tool: list[dict[str, Any]] = [
        *first_turn,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "3"},
    ]

    # A re-sent request (a worker that crashed mid-call) gets the same answer.
    first = complete(server, first_turn).choices[0].message
    again = complete(server, first_turn).choices[0].message
    final = complete(server, after_tool).choices[0].message

    assert tool_calls_as_dicts(first) == tool_calls_as_dicts(again) == [call]
    assert final.content == "done"
    assert [r["step"] for r in server.requests()] == [{"tool_calls": [call]}] * 2 + [
        {"text": "done"}
    ]


def test_match_routes_each_conversation_to_its_own_script(server: FakeLLMServer) -> None:
    server.script([{"text": "alpha 1"}, {"text": "alpha 2"}], match="conversation alpha")
    server.script([{"text": "beta 1"}], match="conversation beta")
    alpha = [{"role": "user", "content": "conversation alpha"}]
    beta = [{"role": "user", "content": "conversation beta"}]

    answers = [complete(server, m).choices[0].message.content for m in (alpha, beta, alpha)]

    assert answers == ["alpha 1", "beta 1", "alpha 2"]
    assert len(server.requests(match="conversation alpha")) == 2
    assert len(server.requests(match="conversation beta")) == 1


def test_installing_a_script_with_the_same_match_replaces_it(server: FakeLLMServer) -> None:
    server.script([{"text": "old"}], match="topic")
    server.script([{"text": "new"}], match="topic")

    assert (
        complete(server, [{"role": "user", "content": "topic"}]).choices[0].message.content == "new"
    )


def test_exhausted_sequence_fails_loudly(server: FakeLLMServer) -> None:
    server.script([{"text": "only one"}])
    complete(server)

    with pytest.raises(litellm.InternalServerError, match="script exhausted"):
        complete(server)


def test_exhausted_sequence_uses_the_default_step(server: FakeLLMServer) -> None:
    server.script([{"text": "first"}], default={"text": "again"})

    answers = [complete(server).choices[0].message.content for _ in range(3)]

    assert answers == ["first", "again", "again"]


# ---------------------------------------------------------------- the Anthropic messages route

ANTHROPIC_MODEL = "anthropic/claude-fake"


def complete_anthropic(
    server: FakeLLMServer, messages: list[dict[str, Any]] | None = None, **kwargs: Any
) -> Any:
    options: dict[str, Any] = {"max_retries": 0, "timeout": 10, **kwargs}
    return litellm.completion(
        model=ANTHROPIC_MODEL,
        api_base=server.anthropic_base,
        api_key="sk-ant-test",
        messages=messages or USER_HI,
        **options,
    )


def stream_anthropic(server: FakeLLMServer, **kwargs: Any) -> list[Any]:
    """The chunks of a streamed anthropic/ call, read the worker's way (async).

    Not with the sync `litellm.completion(stream=True)`: on this route litellm stops reading at
    message_stop and leaves the httpx response open; when the garbage collector closes it while
    a later request holds httpcore's pool lock, that thread deadlocks on the lock.
    """

    async def run() -> list[Any]:
        stream = await litellm.acompletion(
            messages=USER_HI,
            stream=True,
            max_retries=0,
            timeout=10,
            **call_options(server, "anthropic"),
            **kwargs,
        )
        return [chunk async for chunk in stream]

    return asyncio.run(run())


def call_options(server: FakeLLMServer, route: str) -> dict[str, Any]:
    if route == "anthropic":
        return {
            "model": ANTHROPIC_MODEL,
            "api_base": server.anthropic_base,
            "api_key": "sk-ant-test",
        }
    return {"model": "openai/fake-model", "api_base": server.api_base, "api_key": "sk-test"}


def stream_until_failure(server: FakeLLMServer, route: str) -> tuple[list[Any], Exception]:
    """Iterate an async litellm stream the way the worker would; return what arrived and the
    exception that ended it."""

    async def run() -> tuple[list[Any], Exception]:
        chunks: list[Any] = []
        try:
            stream = await litellm.acompletion(
                messages=USER_HI,
                stream=True,
                max_retries=0,
                timeout=10,
                **call_options(server, route),
            )
            async for chunk in stream:
                chunks.append(chunk)
        except Exception as exc:
            return chunks, exc
        raise AssertionError(f"the stream ended without an error after {len(chunks)} chunks")

    return asyncio.run(run())


def parsed_tool_calls(message: Any) -> list[dict[str, Any]]:
    # litellm re-serialises Anthropic's `input` objects: compare the JSON, not its spelling.
    return [
        {"id": c.id, "name": c.function.name, "arguments": json.loads(c.function.arguments)}
        for c in message.tool_calls
    ]


def test_anthropic_route_is_v1_messages_under_the_bare_base_url(server: FakeLLMServer) -> None:
    server.script([{"text": "hello there"}])

    response = complete_anthropic(server, [{"role": "system", "content": "be brief"}, *USER_HI])

    assert response.choices[0].message.content == "hello there"
    [request] = server.requests()
    # litellm appends /v1/messages to api_base, so api_base must not end in /v1.
    assert server.anthropic_base == server.base_url
    assert request["path"] == "/v1/messages"
    assert request["headers"]["x-api-key"] == "sk-ant-test"
    assert request["headers"]["anthropic-version"] == "2023-06-01"
    body = request["body"]
    assert body["model"] == "claude-fake"
    assert body["system"] == [{"type": "text", "text": "be brief"}]
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert body["max_tokens"] > 0


def test_anthropic_text_answer_returns_content_and_usage(server: FakeLLMServer) -> None:
    server.script([{"text": "hello there"}])

    response = complete_anthropic(server)

    choice = response.choices[0]
    assert choice.message.content == "hello there"
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    assert response.model == "claude-fake"
    usage = response.usage
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_anthropic_several_tool_calls_keep_order_ids_and_arguments(
    server: FakeLLMServer,
) -> None:
    calls = [
        {"id": "toolu_a", "name": "add", "arguments": '{"a":1,"b":2}'},
        {"id": "toolu_b", "name": "lookup", "arguments": {"q": "x"}},
        {"id": "toolu_c", "name": "add", "arguments": "{}"},
    ]
    server.script([{"tool_calls": calls, "text": "let me check"}])

    choice = complete_anthropic(server).choices[0]

    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "let me check"
    assert parsed_tool_calls(choice.message) == [
        {"id": "toolu_a", "name": "add", "arguments": {"a": 1, "b": 2}},
        {"id": "toolu_b", "name": "lookup", "arguments": {"q": "x"}},
        {"id": "toolu_c", "name": "add", "arguments": {}},
    ]
    assert [c.type for c in choice.message.tool_calls] == ["function"] * 3


def test_anthropic_tool_arguments_that_are_not_an_object_arrive_wrapped(
    server: FakeLLMServer,
) -> None:
    # Anthropic's `input` is always an object, so malformed arguments cannot go out verbatim.
    server.script([{"tool_calls": [{"id": "toolu_1", "name": "add", "arguments": '{"a": 1,'}]}])

    [call] = complete_anthropic(server).choices[0].message.tool_calls

    assert json.loads(call.function.arguments) == {"_raw": '{"a": 1,'}


def test_anthropic_finish_reason_length_round_trips(server: FakeLLMServer) -> None:
    server.script([{"text": "truncat", "finish_reason": "length"}])

    assert complete_anthropic(server).choices[0].finish_reason == "length"
    assert server.requests()[0]["step"]["finish_reason"] == "length"


def test_anthropic_empty_content_is_a_choice_with_no_content(server: FakeLLMServer) -> None:
    # Unlike "choices": [] on the OpenAI route, litellm makes an empty Anthropic message a choice.
    server.script([{"empty_choices": True}])

    response = complete_anthropic(server)

    [choice] = response.choices
    assert choice.message.content is None
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"


def test_anthropic_raw_step_sends_that_exact_body(server: FakeLLMServer) -> None:
    raw = {
        "id": "msg_raw",
        "type": "message",
        "role": "assistant",
        "model": "raw-model",
        "content": [{"type": "text", "text": "raw"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
    server.script([{"raw": raw}])

    response = complete_anthropic(server)

    assert response.choices[0].message.content == "raw"
    assert response.usage.prompt_tokens == 3


def test_anthropic_match_sees_the_top_level_system_prompt(server: FakeLLMServer) -> None:
    server.script([{"text": "brief"}], match="be brief")
    server.script([{"text": "other"}])

    answer = complete_anthropic(server, [{"role": "system", "content": "be brief"}, *USER_HI])

    assert answer.choices[0].message.content == "brief"
    assert len(server.requests(match="be brief")) == 1


def test_anthropic_streamed_text_rebuilds_with_usage_in_the_stream(server: FakeLLMServer) -> None:
    server.script([{"text": "hello streaming world"}])

    chunks = stream_anthropic(server, stream_options={"include_usage": True})
    rebuilt = litellm.stream_chunk_builder(chunks)

    assert [c.choices[0].delta.content for c in chunks[:3]] == ["hello s", "treamin", "g world"]
    assert rebuilt.choices[0].message.content == "hello streaming world"
    assert rebuilt.choices[0].finish_reason == "stop"
    # The usage of message_start and message_delta arrives in one last chunk of its own.
    with_usage = [c for c in chunks if getattr(c, "usage", None) is not None]
    assert with_usage == [chunks[-1]]
    assert chunks[-1].usage.prompt_tokens > 0
    assert chunks[-1].usage.completion_tokens > 0
    assert rebuilt.usage.total_tokens == chunks[-1].usage.total_tokens


def test_anthropic_stream_without_include_usage_has_no_usage_chunk(server: FakeLLMServer) -> None:
    server.script([{"text": "hello streaming world"}])

    chunks = stream_anthropic(server)

    assert all(getattr(c, "usage", None) is None for c in chunks)
    # stream_chunk_builder then estimates the usage itself.
    assert litellm.stream_chunk_builder(chunks).usage.completion_tokens > 0


def test_anthropic_streamed_tool_calls_rebuild_and_name_each_call_once(
    server: FakeLLMServer,
) -> None:
    calls = [
        {"id": "toolu_1", "name": "add", "arguments": {"a": 1, "b": 2}},
        {"id": "toolu_2", "name": "lookup", "arguments": {"query": "weather in Paris"}},
    ]
    server.script([{"tool_calls": calls, "text": "checking"}])

    chunks = stream_anthropic(server, stream_options={"include_usage": True})
    rebuilt = litellm.stream_chunk_builder(chunks)

    assert rebuilt.choices[0].finish_reason == "tool_calls"
    assert rebuilt.choices[0].message.content == "checking"
    assert parsed_tool_calls(rebuilt.choices[0].message) == [
        {"id": "toolu_1", "name": "add", "arguments": {"a": 1, "b": 2}},
        {"id": "toolu_2", "name": "lookup", "arguments": {"query": "weather in Paris"}},
    ]
    deltas = [
        (d.index, d.id, d.function.name, d.function.arguments)
        for c in chunks
        for d in (c.choices[0].delta.tool_calls or [])
    ]
    # content_block_start gives id and name with empty arguments; each input_json_delta then
    # carries one fragment with no id or name. Indexes count tool calls from 0, not blocks.
    assert deltas[0] == (0, "toolu_1", "add", "")
    assert all(d[1] is None and d[2] is None for d in deltas[1:4])
    assert "".join(d[3] for d in deltas if d[0] == 0) == '{"a": 1, "b": 2}'
    assert deltas[4] == (1, "toolu_2", "lookup", "")
    assert all(d[1] is None and d[2] is None for d in deltas[5:])


def test_anthropic_rate_limit_raises_rate_limit_error_with_retry_after(
    server: FakeLLMServer,
) -> None:
    server.script([{"error": 429, "message": "Rate limit reached", "retry_after": 1}])

    with pytest.raises(litellm.RateLimitError) as caught:
        complete_anthropic(server)

    assert caught.value.status_code == 429
    assert "rate_limit_error" in str(caught.value)
    assert "Rate limit reached" in str(caught.value)
    headers = {k.lower(): v for k, v in caught.value.litellm_response_headers.items()}
    assert headers["retry-after"] == "1"
    assert is_transient(caught.value)
    assert len(server.requests()) == 1


def test_anthropic_overloaded_529_is_an_internal_server_error_with_status_500(
    server: FakeLLMServer,
) -> None:
    # litellm keeps no trace of the 529: only the "overloaded" wording makes it transient.
    server.script([{"error": 529}])

    with pytest.raises(litellm.InternalServerError) as caught:
        complete_anthropic(server)

    assert caught.value.status_code == 500
    assert str(caught.value).startswith(
        'litellm.InternalServerError: AnthropicError - {"type": "error", "error": '
        '{"type": "overloaded_error", "message": "Overloaded"}}'
    )
    assert is_transient(caught.value)


@pytest.mark.parametrize(
    ("status", "error_type", "exception"),
    [
        (400, "invalid_request_error", litellm.BadRequestError),
        (401, "authentication_error", litellm.AuthenticationError),
        (403, "permission_error", litellm.PermissionDeniedError),
        (404, "not_found_error", litellm.NotFoundError),
        (500, "api_error", litellm.InternalServerError),
        (503, "api_error", litellm.ServiceUnavailableError),
    ],
)
def test_anthropic_error_status_maps_to_litellm_exception(
    server: FakeLLMServer, status: int, error_type: str, exception: type[Exception]
) -> None:
    server.script([{"error": status, "message": f"boom {status}"}])

    with pytest.raises(exception) as caught:
        complete_anthropic(server)

    assert caught.value.status_code == status  # type: ignore[attr-defined]
    assert f'"type": "{error_type}", "message": "boom {status}"' in str(caught.value)


def test_anthropic_hanging_model_raises_timeout_within_the_call_timeout(
    server: FakeLLMServer,
) -> None:
    server.script([{"hang": 20}])
    started = time.monotonic()

    with pytest.raises(litellm.Timeout):
        complete_anthropic(server, timeout=1)

    assert time.monotonic() - started < 10  # cut at 1 s, not after the 20 s hang
    assert len(server.requests()) == 1


def test_anthropic_chaos_injects_429_or_529_and_litellm_sees_both_as_transient(
    server: FakeLLMServer,
) -> None:
    server.script([{"text": "never"}], transient_error_rate=1.0, seed=1)
    failures: list[Exception] = []

    for _ in range(8):
        with pytest.raises((litellm.RateLimitError, litellm.InternalServerError)) as caught:
            complete_anthropic(server)
        failures.append(caught.value)

    assert {r["step"]["error"] for r in server.requests()} == {429, 529}
    assert {f.status_code for f in failures} == {429, 500}  # type: ignore[attr-defined]
    assert all(is_transient(f) for f in failures)


def test_anthropic_by_iteration_does_not_count_tool_results_as_a_user_turn(
    server: FakeLLMServer,
) -> None:
    call = {"id": "toolu_1", "name": "add", "arguments": {"a": 1}}
    server.script([{"tool_calls": [call]}, {"text": "done"}], mode="by_iteration")
    first_turn = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "add"}]
    after_tool: list[dict[str, Any]] = [
        *first_turn,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "3"},
    ]

    first = complete_anthropic(server, first_turn).choices[0].message
    again = complete_anthropic(server, first_turn).choices[0].message
    final = complete_anthropic(server, after_tool).choices[0].message

    assert parsed_tool_calls(first) == parsed_tool_calls(again) == [call]
    assert final.content == "done"
    sent = server.requests()[-1]["body"]["messages"]
    # The tool result reaches Anthropic as a user message of tool_result blocks.
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert [b["type"] for b in sent[-1]["content"]] == ["tool_result"]
    assert sent[-1]["content"][0]["tool_use_id"] == "toolu_1"


def test_anthropic_and_openai_requests_are_told_apart_by_path(server: FakeLLMServer) -> None:
    complete(server)
    complete_anthropic(server)

    assert [r["path"] for r in server.requests()] == ["/v1/chat/completions", "/v1/messages"]


# ---------------------------------------------------------------- failures inside a stream


class StreamFailure(NamedTuple):
    """How litellm surfaces an in-stream error to a caller iterating an async stream."""

    chunks_before: int
    status_code: int
    original: type[Exception]
    text: str


@pytest.mark.parametrize(
    ("route", "status", "expected"),
    [
        # OpenAI: the SDK raises on the `data: {"error": ...}` line; litellm keeps no status for
        # a 5xx (APIConnectionError, 500) and keeps 429 as a RateLimitError.
        (
            "openai",
            503,
            StreamFailure(
                4,
                500,
                litellm.InternalServerError,
                "litellm.MidStreamFallbackError: litellm.InternalServerError: InternalServerError: "
                "OpenAIException - The server is overloaded or not ready yet.",
            ),
        ),
        (
            "openai",
            429,
            StreamFailure(
                4,
                429,
                litellm.RateLimitError,
                "litellm.MidStreamFallbackError: litellm.RateLimitError: RateLimitError: "
                "OpenAIException - Rate limit reached for requests",
            ),
        ),
        # Anthropic: an `event: error` carries no status, so litellm says 500 whatever it was.
        (
            "anthropic",
            529,
            StreamFailure(
                1,
                500,
                litellm.InternalServerError,
                "litellm.MidStreamFallbackError: litellm.InternalServerError: AnthropicError - "
                "Overloaded",
            ),
        ),
        (
            "anthropic",
            429,
            StreamFailure(
                1,
                500,
                litellm.InternalServerError,
                "litellm.MidStreamFallbackError: litellm.InternalServerError: "
                "AnthropicException - Rate limit exceeded",
            ),
        ),
    ],
)
def test_an_error_inside_a_stream_raises_mid_stream_fallback_error(
    server: FakeLLMServer, route: str, status: int, expected: StreamFailure
) -> None:
    # after=4: OpenAI's role chunk and three text chunks; Anthropic's message_start, ping,
    # content_block_start and the first text delta (the only one that makes a litellm chunk).
    server.script(
        [{"text": "hello streaming world", "stream_error": {"after": 4, "status": status}}]
    )

    chunks, exc = stream_until_failure(server, route)

    assert len(chunks) == expected.chunks_before
    assert isinstance(exc, MidStreamFallbackError)
    assert isinstance(exc, litellm.ServiceUnavailableError)  # its base class, but not its 503
    assert exc.status_code == expected.status_code
    assert isinstance(exc.original_exception, expected.original)
    assert str(exc).startswith(expected.text)
    assert exc.is_pre_first_chunk is False
    assert exc.generated_content == "".join(c.choices[0].delta.content or "" for c in chunks)
    assert is_transient(exc)


def test_an_anthropic_stream_error_without_overload_wording_is_not_transient(
    server: FakeLLMServer,
) -> None:
    # A 503 sent in the stream is an api_error event: its status is lost, and so is the retry.
    server.script([{"text": "hello", "stream_error": {"after": 2, "status": 503}}])

    chunks, exc = stream_until_failure(server, "anthropic")

    assert chunks == []
    assert isinstance(exc, MidStreamFallbackError)
    assert exc.status_code == 500
    assert "Internal server error" in str(exc)
    assert not is_transient(exc)


def test_a_custom_stream_error_message_reaches_the_caller(server: FakeLLMServer) -> None:
    spec = {"after": 0, "status": 529, "message": "the cluster is overloaded"}
    server.script([{"text": "hello", "stream_error": spec}])

    chunks, exc = stream_until_failure(server, "anthropic")

    assert chunks == []
    assert isinstance(exc, MidStreamFallbackError)
    # Only the exact word "Overloaded" takes litellm's "AnthropicError" branch; this text goes
    # the status way (the 500 litellm gives every in-stream error), hence "AnthropicException".
    assert "AnthropicException - the cluster is overloaded" in str(exc)
    assert exc.is_pre_first_chunk is True
    assert is_transient(exc)


@pytest.mark.parametrize(("route", "chunks_before"), [("openai", 4), ("anthropic", 1)])
def test_a_stream_cut_mid_body_raises_a_connection_error_that_is_not_transient(
    server: FakeLLMServer, route: str, chunks_before: int
) -> None:
    server.script([{"text": "hello streaming world", "stream_cut": {"after": 4}}])

    chunks, exc = stream_until_failure(server, route)

    assert len(chunks) == chunks_before
    assert isinstance(exc, MidStreamFallbackError)
    assert exc.status_code == 500
    assert isinstance(exc.original_exception, litellm.APIConnectionError)
    # aiohttp's words for a chunked body that never got its last chunk.
    assert "Response payload is not completed" in str(exc)
    assert not is_transient(exc)
