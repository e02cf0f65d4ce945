"""Specification of the fake LLM server, driven through the real litellm client over HTTP.
Also pins down how litellm 1.106 reports each failure the worker must classify.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from app.testing.fake_llm import FakeLLMServer

# Both must be set before the first litellm import: no cost-map fetch, no load_dotenv().
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_MODE", "PRODUCTION")

import litellm

litellm.suppress_debug_info = True

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
    assert caught.value.litellm_response_headers["Retry-After"] == "1"
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
    server.script([{"hang": 5}])
    started = time.monotonic()

    with pytest.raises(litellm.Timeout):
        complete(server, timeout=1)

    assert time.monotonic() - started < 3
    assert len(server.requests()) == 1


def test_a_slow_request_does_not_block_others(server: FakeLLMServer) -> None:
    server.script([{"delay": 1.0, "text": "slow"}], match="slow please")
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
    started = time.monotonic()

    fast = complete(server).choices[0].message.content

    assert fast == "fast"
    assert time.monotonic() - started < 0.5
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
