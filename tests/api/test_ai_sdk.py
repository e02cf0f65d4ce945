"""`/v1/ai-sdk/chat` through the AI SDK's own chat (the `ai` package from the npm registry, run by
Node: `tests/aisdk_driver.py`), against a real `chatworker serve` and a real worker: text, the
worker's tools, an approval, a client tool, a dropped connection resumed, stop; then the bad
input, each a clear 400 with nothing written."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.api.aisdk.requests import conversation_of
from app.testing.fake_llm import FakeLLMServer
from tests.aisdk_driver import AiSdkChat, assistant, require_node, shown_text
from tests.api.conftest import Deployment, owner_name

pytestmark = pytest.mark.xdist_group("api-ai-sdk")

# The MCP test server with its destructive tool, whose calls wait for the user's approval.
API_ENV = {"MCP_EXTRA_TOOLS": "erase_notes"}
HANG = {"hang": 30}
ANSWER = (
    "Streams that survive a dropped connection are the whole point: the reply goes on, and "
    "the page picks it up again where it was."
)
LOCATE = {
    "name": "get_location",
    "description": "The user's city.",
    "parameters": {"type": "object", "properties": {}},
}


class Page:
    """A caller (a new owner's key) and the chats it opens."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.owner = owner_name("aisdk")
        self.key = deployment.key(self.owner)
        self.url = deployment.apis[0].url
        self.chats: list[AiSdkChat] = []

    def chat(self, setup: dict[str, Any] | None = None, chat_id: str | None = None) -> AiSdkChat:
        chat = AiSdkChat(self.url, self.key, chat_id or uuid.uuid4().hex[:16], setup)
        self.chats.append(chat)
        return chat

    def http(self) -> httpx.Client:
        return self.deployment.http(token=self.key)

    def turn_of(self, message: dict[str, Any]) -> dict[str, Any]:
        with self.http() as http:
            found = http.get(f"/v1/turns/{message['id']}")
        assert found.status_code == 200, found.text
        turn: dict[str, Any] = found.json()
        return turn


@pytest.fixture
def page(shared_api: Deployment) -> Iterator[Page]:
    require_node()
    found = Page(shared_api)
    yield found
    for chat in found.chats:
        chat.close()


def types(chunks: list[Any]) -> list[str]:
    return [c if isinstance(c, str) else c["type"] for c in chunks]


def test_a_message_streams_into_one_assistant_message(page: Page, fake_llm: FakeLLMServer) -> None:
    token = uuid.uuid4().hex
    fake_llm.script(
        [{"text": ANSWER, "stream": True, "chunks": 6, "chunk_delay": 0.02}, {"text": "Twice."}],
        match=token,
    )
    chat = page.chat({"instructions": "Be brief."})
    done = chat.call("send", text=f"hello {token}")
    assert done["status"] == "ready" and done["error"] is None
    assert done["finished"]["finishReason"] == "stop"
    message = assistant(done)
    assert [p["type"] for p in message["parts"]] == ["step-start", "text"]
    assert message["parts"][1] == {"type": "text", "text": ANSWER, "state": "done"}
    # the message is the turn (its id), and the chat is a conversation of the caller's own
    turn = page.turn_of(message)
    assert turn["status"] == "completed"
    assert turn["conversation_id"] == str(conversation_of(page.owner, chat.chat_id))
    seen = types(chat.chunks())
    assert seen[:3] == ["start", "start-step", "text-start"]
    assert seen[-4:] == ["text-end", "finish-step", "finish", "[DONE]"]
    assert seen.count("text-delta") > 1  # streamed live, not in one piece

    # the next message continues the same conversation (the model is sent the history)
    again = chat.call("send", text=f"again {token}")
    assert [m["role"] for m in again["messages"]] == ["user", "assistant"] * 2
    assert shown_text(assistant(again)) == "Twice."
    sent = fake_llm.requests(match=token)[-1]["body"]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]


