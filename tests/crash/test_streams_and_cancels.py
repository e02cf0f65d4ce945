"""Streams and cancels with real worker processes, Redis, PostgreSQL, the fake LLM over HTTP in
both provider formats (OpenAI chat completions and Anthropic messages, through litellm's
`openai/` and `anthropic/` routes) and the MCP test server.

    what happens                                  what a follower reading the whole time gets
    --------------------------------------------  -----------------------------------------------
    a tool turn, streamed (both formats)          every committed event once, the answer's words
                                                  before its commit
    a transient error during the stream (both)    the partial `Discarded` ("retrying in 3 s"),
                                                  then the whole answer from a new stream
    the worker SIGKILLed while it streams (both)  every committed event once, `turn.resumed`, the
                                                  partial `Discarded`, and the crash-free answer
    cancel while the model answers (both)         `turn.cancelled` within moments; the model is
                                                  not asked again
    cancel during a slow MCP tool                 the MCP server gets `notifications/cancelled`;
                                                  the call's result says "cancelled by the user"
    cancel while queued (no worker)               `cancelled` at once; a worker started later
                                                  runs nothing
    cancel while the lease holder is dead         the request waits; the recovery's claim cancels
                                                  the turn without calling the model again
    cancel racing the final answer                one consistent ending, either one

The invariants of `tests/invariants.py` hold after each.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from app.client import Delta, Discarded, EventView
from app.testing.fake_llm import FakeLLMServer
from tests.deployment import Deployment
from tests.invariants import assert_invariants
from tests.servers.mcp_server import read_ledger

ANSWER = (
    "Used tents cannot be refunded in cash, but they qualify for store credit worth half of "
    "the purchase price within sixty days, as the Northwind policy explains in its section on "
    "used and damaged items."
)
FORMATS = ("openai", "anthropic")


def use_format(deployment: Deployment, provider: str) -> str:
    """Point the workers at the fake LLM in this format; the model string of a conversation."""
    llm: FakeLLMServer = deployment.llm
    if provider == "anthropic":
        deployment.env["CHATWORKER_LLM_API_BASE"] = llm.anthropic_base
        return "anthropic/claude-fake"
    deployment.env["CHATWORKER_LLM_API_BASE"] = llm.api_base
    return "openai/fake-model"


def worker_said(deployment: Deployment, line: str) -> bool:
    """A worker's log has `line` (the host logs each run's outcome: a positive signal)."""
    return any(line in w.log_path.read_text(errors="replace") for w in deployment.workers)


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def events_of(items: list[Any]) -> list[EventView]:
    return [item for item in items if isinstance(item, EventView)]


def assert_each_event_once(items: list[Any]) -> None:
    seqs = [event.seq for event in events_of(items)]
    assert seqs == list(range(1, seqs[-1] + 1)), seqs


def assert_a_preview_of(words: str, answer: str) -> None:
    """The words shown live were the answer's beginning (all of it, but for a last delta that a
    reader polling the log at that instant finds committed already: the commit replaces it)."""
    assert words and answer.startswith(words), (words, answer)


def answer_of(items: list[Any]) -> str | None:
    answers = [
        e.message.content
        for e in events_of(items)
        if e.message is not None and e.message.role == "assistant" and not e.message.tool_calls
    ]
    return answers[-1] if answers else None


@pytest.mark.parametrize("provider", FORMATS)
def test_a_tool_turn_streams_its_answer_before_committing_it(
    deployment: Deployment, provider: str
) -> None:
    model = use_format(deployment, provider)
    deployment.llm.script(
        [
            {"tool_calls": [{"id": "call_1", "name": "add", "arguments": {"a": 1, "b": 2}}]},
            {"text": ANSWER, "stream": True, "chunks": 12, "chunk_delay": 0.02},
        ],
        mode="by_iteration",
    )
    deployment.start_worker()
    client = deployment.client
    conversation_id = client.create_conversation(model=model, tools=["add"])
    following = client.follow(conversation_id, timeout=60)
    client.submit_message(conversation_id, "What is 1 + 2, and the policy?")

    items = list(following)

    assert_each_event_once(items)
    statuses = [e.status for e in events_of(items) if e.type == "status.changed"]
    assert statuses == ["processing", "tool_loop", "idle"]
    words = "".join(item.text for item in items if isinstance(item, Delta))
    assert_a_preview_of(words, ANSWER)
    assert answer_of(items) == ANSWER
    tool = next(e for e in events_of(items) if e.message is not None and e.message.role == "tool")
    assert tool.message is not None and tool.message.content == "3.0"
    turn = client.current_turn(conversation_id)
    assert turn is not None and turn.status == "completed" and turn.completion_tokens > 0
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))


@pytest.mark.parametrize(
    ("provider", "error"),
    [("openai", {"status": 503}), ("anthropic", {"status": 529})],
)
def test_a_transient_error_during_the_stream_is_retried_and_readers_drop_the_partial(
    deployment: Deployment, provider: str, error: dict[str, Any]
) -> None:
    model = use_format(deployment, provider)
    deployment.llm.script(
        [
            {
                "text": ANSWER,
                "chunks": 10,
                # slower than the flush, and slow enough that the follower (which starts at
                # its first `next`, after the submit) is reading before the error, even on a
                # loaded machine: readers see part of it
                "chunk_delay": 0.25,
                "stream_error": {"after": 6, **error},
            },
            {"text": ANSWER, "stream": True, "chunks": 10},
        ]
    )
    deployment.start_worker()
    client = deployment.client
    conversation_id = client.create_conversation(model=model)
    following = client.follow(conversation_id, timeout=60)
    client.submit_message(conversation_id, "Tell me the policy.")

    items = list(following)

    assert_each_event_once(items)
    dropped = [item for item in items if isinstance(item, Discarded)]
    assert len(dropped) == 1 and dropped[0].reason.endswith("retrying in 3 s"), dropped
    after = items[items.index(dropped[0]) :]
    retried = "".join(i.text for i in after if isinstance(i, Delta))
    assert not retried or ANSWER.startswith(retried)  # a fast retry may commit before it shows
    assert answer_of(items) == ANSWER
    assert len(deployment.llm.requests()) == 2
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))


@pytest.mark.parametrize("provider", FORMATS)
def test_a_worker_killed_while_it_streams_is_resumed_and_the_follower_sees_it_once(
    deployment: Deployment, provider: str
) -> None:
    model = use_format(deployment, provider)
    deployment.llm.script(
        [{"text": ANSWER, "stream": True, "chunks": 40, "chunk_delay": 0.1}], mode="by_iteration"
    )
    replacement = deployment.start_worker("replacement", ready=False)
    doomed = deployment.start_worker("doomed", ready=False)
    replacement.wait_until_ready()
    doomed.wait_until_ready()
    replacement.pause()  # frozen: the doomed worker must be the one streaming
    client = deployment.client
    conversation_id = client.create_conversation(model=model)
    following = client.follow(conversation_id, timeout=90)
    client.submit_message(conversation_id, "Tell me the policy.")

    items: list[Any] = []
    for item in following:
        items.append(item)
        shown = sum(isinstance(i, Delta) for i in items)
        if shown == 5 and doomed.process is not None and doomed.process.poll() is None:
            doomed.kill()  # mid-reply
            replacement.resume()

    assert_each_event_once(items)
    types = [e.type for e in events_of(items)]
    assert types.count("turn.resumed") == 1 and types.count("turn.completed") == 1
    dropped = [item for item in items if isinstance(item, Discarded)]
    assert len(dropped) == 1, dropped
    resumed_words = items[items.index(dropped[0]) :]
    assert_a_preview_of("".join(i.text for i in resumed_words if isinstance(i, Delta)), ANSWER)
    assert answer_of(items) == ANSWER  # what a crash-free run commits
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))


@pytest.mark.parametrize("provider", FORMATS)
def test_cancel_while_the_model_answers_stops_the_turn_across_processes(
    deployment: Deployment, provider: str
) -> None:
    model = use_format(deployment, provider)
    deployment.llm.script([{"hang": 30, "text": "too late"}])
    deployment.start_worker()
    client = deployment.client
    conversation_id = client.create_conversation(model=model)
    turn_id = client.submit_message(conversation_id, "hello").turn_id
    wait_until(deployment.llm.requests, 20, "the model request")

    started = time.monotonic()
    requested = client.cancel(conversation_id)
    assert requested is not None and requested.cancel_requested_at is not None
    view = deployment.wait(conversation_id, timeout=20)
    assert time.monotonic() - started < 15  # well before the model would have answered (30 s)

    assert view.status == "idle" and [m.role for m in view.messages] == ["user"]
    assert client.get_turn(turn_id).status == "cancelled"  # type: ignore[arg-type]
    # (the worker's own word that its run of the turn ended, not a quiet half second)
    wait_until(
        lambda: worker_said(deployment, f"conversation {conversation_id}: cancelled"),
        20,
        "the worker to end its run",
    )
    assert len(deployment.llm.requests()) == 1  # not asked again
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))


def test_cancel_during_a_slow_mcp_tool_tells_the_server_and_answers_the_call(
    deployment: Deployment,
) -> None:
    use_format(deployment, "openai")
    deployment.llm.script(
        [
            {
                "tool_calls": [
                    {"id": "call_slow", "name": "slow", "arguments": {"seconds": 30}},
                    {"id": "call_add", "name": "add", "arguments": {"a": 1, "b": 2}},
                ]
            },
            {"text": "never asked"},
        ],
        mode="by_iteration",
    )
    deployment.start_worker()
    client = deployment.client
    conversation_id = deployment.chat("Take your time.", ["slow", "add"])
    wait_until(lambda: deployment.tool_runs()["slow"] == 1, 20, "the slow tool to start")

    client.cancel(conversation_id)
    view = deployment.wait(conversation_id, timeout=20)

    wait_until(
        lambda: any(e["tool"] == "slow:cancelled" for e in read_ledger(deployment.ledger)),
        10,
        "the MCP server to record notifications/cancelled",
    )
    results = [(m.tool_call_id, m.content) for m in view.messages if m.role == "tool"]
    assert results == [
        ("call_slow", "Cancelled by the user: this tool call did not complete."),
        ("call_add", "Cancelled by the user: this tool call did not complete."),
    ]
    assert deployment.tool_runs()["add"] == 0
    assert len(deployment.llm.requests()) == 1
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))


def test_cancel_while_queued_needs_no_worker_and_a_later_one_runs_nothing(
    deployment: Deployment,
) -> None:
    use_format(deployment, "openai")
    client = deployment.client
    conversation_id = client.create_conversation()
    client.submit_message(conversation_id, "hello")

    cancelled = client.cancel(conversation_id)
    assert cancelled is not None and cancelled.status == "cancelled"
    deployment.start_worker()
    deployment.ring(conversation_id)  # a doorbell that arrives late
    wait_until(
        lambda: worker_said(deployment, f"conversation {conversation_id}: not_claimed"),
        30,
        "the worker to take the doorbell and find nothing to do",
    )

    assert deployment.llm.requests() == []
    assert client.get_conversation(conversation_id).status == "idle"
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))


def test_cancel_while_the_lease_holder_is_dead_is_finished_by_the_recovery_claim(
    deployment: Deployment,
) -> None:
    use_format(deployment, "openai")
    deployment.llm.script([{"hang": 30, "text": "too late"}])
    doomed = deployment.start_worker("doomed")
    client = deployment.client
    conversation_id = client.create_conversation()
    turn_id = client.submit_message(conversation_id, "hello").turn_id
    wait_until(deployment.llm.requests, 20, "the model request")
    doomed.kill()

    requested = client.cancel(conversation_id)  # the lease is still live: a request
    assert requested is not None and requested.status == "running"
    deployment.start_worker("successor")
    view = deployment.wait(conversation_id, timeout=30)

    assert view.status == "idle"
    assert client.get_turn(turn_id).status == "cancelled"  # type: ignore[arg-type]
    assert len(deployment.llm.requests()) == 1  # the successor did not ask the model again
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))


@pytest.mark.parametrize("delay", [0.25, 0.3, 0.35])
def test_cancel_racing_the_final_answer_ends_one_way_or_the_other(
    deployment: Deployment, delay: float
) -> None:
    use_format(deployment, "openai")
    deployment.llm.script([{"delay": 0.3, "text": "the answer"}])
    deployment.start_worker()
    client = deployment.client
    conversation_id = client.create_conversation()
    turn_id = client.submit_message(conversation_id, "hello").turn_id
    wait_until(deployment.llm.requests, 20, "the model request")
    time.sleep(delay)
    client.cancel(conversation_id)
    view = deployment.wait(conversation_id, timeout=20)

    turn = client.get_turn(turn_id)  # type: ignore[arg-type]
    roles = [m.role for m in view.messages]
    assert (turn.status, roles) in [
        ("completed", ["user", "assistant"]),
        ("cancelled", ["user"]),
    ]
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))
