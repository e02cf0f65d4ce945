"""`/v1/responses` through the official `openai` Python SDK, against a real `chatworker serve` and a
real worker (one of each for the module): the SDK's own calls, and every object it gets checked
against the SDK's own types (it builds them without validation, so the test validates them)."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any, Literal

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseItem
from pydantic import BaseModel, TypeAdapter

from app.testing.fake_llm import FakeLLMServer
from tests.api.conftest import Deployment, owner_name
from tests.servers.mcp_server import read_ledger
from tests.worker_process import FAKE_MODEL

pytestmark = pytest.mark.xdist_group("api-responses")

# The MCP test server with its destructive tool, whose calls wait for the user's approval.
API_ENV = {"MCP_EXTRA_TOOLS": "erase_notes"}
MCP = {"type": "mcp", "server_label": "tools"}

HANG = {"hang": 30}
LOCATE = {
    "type": "function",
    "name": "get_location",
    "description": "The user's city.",
    "parameters": {"type": "object", "properties": {}},
}
ITEMS = TypeAdapter(list[ResponseItem])


@pytest.fixture
def requests_sent() -> list[httpx.Request]:
    return []


@pytest.fixture
def sdk(shared_api: Deployment, requests_sent: list[httpx.Request]) -> Iterator[openai.OpenAI]:
    """The SDK as a web team would point it at us: a base URL and a key (a new owner's)."""
    key = shared_api.key(owner_name("responses"))
    http = httpx.Client(event_hooks={"request": [requests_sent.append]}, timeout=60)
    client = openai.OpenAI(
        base_url=f"{shared_api.apis[0].url}/v1", api_key=key, http_client=http, max_retries=2
    )
    yield client
    client.close()


def strict(raw: Any) -> Response:
    """The response JSON validated against the SDK's type (the SDK itself does not)."""
    return Response.model_validate(
        raw.http_response.json() if hasattr(raw, "http_response") else raw
    )


def create(sdk: openai.OpenAI, **fields: Any) -> Response:
    raw = sdk.responses.with_raw_response.create(model=FAKE_MODEL, **fields)
    return strict(raw)


def retrieve(sdk: openai.OpenAI, response_id: str) -> Response:
    return strict(sdk.responses.with_raw_response.retrieve(response_id))


def until(sdk: openai.OpenAI, response_id: str, *statuses: str, timeout: float = 30) -> Response:
    deadline = time.monotonic() + timeout
    while True:
        found = retrieve(sdk, response_id)
        if found.status in statuses:
            return found
        assert time.monotonic() < deadline, f"response still {found.status}"
        time.sleep(0.05)


def test_a_plain_create_waits_for_the_answer(sdk: openai.OpenAI, fake_llm: FakeLLMServer) -> None:
    token = uuid.uuid4().hex
    fake_llm.script([{"text": "Hello from the worker."}], match=token)
    response = create(sdk, input=f"hi {token}", instructions="Be brief.", metadata={"order": "42"})
    assert response.status == "completed"
    assert response.output_text == "Hello from the worker."
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.usage is not None and response.usage.total_tokens > 0
    assert response.usage.input_tokens_details.cached_tokens == 0
    assert response.conversation is not None
    assert response.instructions == "Be brief."
    assert response.tools == [] and response.previous_response_id is None
    assert response.metadata == {"order": "42"}
    assert response.truncation == "auto" and response.store is True
    assert response.text.format.type == "text"  # type: ignore[union-attr]
    # the SDK's own call gives the same object
    again = sdk.responses.retrieve(response.id)
    assert again.output_text == "Hello from the worker." and again.metadata == {"order": "42"}
    items = sdk.responses.input_items.list(response.id)
    assert [(item.type, item.role) for item in items.data] == [("message", "user")]  # type: ignore[union-attr]
    ITEMS.validate_python([item.model_dump() for item in items.data])


class Ticket(BaseModel):
    kind: Literal["bug", "question"]
    priority: int


def test_a_structured_answer_through_the_sdk_s_parse_is_checked_and_repaired(
    sdk: openai.OpenAI, fake_llm: FakeLLMServer
) -> None:
    """`responses.parse(text_format=...)`: the SDK sends the model's JSON Schema as
    `text.format`; the worker checks the answer against it (one repair here), and the SDK
    parses `output_text` into the pydantic model."""
    token = uuid.uuid4().hex
    fake_llm.script(
        [
            {"text": '{"kind": "feature", "priority": 1}'},
            {"text": '{"kind": "bug", "priority": 2}'},
        ],
        match=token,
    )
    parsed = sdk.responses.parse(
        model=FAKE_MODEL, input=f"The export crashes. {token}", text_format=Ticket
    )
    assert parsed.status == "completed"
    assert parsed.output_parsed == Ticket(kind="bug", priority=2)
    assert parsed.text is not None and parsed.text.format.type == "json_schema"
    strict(parsed.model_dump(mode="json", by_alias=True, exclude={"output_parsed"}))
    first, second = (r["body"] for r in fake_llm.requests(match=token))
    # (the fake model takes no schema: it is told it; the repair names what was wrong)
    assert "only a JSON value" in json.dumps(first["messages"])
    assert "'feature' is not one of" in json.dumps(second["messages"])
    # json_object: any JSON object
    other = uuid.uuid4().hex
    fake_llm.script([{"text": '{"any": "object"}'}], match=other)
    plain = create(sdk, input=f"x {other}", text={"format": {"type": "json_object"}})
    assert plain.output_text == '{"any": "object"}'
    assert plain.text is not None and plain.text.format.type == "json_object"


def test_input_image_and_input_file_parts_are_the_message_s_files(
    sdk: openai.OpenAI, fake_llm: FakeLLMServer
) -> None:
    from tests.integration.test_files import PDF, png

    token = uuid.uuid4().hex
    fake_llm.script([{"text": "A square and an invoice."}], match=token)
    image = "data:image/png;base64," + base64.b64encode(png(seed=2)).decode()
    document = "data:application/pdf;base64," + base64.b64encode(PDF).decode()
    raw = sdk.responses.with_raw_response.create(
        model="openai/gpt-4o-mini",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": f"what are these? {token}"},
                    {"type": "input_image", "image_url": image, "detail": "auto"},
                    {"type": "input_file", "file_data": document, "filename": "invoice.pdf"},
                ],
            }
        ],
    )
    response = strict(raw)
    assert response.output_text == "A square and an invoice."
    (sent,) = fake_llm.requests(match=token)
    parts = sent["body"]["messages"][-1]["content"]
    assert {"type": "image_url", "image_url": {"url": image}} in parts
    assert [p["file"]["file_data"] for p in parts if p["type"] == "file"] == [document]
    items = sdk.responses.input_items.list(response.id)
    kinds = [part.type for part in items.data[0].content]  # type: ignore[union-attr]
    assert kinds == ["input_text", "input_image", "input_file"]
    ITEMS.validate_python([item.model_dump() for item in items.data])
    # a URL to fetch, or a file id: refused naming the part, nothing written
    for part in (
        {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"},
        {"type": "input_file", "file_id": "file-123"},
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            create(sdk, input=[{"role": "user", "content": [part]}])
        assert refused.value.body["param"] == "input[0].content[0]"  # type: ignore[index]


def test_previous_response_id_naming_an_earlier_response_continues_on_a_new_branch(
    sdk: openai.OpenAI, fake_llm: FakeLLMServer, shared_api: Deployment
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script(
        [
            {"text": "Paris."},
            {"text": "The Seine."},
            {"text": "The Loire."},
            {"text": "You are welcome."},
        ],
        match=token,
    )
    first = create(sdk, input=f"Capital of France? {token}")
    second = create(sdk, input="Its river?", previous_response_id=first.id)
    assert second.output_text == "The Seine." and second.previous_response_id == first.id
    # from the first response again: the model is sent its path only, not the second exchange
    third = create(sdk, input="Its longest river?", previous_response_id=first.id)
    assert third.output_text == "The Loire." and third.previous_response_id == first.id
    sent = fake_llm.requests(match=token)[-1]["body"]["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"] == [
        f"Capital of France? {token}",
        "Its longest river?",
    ]
    # every response stays retrievable, each on its branch, showing what it was created after
    assert retrieve(sdk, second.id).output_text == "The Seine."
    assert retrieve(sdk, third.id).previous_response_id == first.id
    assert retrieve(sdk, first.id).previous_response_id is None
    assert first.conversation is not None
    path = shared_api.client.get_conversation(first.conversation.id).messages
    assert [m.content for m in path] == [
        f"Capital of France? {token}", "Paris.", "Its longest river?", "The Loire.",
    ]  # fmt: skip
    assert path[2].siblings == [3, 5]  # "Its river?" is the other version
    # the latest response goes on as before
    fourth = create(sdk, input="Thanks.", previous_response_id=third.id)
    assert fourth.output_text == "You are welcome." and fourth.previous_response_id == third.id


def test_a_create_repeated_with_its_idempotency_key_is_the_same_response(
    sdk: openai.OpenAI, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script([{"text": "Once."}], match=token)
    key = {"Idempotency-Key": uuid.uuid4().hex}
    first = create(sdk, input=f"once {token}", extra_headers=key)
    again = create(sdk, input=f"once {token}", extra_headers=key)
    assert again.id == first.id and again.conversation == first.conversation
    assert again.output_text == "Once."
    assert len(fake_llm.requests(match=token)) == 1  # the model was asked once
    other = create(sdk, input=f"once {token}", extra_headers={"Idempotency-Key": "another"})
    assert other.id != first.id


def test_background_answers_at_once_then_retrieve_polls(
    sdk: openai.OpenAI, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script([{"text": "Done in the background.", "delay": 0.5}], match=token)
    response = create(sdk, input=f"slow {token}", background=True)
    assert response.status in ("queued", "in_progress") and response.background is True
    assert response.output == [] and response.usage is not None
    finished = until(sdk, response.id, "completed")
    assert finished.output_text == "Done in the background."
    assert finished.completed_at is not None


def test_a_client_tool_is_a_function_call_answered_with_previous_response_id(
    sdk: openai.OpenAI, fake_llm: FakeLLMServer
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
    first = create(sdk, input=f"where am I {token}", tools=[LOCATE])
    assert first.status == "completed"  # as OpenAI: the response ends at the call
    (call,) = first.output
    assert call.type == "function_call" and call.name == "get_location"
    assert call.call_id == "c_loc" and call.arguments == "{}"
    assert first.tools[0].type == "function"

    second = create(
        sdk,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": "c_loc", "output": "Paris"}],
        tools=[LOCATE],
    )
    assert second.status == "completed" and second.output_text == "You are in Paris."
    assert second.previous_response_id == first.id
    assert second.conversation == first.conversation
    items = sdk.responses.input_items.list(second.id).data
    assert [(i.type, getattr(i, "output", None)) for i in items] == [
        ("function_call_output", "Paris")
    ]
    # the first response is unchanged: it ended at its call, and carries no usage of its own
    again = retrieve(sdk, first.id)
    assert [item.type for item in again.output] == ["function_call"] and again.usage is None
    # answering it twice: the call has its answer
    with pytest.raises(openai.BadRequestError) as refused:
        create(
            sdk,
            previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": "c_loc", "output": "Rome"}],
        )
    assert refused.value.body["param"] == "previous_response_id"  # type: ignore[index]


def test_tool_choice_required_with_only_a_function_tool_forces_its_call(
    sdk: openai.OpenAI, fake_llm: FakeLLMServer
) -> None:
    """How pydantic-ai asks for structured output: one function tool and `tool_choice:
    required`. The request's function tools count as tools; the model is told to call one."""
    token = uuid.uuid4().hex
    fake_llm.script(
        [
            {
                "tool_calls": [
                    {"id": "c_final", "name": "final_result", "arguments": {"city": "Oslo"}}
                ]
            }
        ],
        match=token,
    )
    final = {
        "type": "function",
        "name": "final_result",
        "description": "The answer.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    response = create(sdk, input=f"which city {token}", tools=[final], tool_choice="required")
    (call,) = response.output
    assert call.type == "function_call" and call.name == "final_result"
    assert response.tool_choice == "required"
    (sent,) = fake_llm.requests(match=token)
    assert sent["body"]["tool_choice"] == "required"


def test_tool_choice_naming_a_function_forces_it_on_the_first_call_only(
    sdk: openai.OpenAI, fake_llm: FakeLLMServer
) -> None:
    """A named tool (the Responses API's shape) goes to the model in Chat Completions' shape and
    is shown back as OpenAI shows it; once the call is answered the model is free to answer."""
    token = uuid.uuid4().hex
    fake_llm.script(
        [
            {"tool_calls": [{"id": "c_loc", "name": "get_location", "arguments": {}}]},
            {"text": "You are in Paris."},
        ],
        match=token,
        mode="by_iteration",
    )
    weather = {**LOCATE, "name": "get_weather", "description": "The weather."}
    named = {"type": "function", "name": "get_location"}
    first = create(sdk, input=f"where am I {token}", tools=[weather, LOCATE], tool_choice=named)
    (call,) = first.output
    assert call.type == "function_call" and call.name == "get_location"
    assert first.tool_choice.model_dump() == named  # type: ignore[union-attr]
    assert retrieve(sdk, first.id).tool_choice == first.tool_choice
    second = create(
        sdk,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": "c_loc", "output": "Paris"}],
        tool_choice=named,  # (sent again, as frameworks do: checked, the conversation's applies)
    )
    assert second.output_text == "You are in Paris." and second.tool_choice == first.tool_choice
    asked = [sent["body"]["tool_choice"] for sent in fake_llm.requests(match=token)]
    assert asked == [{"type": "function", "function": {"name": "get_location"}}, "auto"]
    # a later request naming a tool the conversation does not have: refused, nothing written
    with pytest.raises(openai.BadRequestError) as refused:
        create(
            sdk,
            previous_response_id=second.id,
            input="and tomorrow?",
            tool_choice={"type": "function", "name": "get_forecast"},
        )
    assert refused.value.body["param"] == "tool_choice"  # type: ignore[index]
    assert len(fake_llm.requests(match=token)) == 2
    assert retrieve(sdk, second.id).output_text == "You are in Paris."


def test_tool_choice_naming_an_mcp_tool_does_not_loop_to_the_iteration_limit(
    sdk: openai.OpenAI, fake_llm: FakeLLMServer
) -> None:
    """A server's tool runs and comes back: forced on every call, the model would call it until
    the turn's limit. It is forced on the first call; the next one is `auto`."""
    token = uuid.uuid4().hex
    fake_llm.script(
        [
            {"tool_calls": [{"id": "c_add", "name": "add", "arguments": {"a": 2, "b": 3}}]},
            {"text": "It is 5."},
        ],
        match=token,
        mode="by_iteration",
    )
    tools = [{**MCP, "allowed_tools": ["add", "erase_notes"]}]
    named = {"type": "function", "name": "add"}
    response = create(sdk, input=f"add {token}", tools=tools, tool_choice=named)
    assert response.status == "completed" and response.output_text == "It is 5."
    assert [item.type for item in response.output] == ["mcp_call", "message"]
    assert response.tool_choice.model_dump() == named  # type: ignore[union-attr]
    asked = [sent["body"]["tool_choice"] for sent in fake_llm.requests(match=token)]
    assert asked == [{"type": "function", "function": {"name": "add"}}, "auto"]


def test_store_false_is_shown_back_and_the_turn_is_as_durable_as_any(
    sdk: openai.OpenAI, fake_llm: FakeLLMServer
) -> None:
    """`store: false` and `previous_response_id` are shown as the request gave them on the
    create, on retrieve and in every snapshot of the stream, live and replayed."""
    token = uuid.uuid4().hex
    fake_llm.script([{"text": "First."}, {"text": "Second."}, {"text": "Third."}], match=token)
    first = create(sdk, input=f"one {token}", store=False)
    assert first.store is False and retrieve(sdk, first.id).store is False
    with sdk.responses.stream(
        model=FAKE_MODEL, input="two", previous_response_id=first.id, store=False
    ) as stream:
        live = list(stream)
        final = stream.get_final_response()
    assert final.output_text == "Second."
    replayed = list(sdk.responses.retrieve(final.id, stream=True))
    for events in (live, replayed):
        snapshots = [event.response for event in events if hasattr(event, "response")]
        assert len(snapshots) == 3  # created, in_progress, completed
        assert {(s.store, s.previous_response_id) for s in snapshots} == {(False, first.id)}
    again = retrieve(sdk, final.id)
    assert (again.store, again.previous_response_id) == (False, first.id)
    # stored like any turn: its conversation holds both exchanges
    assert [item.type for item in sdk.responses.input_items.list(final.id).data] == ["message"]
    plain = create(sdk, input="three", previous_response_id=final.id)
    assert (plain.store, plain.previous_response_id) == (True, final.id)


def dumped(response: Response) -> list[dict[str, Any]]:
    """A response's output items as a framework sends them back (the SDK's own dump)."""
    return [item.model_dump(exclude_none=True) for item in response.output]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_stateless_tool_loop_sends_the_whole_history_and_continues_the_same_turn(
    sdk: openai.OpenAI, fake_llm: FakeLLMServer, stream: bool
) -> None:
    """How every agent framework's tool loop calls OpenAI by default: no previous_response_id,
    the whole history in each request (its messages, the items the responses returned, its
    outputs). The history's last item of ours says where the conversation is: the answer
    continues the turn that asked, and the next question is the next turn of the same
    conversation, the model sent the transcript once, not a copy of it."""
    token = uuid.uuid4().hex
    # The next turn's script first: its request holds both tokens, and the first match serves.
    later = uuid.uuid4().hex
    fake_llm.script([{"text": "Paris is in France."}], match=later)
    fake_llm.script(
        [
            {"tool_calls": [{"id": "c_loc", "name": "get_location", "arguments": {}}]},
            {"text": "You are in Paris."},
        ],
        match=token,
        mode="by_iteration",
    )
    question = {"role": "user", "content": f"where am I {token}"}
    first = create(sdk, input=[question], tools=[LOCATE])
    (call,) = first.output
    assert call.type == "function_call"
    answer = {"type": "function_call_output", "call_id": call.call_id, "output": "Paris"}
    history = [question, *dumped(first), answer]
    if stream:
        with sdk.responses.stream(model=FAKE_MODEL, input=history, tools=[LOCATE]) as events:
            second = events.get_final_response()
    else:
        second = create(sdk, input=history, tools=[LOCATE])
    assert second.output_text == "You are in Paris."
    assert second.conversation == first.conversation
    assert second.id.startswith(first.id)  # the same turn: its response after the pause
    assert second.previous_response_id == first.id

    again = {"role": "user", "content": f"which country {later}"}
    third = create(sdk, input=[*history, *dumped(second), again], tools=[LOCATE])
    assert third.output_text == "Paris is in France."
    assert third.conversation == first.conversation
    # the response its history's last item of ours stands for, as if it had been named
    assert third.previous_response_id == second.id
    assert retrieve(sdk, third.id).previous_response_id == second.id
    sent = fake_llm.requests(match=later)[-1]["body"]["messages"]
    assert [m["role"] for m in sent if m["role"] != "system"] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]


def test_a_stateless_history_by_item_references_continues_it(
    sdk: openai.OpenAI, fake_llm: FakeLLMServer
) -> None:
    """The AI SDK sends earlier output as `item_reference`s to the ids we returned."""
    token = uuid.uuid4().hex
    later = uuid.uuid4().hex
    fake_llm.script([{"text": "Still here."}], match=later)  # (first: its request holds both)
    fake_llm.script([{"text": "Hello."}], match=token)
    hello = {"role": "user", "content": f"hello {token}"}
    first = create(sdk, input=[hello])
    references = [{"type": "item_reference", "id": item.id} for item in first.output]
    again = {"role": "user", "content": f"still there {later}"}
    second = create(sdk, input=[hello, *references, again])
    assert second.output_text == "Still here." and second.conversation == first.conversation


def test_a_history_naming_another_owner_s_items_or_none_of_ours_is_refused(
    sdk: openai.OpenAI, shared_api: Deployment, fake_llm: FakeLLMServer
) -> None:
    """A history only continues the caller's own conversations: another owner's call id, or an
    item id we never returned, is a 400 naming the item, and starts no turn."""
    token = uuid.uuid4().hex
    fake_llm.script(
        [{"tool_calls": [{"id": f"c_{token}", "name": "get_location", "arguments": {}}]}],
        match=token,
    )
    question = {"role": "user", "content": f"where am I {token}"}
    first = create(sdk, input=[question], tools=[LOCATE])
    answer = {"type": "function_call_output", "call_id": f"c_{token}", "output": "Paris"}
    other_key = shared_api.key(owner_name("responses-other"))
    with openai.OpenAI(base_url=str(sdk.base_url), api_key=other_key) as other:
        for foreign in (dumped(first), [{"type": "item_reference", "id": "ext_1"}]):
            with pytest.raises(openai.BadRequestError) as refused:
                other.responses.create(
                    model=FAKE_MODEL, input=[question, *foreign, answer], tools=[LOCATE]
                )
            assert refused.value.body["param"] == "input[1]"  # type: ignore[index]
    assert retrieve(sdk, first.id).status == "completed"  # still waiting for its answer
    assert len(fake_llm.requests(match=token)) == 1


def test_cancel_stops_a_running_response(sdk: openai.OpenAI, fake_llm: FakeLLMServer) -> None:
    token = uuid.uuid4().hex
    fake_llm.script([HANG], match=token)
    response = create(sdk, input=f"hang {token}", background=True)
    deadline = time.monotonic() + 30
    while not fake_llm.requests(match=token):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    cancelled = strict(sdk.responses.with_raw_response.cancel(response.id))
    assert cancelled.status == "cancelled"
    again = strict(sdk.responses.with_raw_response.cancel(response.id))  # idempotent
    assert again.status == "cancelled"


def test_a_busy_conversation_is_a_409_the_sdk_does_not_retry(
    sdk: openai.OpenAI, fake_llm: FakeLLMServer, requests_sent: list[httpx.Request]
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script([HANG], match=token)
    running = create(sdk, input=f"hang {token}", background=True)
    assert running.conversation is not None
    requests_sent.clear()
    with pytest.raises(openai.ConflictError) as busy:
        create(sdk, conversation=running.conversation.id, input="another")
    assert busy.value.response.headers["x-should-retry"] == "false"
    assert busy.value.body["code"] == "conversation_busy"  # type: ignore[index]
    assert len(requests_sent) == 1  # max_retries=2, yet asked once
    sdk.responses.cancel(running.id)


DEEP: dict[str, Any] = {"type": "object"}
for _ in range(350):
    DEEP = {"type": "object", "properties": {"a": DEEP}}


def test_bad_requests_are_refused_in_openai_s_error_shape(
    sdk: openai.OpenAI, shared_api: Deployment
) -> None:
    """Each bad input: the status and `param` it gets; nothing is written."""
    cases: list[tuple[dict[str, Any], type[Exception], str | None]] = [
        ({"input": "x", "store": "no"}, openai.BadRequestError, "store"),
        ({"input": "x", "tool_choice": 3}, openai.BadRequestError, "tool_choice"),
        ({"input": "x", "tool_choice": "required"}, openai.BadRequestError, "tool_choice"),
        ({"input": "x", "tool_choice": "always"}, openai.BadRequestError, "tool_choice"),
        (
            {"input": "x", "tools": [LOCATE], "tool_choice": {"type": "function"}},
            openai.BadRequestError,
            "tool_choice",
        ),
        (
            {
                "input": "x",
                "tools": [LOCATE],
                "tool_choice": {"type": "function", "name": "get_weather"},
            },
            openai.BadRequestError,
            "tool_choice",
        ),
        (  # a tool of the server that the request does not allow
            {
                "input": "x",
                "tools": [{**MCP, "allowed_tools": ["add"]}],
                "tool_choice": {"type": "function", "name": "erase_notes"},
            },
            openai.BadRequestError,
            "tool_choice",
        ),
        (
            {"input": "x", "tools": [LOCATE], "tool_choice": {"type": "web_search_preview"}},
            openai.BadRequestError,
            "tool_choice",
        ),
        ({"input": "x", "tools": [{"type": "web_search"}]}, openai.BadRequestError, "tools[0]"),
        # a reasoning item is passed over: nothing is left to answer
        ({"input": [{"type": "reasoning", "summary": []}]}, openai.BadRequestError, "input"),
        ({"input": "x", "temperature": 0.2}, openai.BadRequestError, "temperature"),
        (
            {"input": "x", "metadata": {str(n): "v" for n in range(17)}},
            openai.BadRequestError,
            "metadata",
        ),
        ({"input": "x", "metadata": {"k": 1}}, openai.BadRequestError, "metadata"),
        (
            {"input": "x", "tools": [{"type": "mcp", "server_label": "nope"}]},
            openai.BadRequestError,
            "tools",
        ),
        (
            {"input": "x", "tools": [{**MCP, "require_approval": "sometimes"}]},
            openai.BadRequestError,
            "tools[0]",
        ),
        (
            {"input": "x", "tools": [{**MCP, "require_approval": {"always": ["add"]}}]},
            openai.BadRequestError,
            "tools[0]",
        ),
        (
            {
                "input": "x",
                "tools": [{**MCP, "require_approval": {"always": {"tool_names": ["nope"]}}}],
            },
            openai.BadRequestError,
            "tools",
        ),
        (
            {"input": "x", "previous_response_id": "resp_" + "0" * 32},
            openai.NotFoundError,
            None,
        ),
        ({"input": "x", "previous_response_id": "nonsense"}, openai.BadRequestError, None),
        (
            {
                "input": [{"type": "function_call_output", "call_id": "c", "output": "o"}],
            },
            openai.BadRequestError,
            "previous_response_id",
        ),
        (
            {"input": "x", "text": {"format": {"type": "yaml"}}},
            openai.BadRequestError,
            "text.format",
        ),
        (
            {"input": "x", "text": {"format": {"type": "json_schema", "name": "t"}}},
            openai.BadRequestError,
            "text.format",
        ),
        (
            {
                "input": "x",
                "text": {"format": {"type": "json_schema", "name": "t", "schema": {"type": 3}}},
            },
            openai.BadRequestError,
            "text.format",
        ),
        ({"input": "x", "text": {"form": {}}}, openai.BadRequestError, "text"),
        # function parameters 700 levels of JSON deep (350 objects): refused, never a 500
        (
            {"input": "x", "tools": [{"type": "function", "name": "f", "parameters": DEEP}]},
            openai.BadRequestError,
            None,
        ),
        (
            {
                "input": "x",
                "text": {"format": {"type": "json_schema", "name": "t", "schema": DEEP}},
            },
            openai.BadRequestError,
            "text.format",
        ),
    ]
    before = shared_api.client.list_conversations(limit=100).conversations
    for fields, error, param in cases:
        with pytest.raises(error) as refused:
            create(sdk, **fields)
        body = refused.value.body  # type: ignore[attr-defined]
        assert set(body) >= {"message", "type", "param", "code"}, body
        if param is not None:
            assert body["param"] == param, (fields, body)
    assert shared_api.client.list_conversations(limit=100).conversations == before
    with pytest.raises(openai.NotFoundError) as missing:
        sdk.responses.retrieve("resp_" + uuid.uuid4().hex)
    assert missing.value.body["code"] == "response_not_found"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve("not-a-response")


# --- streams ------------------------------------------------------------------------------------

ANSWER = "The quick brown fox jumps over the lazy dog, streamed in pieces."
STREAM_EVENTS = TypeAdapter(list[openai.types.responses.ResponseStreamEvent])


def numbered(events: list[Any]) -> list[dict[str, Any]]:
    """The events as sent (without what the SDK's helper adds: the text so far, the parse)."""
    return [
        event.model_dump(exclude_none=True, exclude={"snapshot", "parsed"}, warnings=False)
        for event in events
    ]


def test_a_stream_reaches_the_sdk_s_final_response_and_every_replay_is_the_same(
    sdk: openai.OpenAI, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script(
        [{"text": ANSWER, "stream": True, "chunks": 8, "chunk_delay": 0.1}], match=token
    )
    with sdk.responses.stream(model=FAKE_MODEL, input=f"stream {token}") as stream:
        live = list(stream)
        final = stream.get_final_response()
    assert final.output_text == ANSWER and final.status == "completed"
    types = [event.type for event in live]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    deltas = [event.delta for event in live if event.type == "response.output_text.delta"]
    assert "".join(deltas) == ANSWER and len(deltas) > 1  # streamed, not in one piece
    numbers = [event.sequence_number for event in live]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    assert numbers[0] == 0

    # A replay (the SDK's own: from the start) gives the same events with the same numbers.
    with sdk.responses.stream(response_id=final.id) as again:
        replayed = list(again)
        assert again.get_final_response().output_text == ANSWER
    raw = list(sdk.responses.retrieve(final.id, stream=True))
    STREAM_EVENTS.validate_python([event.model_dump() for event in raw])  # the SDK's own types
    assert numbered(replayed)[:-1] == numbered(live)[:-1]
    assert replayed[-1].sequence_number == live[-1].sequence_number

    # Resumed after any event: exactly the events that followed it.
    for cut in (1, len(live) // 2, len(live) - 2):
        after = live[cut].sequence_number
        resumed = list(sdk.responses.retrieve(final.id, stream=True, starting_after=after))
        assert numbered(resumed)[:-1] == numbered(live[cut + 1 :])[:-1], cut


def test_a_stream_dropped_mid_reply_resumes_exactly_where_it_stopped(
    sdk: openai.OpenAI, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script(
        [{"text": ANSWER, "stream": True, "chunks": 12, "chunk_delay": 0.15}], match=token
    )
    seen: list[Any] = []
    response_id = None
    with sdk.responses.create(model=FAKE_MODEL, input=f"drop {token}", stream=True) as raw:
        for event in raw:
            seen.append(event)
            response_id = response_id or event.response.id  # (response.created comes first)
            if sum(e.type == "response.output_text.delta" for e in seen) == 3:
                break  # the connection is dropped mid-reply
    assert response_id is not None
    last = seen[-1].sequence_number
    rest = list(sdk.responses.retrieve(response_id, stream=True, starting_after=last))
    assert rest[-1].type == "response.completed"
    text = "".join(e.delta for e in [*seen, *rest] if e.type == "response.output_text.delta")
    assert text == ANSWER  # nothing twice, nothing missing
    whole = list(sdk.responses.retrieve(response_id, stream=True))
    assert numbered([*seen, *rest])[:-1] == numbered(whole)[:-1]


# --- the worker's MCP tools ---------------------------------------------------------------------


def test_mcp_calls_are_mcp_call_items_and_an_approval_is_a_round_trip(
    sdk: openai.OpenAI, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script(
        [
            {"tool_calls": [{"id": "c_add", "name": "add", "arguments": {"a": 2, "b": 3}}]},
            {"tool_calls": [{"id": "c_erase", "name": "erase_notes", "arguments": {}}]},
            {"text": "Added, then erased."},
        ],
        match=token,
        mode="by_iteration",
    )
    tools = [{**MCP, "allowed_tools": ["add", "erase_notes"]}]
    first = create(sdk, input=f"add then erase {token}", tools=tools)
    assert first.status == "completed"
    add, ask = first.output
    assert add.type == "mcp_call" and (add.name, add.server_label) == ("add", "tools")
    assert add.output == "5.0" and add.error is None  # (the demo add returns a float)
    assert ask.type == "mcp_approval_request" and ask.name == "erase_notes"
    assert first.tools[0].type == "mcp"

    second = create(
        sdk,
        previous_response_id=first.id,
        input=[{"type": "mcp_approval_response", "approval_request_id": ask.id, "approve": True}],
    )
    assert second.status == "completed" and second.output_text == "Added, then erased."
    erase = second.output[0]
    assert erase.type == "mcp_call" and erase.approval_request_id == ask.id
    assert erase.output == "All notes erased."
    items = sdk.responses.input_items.list(second.id).data
    assert [(i.type, getattr(i, "approve", None)) for i in items] == [
        ("mcp_approval_response", True)
    ]


def test_require_approval_always_asks_before_a_tool_its_server_runs_freely(
    sdk: openai.OpenAI, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script(
        [
            {"tool_calls": [{"id": "c_add", "name": "add", "arguments": {"a": 2, "b": 3}}]},
            {"text": "Five."},
        ],
        match=token,
        mode="by_iteration",
    )
    # the server's policy runs `add` without asking (it is not destructive)
    always = {"always": {"tool_names": ["add"]}}
    tools = [{**MCP, "allowed_tools": ["add", "fail"], "require_approval": always}]
    first = create(sdk, input=f"add {token}", tools=tools)
    (ask,) = first.output
    assert ask.type == "mcp_approval_request" and ask.name == "add"
    (echoed,) = first.tools
    assert echoed.type == "mcp" and echoed.require_approval is not None
    assert echoed.require_approval.model_dump(exclude_none=True) == always  # type: ignore[union-attr]
    second = create(
        sdk,
        previous_response_id=first.id,
        input=[{"type": "mcp_approval_response", "approval_request_id": ask.id, "approve": True}],
    )
    assert second.output_text == "Five." and second.output[0].output == "5.0"  # type: ignore[union-attr]
    # "never" follows the server's own policy: a caller asks for more approvals, never fewer
    token = uuid.uuid4().hex
    fake_llm.script(
        [
            {"tool_calls": [{"id": "c_add", "name": "add", "arguments": {"a": 1, "b": 1}}]},
            {"text": "Two."},
        ],
        match=token,
        mode="by_iteration",
    )
    plain = create(sdk, input=f"add {token}", tools=[{**MCP, "require_approval": "never"}])
    assert plain.output_text == "Two." and plain.output[0].type == "mcp_call"


def test_cancel_during_a_slow_tool_reaches_the_mcp_server(
    sdk: openai.OpenAI, fake_llm: FakeLLMServer, shared_api: Deployment
) -> None:
    label = uuid.uuid4().hex
    fake_llm.script(
        [
            {
                "tool_calls": [
                    {"id": "c_slow", "name": "slow", "arguments": {"seconds": 30, "label": label}}
                ]
            }
        ],
        match=label,
        mode="by_iteration",
    )
    response = create(
        sdk, input=f"slowly {label}", tools=[{**MCP, "allowed_tools": ["slow"]}], background=True
    )
    ledger = shared_api.tmp / "ledger.jsonl"

    def entries(tool: str) -> list[dict[str, Any]]:
        return [
            e for e in read_ledger(ledger) if e["tool"] == tool and e["arguments"]["label"] == label
        ]

    deadline = time.monotonic() + 60
    while not entries("slow"):
        assert time.monotonic() < deadline, "the slow tool never started"
        time.sleep(0.05)
    cancelled = strict(sdk.responses.with_raw_response.cancel(response.id))
    assert cancelled.status == "cancelled"
    (call,) = cancelled.output
    assert call.type == "mcp_call" and call.status == "failed"
    deadline = time.monotonic() + 30
    while not entries("slow:cancelled"):  # the server heard notifications/cancelled
        assert time.monotonic() < deadline, "the MCP server was never told"
        time.sleep(0.05)


def test_a_cancelled_stream_ends_with_response_incomplete(
    sdk: openai.OpenAI, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script([HANG], match=token)
    with sdk.responses.create(model=FAKE_MODEL, input=f"hang {token}", stream=True) as raw:
        events = []
        for event in raw:
            events.append(event)
            if event.type == "response.in_progress":
                sdk.responses.cancel(event.response.id)
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.status == "cancelled"


def test_a_history_written_elsewhere_is_copied_into_a_new_conversation(
    sdk: openai.OpenAI, fake_llm: FakeLLMServer
) -> None:
    """A history another provider answered (its assistant messages carry no id of ours): the
    items before its last user message become a new conversation's first messages, and the
    message its first turn. The same request again is the same turn; the next request, with the
    reply we returned, continues the copy."""
    token, later = uuid.uuid4().hex, uuid.uuid4().hex
    fake_llm.script([{"text": "Still 4."}], match=later)
    fake_llm.script([{"text": "It is 12."}], match=token)
    written = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2 + 2?"},
        {"type": "message", "role": "assistant", "id": "msg_elsewhere", "content": [
            {"type": "output_text", "text": "4"}]},
        {"role": "user", "content": f"and times 3? {token}"},
    ]  # fmt: skip
    first = create(sdk, input=written)
    assert first.output_text == "It is 12." and first.instructions == "Be brief."
    (sent,) = fake_llm.requests(match=token)
    assert [(m["role"], m["content"]) for m in sent["body"]["messages"]] == [
        ("system", "Be brief."),
        ("user", "What is 2 + 2?"),
        ("assistant", "4"),
        ("user", f"and times 3? {token}"),
    ]
    again = create(sdk, input=written)
    assert again.id == first.id and len(fake_llm.requests(match=token)) == 1

    third = create(sdk, input=[*written, *dumped(first), {"role": "user", "content": later}])
    assert third.output_text == "Still 4." and third.conversation == first.conversation
    assert len(fake_llm.requests(match=later)[-1]["body"]["messages"]) == 6
