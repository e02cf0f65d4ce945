"""`/v1/chat/completions` and `/v1/models` through the official `openai` Python SDK, against a real
`chatworker serve` and a real worker (one of each for the module). Chat Completions is stateless:
every request holds the whole history, and these tests check that it lands on the durable turns
it should (the same turn for the same request, the next turn of the same conversation for a
history we answered, a copy for one we did not), every object validated against the SDK's own
types."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import BaseModel

from app.testing.fake_llm import FakeLLMServer
from tests.api.conftest import Deployment, owner_name
from tests.worker_process import FAKE_MODEL

pytestmark = pytest.mark.xdist_group("api-chat")

LOCATE = {
    "type": "function",
    "function": {
        "name": "get_location",
        "description": "The user's city.",
        "parameters": {"type": "object", "properties": {}},
    },
}


class Client:
    def __init__(self, deployment: Deployment) -> None:
        self.key = deployment.key(owner_name("chat"))
        self.url = deployment.apis[0].url
        self.sdk = openai.OpenAI(base_url=f"{self.url}/v1", api_key=self.key, max_retries=0)
        self.http = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=60
        )

    def create(self, messages: list[dict[str, Any]], **fields: Any) -> ChatCompletion:
        raw = self.sdk.chat.completions.with_raw_response.create(
            model=FAKE_MODEL, messages=messages, **fields
        )
        return ChatCompletion.model_validate(raw.http_response.json())

    def stream(
        self, messages: list[dict[str, Any]], **fields: Any
    ) -> tuple[list[ChatCompletionChunk], dict[str, Any]]:
        """The chunks, validated, and the message they add up to."""
        chunks = []
        with self.sdk.chat.completions.create(
            model=FAKE_MODEL, messages=messages, stream=True, **fields
        ) as stream:
            for chunk in stream:
                chunks.append(ChatCompletionChunk.model_validate(chunk.model_dump()))
        content, calls = "", {}
        for chunk in chunks:
            for choice in chunk.choices:
                content += choice.delta.content or ""
                for call in choice.delta.tool_calls or ():
                    held = calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                    held["id"] = call.id or held["id"]
                    if call.function is not None:
                        held["name"] += call.function.name or ""
                        held["arguments"] += call.function.arguments or ""
        return chunks, {"content": content, "tool_calls": list(calls.values())}

    def conversation_of(self, completion_id: str) -> str:
        turn = uuid.UUID(completion_id.removeprefix("chatcmpl-resp_")[:32])
        found = self.http.get(f"/v1/turns/{turn}")
        assert found.status_code == 200, found.text
        return str(found.json()["conversation_id"])

    def conversations(self) -> list[dict[str, Any]]:
        return list(self.http.get("/v1/conversations").json()["data"])


@pytest.fixture
def chat(shared_api: Deployment) -> Iterator[Client]:
    client = Client(shared_api)
    yield client
    client.sdk.close()
    client.http.close()


def test_a_completion_waits_for_the_answer_and_the_same_request_is_the_same_turn(
    chat: Client, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script([{"text": "Hello from the worker."}], match=token)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": f"hi {token}"},
    ]
    first = chat.create(messages)
    assert first.object == "chat.completion" and first.model == FAKE_MODEL
    (choice,) = first.choices
    assert choice.message.content == "Hello from the worker."
    assert choice.finish_reason == "stop" and choice.message.tool_calls is None
    assert first.usage is not None and first.usage.total_tokens > 0
    (sent,) = fake_llm.requests(match=token)
    assert sent["body"]["messages"][0] == {"role": "system", "content": "Be brief."}

    again = chat.create(messages)  # (a client's retry: the same turn, not a second one)
    assert again.id == first.id and again.choices[0].message.content == "Hello from the worker."
    assert len(fake_llm.requests(match=token)) == 1


def test_a_history_we_answered_continues_its_conversation(
    chat: Client, fake_llm: FakeLLMServer
) -> None:
    token, later, other = uuid.uuid4().hex, uuid.uuid4().hex, uuid.uuid4().hex
    fake_llm.script([{"text": "Still Oslo."}], match=other)  # (the later turns' first)
    fake_llm.script([{"text": "Oslo is in Norway."}], match=later)
    fake_llm.script([{"text": "Oslo."}], match=token)
    question = {"role": "user", "content": f"which city {token}"}
    first = chat.create([question])
    reply = {"role": "assistant", "content": first.choices[0].message.content}
    second = chat.create([question, reply, {"role": "user", "content": f"which country {later}"}])
    assert second.choices[0].message.content == "Oslo is in Norway."
    assert chat.conversation_of(second.id) == chat.conversation_of(first.id)
    sent = fake_llm.requests(match=later)[-1]["body"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert len(chat.conversations()) == 1

    # The same history, another last question: a new branch of the same conversation.
    third = chat.create([question, reply, {"role": "user", "content": f"again {other}"}])
    assert chat.conversation_of(third.id) == chat.conversation_of(first.id)
    sent = fake_llm.requests(match=other)[-1]["body"]["messages"]
    assert [m["content"] for m in sent][-1] == f"again {other}" and len(sent) == 3


def test_a_history_written_elsewhere_or_changed_is_copied_into_a_new_conversation(
    chat: Client, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script([{"text": "Noted."}, {"text": "Noted again."}], match=token)
    written = [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": f"and times 3? {token}"},
    ]
    first = chat.create(written)
    assert first.choices[0].message.content == "Noted."
    sent = fake_llm.requests(match=token)[-1]["body"]["messages"]
    assert [(m["role"], m["content"]) for m in sent][:2] == [
        ("user", "What is 2 + 2?"),
        ("assistant", "4"),
    ]
    # our reply, edited by the client, then a question: not ours any more, so a copy
    edited = [*written, {"role": "assistant", "content": "Edited."}, written[2]]
    second = chat.create(edited)
    assert chat.conversation_of(second.id) != chat.conversation_of(first.id)
    assert len(chat.conversations()) == 2


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_client_function_is_a_tool_call_and_its_tool_message_continues_the_turn(
    chat: Client, fake_llm: FakeLLMServer, stream: bool
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script(
        [
            {"tool_calls": [{"id": "c_loc", "name": "get_location", "arguments": {}}]},
            {"text": "You are in Paris."},
        ],
        match=token,
        mode="by_iteration",
    )
    question = {"role": "user", "content": f"where am I {token}"}
    if stream:
        chunks, message = chat.stream([question], tools=[LOCATE])
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        (call,) = message["tool_calls"]
        asked = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
            ],
        }
    else:
        first = chat.create([question], tools=[LOCATE])
        (choice,) = first.choices
        assert choice.finish_reason == "tool_calls"
        asked = choice.message.model_dump(exclude_none=True)
        call = asked["tool_calls"][0] | asked["tool_calls"][0]["function"]
    assert call["id"] == "c_loc" and call["name"] == "get_location"
    answer = {"role": "tool", "tool_call_id": "c_loc", "content": "Paris"}
    history = [question, asked, answer]
    if stream:
        chunks, message = chat.stream(
            history, tools=[LOCATE], stream_options={"include_usage": True}
        )
        assert message["content"] == "You are in Paris."
        assert chunks[-1].choices == [] and chunks[-1].usage is not None
        assert chunks[-2].choices[0].finish_reason == "stop"
        completion_id = chunks[0].id
    else:
        second = chat.create(history, tools=[LOCATE])
        assert second.choices[0].message.content == "You are in Paris."
        completion_id = second.id
    assert completion_id.endswith("_1")  # the same turn, after its pause
    sent = fake_llm.requests(match=token)[-1]["body"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    # the tool message sent again (a retry): the same answer, the model not asked again
    asked_before = len(fake_llm.requests(match=token))
    assert chat.create(history, tools=[LOCATE]).choices[0].message.content == "You are in Paris."
    assert len(fake_llm.requests(match=token)) == asked_before


def test_structured_output_through_the_sdk_s_parse(chat: Client, fake_llm: FakeLLMServer) -> None:
    class City(BaseModel):
        name: str
        country: str

    token = uuid.uuid4().hex
    fake_llm.script([{"text": '{"name": "Oslo", "country": "Norway"}'}], match=token)
    parsed = chat.sdk.chat.completions.parse(
        model=FAKE_MODEL,
        messages=[{"role": "user", "content": f"a city {token}"}],
        response_format=City,
    )
    assert parsed.choices[0].message.parsed == City(name="Oslo", country="Norway")


def test_a_named_tool_choice_forces_that_function(chat: Client, fake_llm: FakeLLMServer) -> None:
    token = uuid.uuid4().hex
    fake_llm.script(
        [{"tool_calls": [{"id": "c_1", "name": "get_location", "arguments": {}}]}], match=token
    )
    named = {"type": "function", "function": {"name": "get_location"}}
    done = chat.create([{"role": "user", "content": token}], tools=[LOCATE], tool_choice=named)
    assert done.choices[0].message.tool_calls is not None
    (sent,) = fake_llm.requests(match=token)
    assert sent["body"]["tool_choice"] == named


def test_the_models_are_listed(chat: Client) -> None:
    models = chat.sdk.models.list()
    assert [model.id for model in models.data][:1] and all(m.object == "model" for m in models.data)


BAD: list[tuple[dict[str, Any], str | None, str]] = [
    ({"messages": []}, "messages", "non-empty list"),
    ({"messages": [{"role": "assistant", "content": "hi"}]}, "messages", "begin with a user"),
    (
        {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
        "messages",
        "nothing to answer",
    ),
    ({"messages": [{"role": "function", "name": "f", "content": "x"}]}, "messages", "deprecated"),
    (
        {"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "s"}]},
        "messages",
        "after the conversation began",
    ),
    (
        {
            "messages": [
                {"role": "user", "content": "a"},
                {"role": "tool", "tool_call_id": "x", "content": "o"},
            ]
        },
        "messages",
        "answers no open call",
    ),
    (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
                    ],
                }
            ]
        },
        "messages[0].content[0]",
        "data: URL",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
        "messages[0].content[0]",
        "'input_audio' part",
    ),
    ({"n": 2}, "n", "n must be 1"),
    ({"logprobs": True}, "logprobs", "not supported"),
    ({"bogus": 1}, "bogus", "unknown parameter"),
    (
        {"tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": [LOCATE]},
        "tool_choice",
        "not one of",
    ),
    ({"tool_choice": "required"}, "tool_choice", "at least one tool"),
    ({"response_format": {"type": "xml"}}, "response_format", "text, json_object or json_schema"),
    (
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "string"}},
            }
        },
        "response_format",
        "object",
    ),
    ({"stream_options": {"include_usage": True}}, "stream_options", "stream: true"),
    ({"tools": [{"type": "function"}]}, "tools[0]", "function"),
    ({"metadata": {"k": 1}}, "metadata", "string"),
]


@pytest.mark.parametrize(("fields", "param", "said"), BAD, ids=[b[1] or "?" for b in BAD])
def test_bad_requests_are_refused_in_openai_s_error_shape_and_write_nothing(
    chat: Client, fields: dict[str, Any], param: str | None, said: str
) -> None:
    body = {"model": FAKE_MODEL, "messages": [{"role": "user", "content": "hello"}], **fields}
    refused = chat.http.post("/v1/chat/completions", json=body)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert said in error["message"], error["message"]
    assert chat.conversations() == []


def test_an_unknown_route_and_a_bad_key_answer_in_openai_s_shape(chat: Client) -> None:
    denied = httpx.get(f"{chat.url}/v1/models", headers={"Authorization": "Bearer nope"})
    assert denied.status_code == 401 and "error" in denied.json()


def test_a_branch_while_the_conversation_runs_is_a_409_and_a_cancel_stops_it(
    chat: Client, fake_llm: FakeLLMServer
) -> None:
    """A completion's id names its response: `POST /v1/responses/{id}/cancel` stops its turn (a
    dropped connection does not: the same request sent again waits for the same answer)."""
    token, later = uuid.uuid4().hex, uuid.uuid4().hex
    fake_llm.script([{"hang": 30}], match=later)
    fake_llm.script([{"text": "Oslo."}], match=token)
    question = {"role": "user", "content": f"which city {token}"}
    reply = {"role": "assistant", "content": chat.create([question]).choices[0].message.content}
    hanging = [question, reply, {"role": "user", "content": f"slow {later}"}]
    stream = chat.sdk.chat.completions.create(model=FAKE_MODEL, messages=hanging, stream=True)
    completion_id = next(iter(stream)).id  # (its first chunk, at once)
    stream.close()  # the connection dropped: the turn goes on
    with pytest.raises(openai.ConflictError) as busy:
        chat.create([question, reply, {"role": "user", "content": "another branch"}])
    assert busy.value.response.headers["x-should-retry"] == "false"
    assert busy.value.body["code"] == "conversation_busy"  # type: ignore[index]

    stopped = chat.sdk.responses.cancel(completion_id.removeprefix("chatcmpl-"))
    assert stopped.status == "cancelled"


def test_a_failed_turn_is_a_502_and_a_streamed_one_ends_with_an_error(
    chat: Client, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script(
        [{"error": 400, "message": "bad things"}, {"error": 400, "message": "bad things"}],
        match=token,
    )
    with pytest.raises(openai.APIStatusError) as failed:
        chat.create([{"role": "user", "content": f"fail {token}"}])
    assert failed.value.status_code == 502
    assert failed.value.body["code"] == "turn_failed"  # type: ignore[index]
    assert "bad things" in failed.value.body["message"]  # type: ignore[index]
    with pytest.raises(openai.APIError, match="bad things"):
        chat.stream([{"role": "user", "content": f"fail again {token}"}])


def test_a_worker_s_tool_runs_inside_the_turn_and_its_replies_continue_it(
    chat: Client, fake_llm: FakeLLMServer
) -> None:
    """An MCP tool (this server's extension of `tools`) runs inside the turn, not shown; the
    completion's content is the turn's replies joined, and sent back as it came, it is
    recognised: the next question continues the same conversation."""
    token, later = uuid.uuid4().hex, uuid.uuid4().hex
    fake_llm.script([{"text": "Still 5."}], match=later)
    fake_llm.script(
        [
            {
                "text": "Let me add.",
                "tool_calls": [{"id": "c_add", "name": "add", "arguments": {"a": 2, "b": 3}}],
            },
            {"text": "It is 5."},
        ],
        match=token,
        mode="by_iteration",
    )
    tools = [{"type": "mcp", "server_label": "tools", "allowed_tools": ["add"]}]
    question = {"role": "user", "content": f"2 + 3? {token}"}
    first = chat.create([question], tools=tools)
    (choice,) = first.choices
    assert choice.message.content == "Let me add.\n\nIt is 5." and choice.finish_reason == "stop"
    assert choice.message.tool_calls is None
    sent = fake_llm.requests(match=token)[-1]["body"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]

    reply = {"role": "assistant", "content": choice.message.content}
    second = chat.create([question, reply, {"role": "user", "content": later}], tools=tools)
    assert second.choices[0].message.content == "Still 5."
    assert chat.conversation_of(second.id) == chat.conversation_of(first.id)
