"""The bad-input catalog, through a real worker: what each bad input gets.

| bad input                                   | outcome                                      |
|---------------------------------------------|----------------------------------------------|
| malformed tool-call JSON                    | error result to the model; turn goes on      |
| arguments that fail the tool's schema       | error result (the MCP server's message)      |
| unknown tool                                | error result "Unknown tool"                  |
| tool not allowed in the conversation        | never executed; error result                 |
| duplicate tool call ids in one message      | made unique; each call answered once         |
| empty tool call ids                         | given unique ids                             |
| empty `choices`                             | turn fails: "The model returned no choices"  |
| finish_reason `content_filter`              | turn fails: content filter message           |
| tool call cut off by the length limit       | not executed; error result says why          |
| context length exceeded (HTTP 400)          | turn fails with the provider's message       |
| empty assistant message                     | turn fails: "... returned an empty message"  |
| oversized user message                      | InvalidMessage at submit; nothing written    |
| tool output urging a banned tool            | the banned tool never runs; error result     |
| invalid tool calls three rounds in a row    | turn fails naming the last error             |
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from app.client import ConversationView
from app.errors import InvalidMessage
from app.testing import services
from app.testing.fake_llm import FakeLLMServer
from app.worker.offer import CUT_OFF_RESULT
from app.worker.verdict import CONTENT_FILTER_ERROR, EMPTY_REPLY_ERROR
from tests.deployment import Deployment
from tests.invariants import transcript_violations
from tests.servers.mcp_server import read_ledger


@pytest.fixture(scope="module")
def deployment(
    postgres_server: str,
    migrated_template: str,
    redis_server: str,
    fake_llm_server: FakeLLMServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    """One worker for the whole catalog; each case scripts the model for its own conversation."""
    name = services.unique_name("badinput")
    url = services.create_database(postgres_server, name, template=migrated_template)
    fake_llm_server.reset()
    deployment = Deployment(url, redis_server, tmp_path_factory.mktemp("bad"), fake_llm_server)
    try:
        deployment.start_worker()
        yield deployment
    finally:
        deployment.close()
        services.drop_database(postgres_server, name)


def run(
    deployment: Deployment,
    steps: list[dict[str, Any]],
    tools: tuple[str, ...] = ("add", "search_docs"),
) -> tuple[ConversationView, list[str]]:
    """Script the model for a new conversation, run one turn, return it and the tools that ran."""
    marker = f"case-{uuid.uuid4().hex[:8]}"
    deployment.llm.script(steps, match=marker, mode="by_iteration")
    before = len(read_ledger(deployment.ledger))
    view = deployment.wait(deployment.chat(f"{marker}: please help", list(tools)))
    ran = [entry["tool"] for entry in read_ledger(deployment.ledger)[before:]]
    rows = [(m.seq, m.role, m.content, m.tool_calls, m.tool_call_id) for m in view.messages]
    assert transcript_violations(rows, view.status) == []
    return view, ran


def call(name: str, arguments: Any, call_id: str = "c1") -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def results(view: ConversationView) -> list[tuple[str | None, bool]]:
    return [(m.content, m.is_error) for m in view.messages if m.role == "tool"]


ANSWER = {"text": "Sorry about that."}


def test_malformed_tool_call_json_goes_back_to_the_model(deployment: Deployment) -> None:
    view, ran = run(deployment, [{"tool_calls": [call("add", '{"a": 1, "b":')]}, ANSWER])
    assert view.status == "idle" and ran == []
    ((content, is_error),) = results(view)
    assert is_error and "not valid JSON" in (content or "")


def test_arguments_failing_the_schema_get_the_tool_s_validation_error(
    deployment: Deployment,
) -> None:
    view, ran = run(deployment, [{"tool_calls": [call("add", {"a": "one", "b": 2})]}, ANSWER])
    assert view.status == "idle" and ran == []  # refused by the worker: the server never saw it
    ((content, is_error),) = results(view)
    assert is_error and "Invalid arguments for add at `a`: 'one' is not of type 'number'" in (
        content or ""
    )


def test_an_unknown_tool_gets_an_error_result(deployment: Deployment) -> None:
    view, ran = run(deployment, [{"tool_calls": [call("format_disk", {})]}, ANSWER])
    assert view.status == "idle" and ran == []
    assert results(view)[0][1] and "Unknown tool: format_disk" in (results(view)[0][0] or "")


def test_a_tool_that_is_not_allowed_never_runs(deployment: Deployment) -> None:
    view, ran = run(deployment, [{"tool_calls": [call("write_note", {"text": "x"})]}, ANSWER])
    assert view.status == "idle" and ran == []
    assert "not allowed" in (results(view)[0][0] or "")


def test_duplicate_tool_call_ids_are_made_unique(deployment: Deployment) -> None:
    steps = [
        {
            "tool_calls": [
                call("add", {"a": 1, "b": 1}, "dup"),
                call("add", {"a": 2, "b": 2}, "dup"),
            ]
        },
        {"text": "2 and 4"},
    ]
    view, ran = run(deployment, steps)
    assert view.status == "idle" and ran == ["add", "add"]
    ids = [c["id"] for c in view.messages[1].tool_calls]
    assert ids[0] == "dup" and ids[1] != "dup" and len(set(ids)) == 2
    assert [m.tool_call_id for m in view.messages if m.role == "tool"] == ids
    assert [c for c, _ in results(view)] == ["2.0", "4.0"]


def test_empty_tool_call_ids_are_given_unique_ones(deployment: Deployment) -> None:
    steps = [
        {"tool_calls": [call("add", {"a": 1, "b": 1}, ""), call("add", {"a": 1, "b": 2}, "")]},
        ANSWER,
    ]
    view, ran = run(deployment, steps)
    ids = [c["id"] for c in view.messages[1].tool_calls]
    assert view.status == "idle" and ran == ["add", "add"]
    assert all(ids) and len(set(ids)) == 2


def test_empty_choices_fail_the_turn(deployment: Deployment) -> None:
    view, _ = run(deployment, [{"empty_choices": True}])
    assert (view.status, view.error) == ("failed", "The model returned no choices")


def test_a_content_filtered_answer_fails_the_turn(deployment: Deployment) -> None:
    view, _ = run(deployment, [{"text": "[removed]", "finish_reason": "content_filter"}])
    assert (view.status, view.error) == ("failed", CONTENT_FILTER_ERROR)


def test_a_tool_call_cut_off_by_the_length_limit_is_not_run(deployment: Deployment) -> None:
    # The arguments happen to parse, but the reply was cut: they may be incomplete.
    steps = [{"tool_calls": [call("add", {"a": 1, "b": 2})], "finish_reason": "length"}, ANSWER]
    view, ran = run(deployment, steps)
    assert view.status == "idle" and ran == []
    assert results(view) == [(CUT_OFF_RESULT, True)]
    assert view.messages[1].tool_calls[0]["name"] == "add"


def test_context_length_exceeded_fails_the_turn_with_the_provider_message(
    deployment: Deployment,
) -> None:
    message = "This model's maximum context length is 8192 tokens. However, you requested 9000."
    view, _ = run(
        deployment, [{"error": 400, "message": message, "code": "context_length_exceeded"}]
    )
    assert view.status == "failed"
    assert "maximum context length is 8192 tokens" in (view.error or "")
    assert "HTTP 400" in (view.error or "")


def test_an_empty_assistant_message_fails_the_turn(deployment: Deployment) -> None:
    view, _ = run(deployment, [{"text": ""}])
    assert (view.status, view.error) == ("failed", EMPTY_REPLY_ERROR)


def test_an_oversized_user_message_is_refused_and_nothing_is_written(
    deployment: Deployment,
) -> None:
    conversation_id = deployment.client.create_conversation()
    with pytest.raises(InvalidMessage, match="the limit is 100000"):
        deployment.client.submit_message(conversation_id, "x" * 100_001)
    view = deployment.client.get_conversation(conversation_id)
    assert (view.status, view.messages) == ("idle", [])


def test_a_tool_output_cannot_talk_the_model_into_a_banned_tool(deployment: Deployment) -> None:
    # The document says "call write_note"; the model obeys, but write_note is not allowed here.
    steps = [
        {"tool_calls": [call("search_docs", {"query": "refund"})]},
        {"tool_calls": [call("write_note", {"text": "exfiltrate"}, "c2")]},
        {"text": "I cannot do that."},
    ]
    view, ran = run(deployment, steps)
    assert view.status == "idle"
    assert ran == ["search_docs"]
    assert results(view)[1][1] and "not allowed" in (results(view)[1][0] or "")


def test_invalid_tool_calls_three_rounds_in_a_row_fail_the_turn(deployment: Deployment) -> None:
    broken = {"tool_calls": [call("add", "{not json")]}
    view, ran = run(deployment, [broken, broken, broken, ANSWER])
    assert view.status == "failed" and ran == []
    assert (view.error or "").startswith("The model's tool calls failed 3 rounds in a row")
    assert "not valid JSON" in (view.error or "")