def test_a_file_part_reaches_the_model_and_a_structured_answer_is_a_data_part(
    page: Page, fake_llm: FakeLLMServer
) -> None:
    from tests.integration.test_files import png

    token = uuid.uuid4().hex
    fake_llm.script([{"text": '{"kind": "bug"}'}], match=token)
    schema = {"name": "ticket", "schema": {"type": "object", "required": ["kind"]}}
    chat = page.chat({"model": "openai/gpt-4o-mini", "outputSchema": schema})
    url = "data:image/png;base64," + base64.b64encode(png(seed=4)).decode()
    image = {"type": "file", "mediaType": "image/png", "filename": "shot.png", "url": url}
    done = chat.call("send", text=f"classify {token}", files=[image])
    assert done["status"] == "ready" and done["error"] is None, done
    (sent,) = fake_llm.requests(match=token)
    parts = sent["body"]["messages"][-1]["content"]
    assert {"type": "image_url", "image_url": {"url": url}} in parts
    assert sent["body"]["response_format"]["json_schema"]["name"] == "ticket"
    message = assistant(done)
    (data,) = [p for p in message["parts"] if p["type"] == "data-output"]
    assert data["data"] == {"kind": "bug"}
    with page.http() as http:
        conversation = http.get(f"/v1/turns/{message['id']}").json()["conversation_id"]
        (user, _) = http.get(f"/v1/conversations/{conversation}").json()["messages"]
    assert [(f["name"], f["media_type"]) for f in user["files"]] == [("shot.png", "image/png")]


def test_regenerate_and_an_edited_message_are_new_branches_of_the_conversation(
    page: Page, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script(
        [{"text": "One."}, {"text": "Two."}, {"text": "Again."}, {"text": "Edited."}],
        match=token,
    )
    chat = page.chat()
    chat.call("send", text=f"first {token}")
    second = chat.call("send", text="second")
    asked = [m for m in second["messages"] if m["role"] == "user"]

    # useChat's regenerate(): a new answer to the last message, a sibling of the old one
    again = chat.call("regenerate")
    assert again["error"] is None and shown_text(assistant(again)) == "Again."
    assert page.turn_of(assistant(again))["kind"] == "regenerate"
    sent = fake_llm.requests(match=token)[-1]["body"]["messages"]
    assert [m["content"] for m in sent if m["role"] != "system"][-1] == "second"
    assert "Two." not in str(sent)  # the old answer is not sent

    # sendMessage({text, messageId}): the first message edited, answered on its own path
    edited = chat.call("edit", messageId=asked[0]["id"], text=f"first, edited {token}")
    assert edited["error"] is None and shown_text(assistant(edited)) == "Edited."
    assert [m["role"] for m in edited["messages"]] == ["user", "assistant"]
    sent = fake_llm.requests(match=token)[-1]["body"]["messages"]
    assert [m["role"] for m in sent if m["role"] != "system"] == ["user"]
    conversation_id = conversation_of(page.owner, chat.chat_id)
    with page.http() as http:
        path = http.get(f"/v1/conversations/{conversation_id}").json()["messages"]
    assert [m["content"] for m in path] == [f"first, edited {token}", "Edited."]
    assert len(path[0]["siblings"]) == 2


def test_worker_tools_are_dynamic_parts_and_an_approval_is_a_round_trip(
    page: Page, fake_llm: FakeLLMServer
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
    chat = page.chat({"tools": ["add", "erase_notes"]})
    paused = chat.call("send", text=f"add then erase {token}")
    assert paused["status"] == "ready" and paused["finished"]["finishReason"] == "tool-calls"
    message = assistant(paused)
    tools = [p for p in message["parts"] if p["type"] == "dynamic-tool"]
    assert [(t["toolName"], t["state"]) for t in tools] == [
        ("add", "output-available"),
        ("erase_notes", "approval-requested"),
    ]
    assert tools[0]["input"] == {"a": 2, "b": 3} and tools[0]["output"] == "5.0"
    approval = tools[1]["approval"]["id"]

    done = chat.call("approve", approvalId=approval, approved=True)
    assert done["status"] == "ready" and done["error"] is None
    assert len(done["messages"]) == 2  # the same assistant message, continued
    message = assistant(done)
    tools = [p for p in message["parts"] if p["type"] == "dynamic-tool"]
    assert [(t["toolName"], t["state"]) for t in tools] == [
        ("add", "output-available"),
        ("erase_notes", "output-available"),
    ]
    assert tools[1]["output"] == "All notes erased."
    assert shown_text(message) == "Added, then erased."
    assert page.turn_of(message)["status"] == "completed"


def test_a_denied_approval_is_output_denied(page: Page, fake_llm: FakeLLMServer) -> None:
    token = uuid.uuid4().hex
    fake_llm.script(
        [
            {"tool_calls": [{"id": "c_erase", "name": "erase_notes", "arguments": {}}]},
            {"text": "I left your notes alone."},
        ],
        match=token,
        mode="by_iteration",
    )
    chat = page.chat({"tools": ["erase_notes"]})
    paused = chat.call("send", text=f"erase {token}")
    (part,) = [p for p in assistant(paused)["parts"] if p["type"] == "dynamic-tool"]
    done = chat.call("approve", approvalId=part["approval"]["id"], approved=False, reason="no")
    message = assistant(done)
    (part,) = [p for p in message["parts"] if p["type"] == "dynamic-tool"]
    assert part["state"] == "output-denied"
    assert shown_text(message) == "I left your notes alone."
    told = fake_llm.requests(match=token)[-1]["body"]["messages"][-1]
    assert told["role"] == "tool" and "no" in told["content"]


def test_a_client_tool_is_answered_with_add_tool_output(
    page: Page, fake_llm: FakeLLMServer
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
    chat = page.chat({"clientTools": [LOCATE]})
    paused = chat.call("send", text=f"where am I {token}")
    (part,) = [p for p in assistant(paused)["parts"] if p["type"] == "tool-get_location"]
    assert part["state"] == "input-available" and part["toolCallId"] == "c_loc"

    done = chat.call("output", tool="get_location", toolCallId="c_loc", output={"city": "Paris"})
    assert done["status"] == "ready" and done["error"] is None
    message = assistant(done)
    (part,) = [p for p in message["parts"] if p["type"] == "tool-get_location"]
    assert part["state"] == "output-available" and part["output"] == {"city": "Paris"}
    assert shown_text(message) == "You are in Paris."
    told = fake_llm.requests(match=token)[-1]["body"]["messages"][-1]
    assert told["role"] == "tool" and "Paris" in told["content"]


def test_a_dropped_connection_resumes_into_the_same_message(
    page: Page, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script(
        [{"text": ANSWER, "stream": True, "chunks": 20, "chunk_delay": 0.25}], match=token
    )
    chat = page.chat()
    dropped = chat.call("send", text=f"tell me {token}", dropAfter="text-delta")
    assert dropped["status"] == "error" and dropped["finished"]["isDisconnect"] is True
    partial = assistant(dropped)
    assert ANSWER.startswith(shown_text(partial)) and shown_text(partial) != ANSWER

    resumed = chat.call("resume")
    assert resumed["status"] == "ready" and resumed["error"] is None
    assert len(resumed["messages"]) == 2
    message = assistant(resumed)
    assert message["id"] == partial["id"]
    assert [p["type"] for p in message["parts"]] == ["step-start", "text"]  # nothing twice
    assert shown_text(message) == ANSWER
    # the resume was a GET of the chat's stream; once the turn is over, there is nothing to resume
    assert chat.call("resume")["messages"] == resumed["messages"]
    gets = [r for r in chat.seen if r["op"] == "http" and r["method"] == "GET"]
    assert [g["status"] for g in gets] == [200, 204]


def test_stop_cancels_the_turn(page: Page, fake_llm: FakeLLMServer) -> None:
    token = uuid.uuid4().hex
    fake_llm.script([HANG], match=token)
    chat = page.chat()
    sent = chat.send("send", text=f"hang {token}", wait=False)
    chat.wait_for(
        lambda r: r["op"] == "chunk" and r["chunk"] != "[DONE]" and r["chunk"]["type"] == "start"
    )
    stopped = chat.call("stop")
    assert stopped["status"] == 200 and stopped["body"]["stopped"] is True
    # the page's own request ended when stop() dropped it
    if not any(r["op"] == "done" and r["id"] == sent for r in chat.seen):
        chat.wait_for(lambda r: r["op"] == "done" and r["id"] == sent)
    (ended,) = [r for r in chat.seen if r["op"] == "done" and r["id"] == sent]
    assert ended["finished"]["isAbort"] is True and ended["status"] == "ready"
    turn = {"id": stopped["body"]["turn"]}
    deadline = time.monotonic() + 30
    while (status := page.turn_of(turn)["status"]) != "cancelled":  # the model call was cancelled
        assert time.monotonic() < deadline, status
        time.sleep(0.05)
    again = chat.call("stop")
    assert again["body"] == {"stopped": False, "turn": turn["id"]}


def test_the_stream_is_the_ui_message_stream_protocol(page: Page, fake_llm: FakeLLMServer) -> None:
    token = uuid.uuid4().hex
    fake_llm.script([{"text": "Short."}], match=token)
    body = {"id": f"raw-{token}", "messages": [user_message(f"hi {token}")]}
    with page.http() as http, http.stream("POST", "/v1/ai-sdk/chat", json=body) as stream:
        assert stream.status_code == 200
        assert stream.headers["x-vercel-ai-ui-message-stream"] == "v1"
        assert stream.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in stream.iter_lines() if line.startswith("data:")]
    assert lines[-1] == "data: [DONE]"
    # a chat never used, or one whose turn is over: nothing to resume
    with page.http() as http:
        assert http.get(f"/v1/ai-sdk/chat/raw-{token}/stream").status_code == 204
        assert http.get("/v1/ai-sdk/chat/never-used/stream").status_code == 204
        assert http.post("/v1/ai-sdk/chat/never-used/stop").json() == {
            "stopped": False,
            "turn": None,
        }


# --- bad input ----------------------------------------------------------------------------------


def user_message(text: str, message_id: str | None = None) -> dict[str, Any]:
    return {
        "id": message_id or uuid.uuid4().hex,
        "role": "user",
        "parts": [{"type": "text", "text": text}],
    }


BAD_BODIES: list[tuple[str, Any, str]] = [
    ("not an object", [], "JSON object"),
    ("no id", {"messages": [user_message("hi")]}, "id (the chat's)"),
    ("no messages", {"id": "c1", "messages": []}, "messages must be a non-empty list"),
    (
        "a regenerate whose list ends with the answer",
        {
            "id": "c1",
            "messages": [{"id": "a1", "role": "assistant", "parts": []}],
            "trigger": "regenerate-message",
        },
        "must end with the user message to answer again",
    ),
    (
        "another trigger",
        {"id": "c1", "messages": [user_message("hi")], "trigger": "resume-stream"},
        "trigger must be 'submit-message' or 'regenerate-message'",
    ),
    (
        "a file part at a URL",
        {
            "id": "c1",
            "messages": [
                {
                    "id": "m1",
                    "role": "user",
                    "parts": [
                        {"type": "text", "text": "look"},
                        {"type": "file", "mediaType": "image/png", "url": "https://x.test/a.png"},
                    ],
                }
            ],
        },
        "must be a data: URL",
    ),
    (
        "a file part that is no base64",
        {
            "id": "c1",
            "messages": [
                {
                    "id": "m1",
                    "role": "user",
                    "parts": [
                        {"type": "text", "text": "look"},
                        {"type": "file", "mediaType": "image/png", "url": "data:,"},
                    ],
                }
            ],
        },
        "without ;base64",
    ),
    (
        "an empty message",
        {"id": "c1", "messages": [{"id": "m1", "role": "user", "parts": []}]},
        "has no text",
    ),
    (
        "a system message last",
        {"id": "c1", "messages": [{"id": "m1", "role": "system", "parts": []}]},
        "must be user or assistant",
    ),
    (
        "an unknown model",
        {"id": "c1", "messages": [user_message("hi")], "model": ""},
        "model",
    ),
]


@pytest.mark.parametrize(("case", "body", "says"), BAD_BODIES, ids=[c[0] for c in BAD_BODIES])
def test_bad_bodies_are_refused_and_write_nothing(
    page: Page, case: str, body: Any, says: str
) -> None:
    with page.http() as http:
        refused = http.post("/v1/ai-sdk/chat", json=body)
        assert refused.status_code == 400, refused.text
        assert refused.headers["content-type"] == "application/problem+json"
        assert says in refused.json()["detail"], refused.json()
        assert http.get("/v1/conversations").json()["data"] == []  # nothing written


def test_a_forged_or_stale_answer_is_refused_and_the_turn_still_waits(
    page: Page, fake_llm: FakeLLMServer
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
    chat = page.chat({"clientTools": [LOCATE]})
    paused = chat.call("send", text=f"where {token}")
    message = assistant(paused)
    part = next(p for p in message["parts"] if p["type"] == "tool-get_location")

    def answering(*parts: dict[str, Any], message_id: str = message["id"]) -> dict[str, Any]:
        last = {"id": message_id, "role": "assistant", "parts": list(parts)}
        return {"id": chat.chat_id, "messages": [*paused["messages"][:-1], last]}

    forged = {**part, "state": "approval-responded", "approval": {"id": "x", "approved": True}}
    other_call = {**part, "toolCallId": "c_other", "state": "output-available", "output": "x"}
    answered = {**part, "state": "output-available", "output": "Paris"}
    cases = [
        (answering(forged), "waits for no approval"),
        (answering(other_call), "answers none of the calls"),
        (answering(part), "answers nothing"),
        (answering(answered, message_id="not-a-turn"), "is not a turn of this chat"),
        (
            {**answering(answered), "id": "another-chat"},
            f"no chat {'another-chat'!r}",
        ),
    ]
    with page.http() as http:
        for body, says in cases:
            refused = http.post("/v1/ai-sdk/chat", json=body)
            assert refused.status_code in (400, 404), refused.text
            assert says in refused.json()["detail"], (says, refused.json())
    turn = page.turn_of(message)
    assert turn["status"] == "requires_action"  # nothing was answered
    done = chat.call("output", tool="get_location", toolCallId="c_loc", output="Paris")
    assert shown_text(assistant(done)) == "You are in Paris."
