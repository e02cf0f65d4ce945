"""The crash matrix: every failpoint, with a read-only and with a side-effecting tool, for real.

A worker armed with a failpoint SIGKILLs itself there; a replacement worker (already started and
frozen, so it cannot take the job first) is thawed, and nobody calls retry. The conversation must
reach `idle` (within seconds: a kill after the claim frees the lease at once, one before the
doorbell was acknowledged puts it back on the queue 5 s after the worker's last heartbeat) with
the same transcript as a crash-free run, and every tool whose result was committed ran exactly
once; only the call in flight at the kill (`tool_ran`) may run twice.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from app.client import TurnView
from app.testing import services
from app.testing.fake_llm import FakeLLMServer
from app.worker.failpoints import MATRIX_POINTS
from app.worker.plan import IN_FLIGHT_REASON, OUTCOME_UNKNOWN_RESULT
from tests.deployment import Deployment
from tests.invariants import assert_invariants
from tests.servers.mcp_server import read_applied, read_ledger
from tests.worker_process import WorkerProcess, mcp_servers_json

TOOLS = {
    "read-only": ("search_docs", {"query": "refund policy"}),
    "side-effecting": ("write_note", {"text": "crash matrix"}),
}
QUESTION = "Look this up, add 1 and 2, and tell me."


def script(llm: FakeLLMServer, tool: str, arguments: dict[str, object]) -> None:
    """The model: call the tool and `add` in one message, then answer. A pure function of the
    transcript (by_iteration), so a re-sent request after a crash gets the same answer."""
    llm.script(
        [
            {
                "tool_calls": [
                    {"id": "call_tool", "name": tool, "arguments": arguments},
                    {"id": "call_add", "name": "add", "arguments": {"a": 1, "b": 2}},
                ]
            },
            {"text": "Done: found it, and 1 + 2 = 3."},
        ],
        mode="by_iteration",
    )


@pytest.fixture(scope="module")
def reference(
    postgres_server: str,
    migrated_template: str,
    redis_server: str,
    fake_llm_server: FakeLLMServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, list[tuple[object, ...]]]]:
    """The crash-free transcript for each tool, run once by a worker with no failpoint."""
    name = services.unique_name("reference")
    url = services.create_database(postgres_server, name, template=migrated_template)
    deployment = Deployment(
        url, redis_server, tmp_path_factory.mktemp("reference"), fake_llm_server
    )
    transcripts = {}
    try:
        deployment.start_worker("reference")
        for kind, (tool, arguments) in TOOLS.items():
            fake_llm_server.reset()
            script(fake_llm_server, tool, arguments)
            conversation_id = deployment.chat(QUESTION, [tool, "add"])
            assert deployment.wait(conversation_id).status == "idle"
            transcripts[kind] = deployment.transcript(conversation_id)
    finally:
        deployment.close()
        services.drop_database(postgres_server, name)
    yield transcripts


def killed_and_replaced(
    deployment: Deployment, failpoint: str, tools: list[str]
) -> tuple[uuid.UUID, WorkerProcess, WorkerProcess]:
    """A worker armed with `failpoint` takes the turn of a new conversation and dies there; a
    replacement, started beforehand and frozen so that it cannot take the job first, is thawed.
    The conversation, the dead worker and the replacement."""
    replacement = deployment.start_worker("replacement", ready=False)
    doomed = deployment.start_worker("doomed", {"CHATWORKER_FAILPOINT": failpoint}, ready=False)
    replacement.wait_until_ready()
    doomed.wait_until_ready()
    replacement.pause()
    conversation_id = deployment.chat(QUESTION, tools)
    assert doomed.wait_exit(timeout=30) is not None, f"the failpoint never fired\n{doomed.log()}"
    replacement.resume()
    return conversation_id, doomed, replacement


@pytest.mark.parametrize("kind", TOOLS)
@pytest.mark.parametrize("failpoint", MATRIX_POINTS)
def test_a_worker_killed_at_the_failpoint_is_continued_by_another(
    deployment: Deployment,
    reference: dict[str, list[tuple[object, ...]]],
    failpoint: str,
    kind: str,
) -> None:
    tool, arguments = TOOLS[kind]
    script(deployment.llm, tool, arguments)
    spec = f"tool_ran@{tool}" if failpoint == "tool_ran" else failpoint
    conversation_id, doomed, replacement = killed_and_replaced(deployment, spec, [tool, "add"])
    assert f"failpoint {failpoint} reached: SIGKILL" in doomed.log()

    if failpoint == "tool_ran" and kind == "side-effecting":
        # `write_note` says neither readOnlyHint nor idempotentHint: the call that was running
        # is not run again blindly. The turn asks; here the user says: run it again.
        turn = waiting_turn(deployment, conversation_id)
        ((action,),) = [turn.pending_actions]
        assert (action.call_id, action.kind, action.reason) == (
            "call_tool",
            "approval",
            IN_FLIGHT_REASON,
        )
        assert deployment.tool_runs()[tool] == 1  # at most once without the user
        deployment.client.answer_actions(turn.id, approvals={"call_tool": True})
    # A kill after the claim frees the lease within seconds (the liveness token); a kill before
    # the doorbell was acknowledged leaves it in the dead worker's acknowledgement set, back on
    # the queue 5 s after its last heartbeat (`app/woken_broker.py`), not after the TTL sweep's
    # 30-45 s (`test_woken_broker.py` bounds that on its own; the wait here is for any machine).
    view = deployment.wait(conversation_id, timeout=90)
    assert view.status == "idle", f"{view.error}\n{replacement.log()}"
    if failpoint == "tool_ran" and kind == "side-effecting":
        # (`add` ran while `write_note` waited: the same results, committed in another order)
        assert in_result_order(deployment.transcript(conversation_id)) == in_result_order(
            reference[kind]
        )
    else:
        assert deployment.transcript(conversation_id) == reference[kind]
    runs = deployment.tool_runs()
    in_flight = {tool} if failpoint == "tool_ran" else set()
    for name in (tool, "add"):
        allowed = (1, 2) if name in in_flight else (1,)
        assert runs[name] in allowed, f"{name} ran {runs[name]} times: {runs}"
    if failpoint == "tool_ran":
        # It ran, its result was lost with the worker, it ran again: read-only, so simply;
        # side-effecting, because the user approved.
        assert runs[tool] == 2
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))


def test_a_tool_keyed_on_the_call_id_applies_its_side_effect_once_across_a_kill_at_tool_ran(
    deployment: Deployment,
) -> None:
    """The worker passes each call's idempotency key (conversation id and call id) in the
    request's `_meta`; the test server's `apply_once` keys its side effect on it. Killed after
    the tool ran and before its result was committed, the call runs again on the replacement:
    it ran twice, and was applied once."""
    notes = deployment.tmp_path / "notes.txt"
    deployment.env["CHATWORKER_MCP_SERVERS"] = mcp_servers_json(
        deployment.ledger, notes, extra_tools="apply_once"
    )
    script(deployment.llm, "apply_once", {"text": "pay invoice 42"})
    conversation_id, _, replacement = killed_and_replaced(
        deployment, "tool_ran@apply_once", ["apply_once", "add"]
    )

    view = deployment.wait(conversation_id, timeout=60)
    assert view.status == "idle", f"{view.error}\n{replacement.log()}"
    runs = [entry for entry in read_ledger(deployment.ledger) if entry["tool"] == "apply_once"]
    assert len(runs) == 2 and runs[0]["pid"] != runs[1]["pid"]  # ran twice, by two servers
    applied = read_applied(notes.with_suffix(".applied"))
    assert applied == [(f"{conversation_id}:call_tool", "pay invoice 42")]  # applied once
    results = [m for m in view.messages if m.role == "tool" and m.tool_call_id == "call_tool"]
    assert [m.content for m in results] == ["Applied: pay invoice 42"]
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))


LOCATE = {"name": "get_location", "description": "The user's city.", "parameters": {}}


def test_a_turn_waiting_for_the_user_survives_its_worker_and_the_worker_that_resumes_it(
    deployment: Deployment,
) -> None:
    """Killed right after the pause is committed: nothing is lost, nothing waits on a worker.
    The answer resumes the turn; the worker that claims it is killed before its model call
    (`after_claim`), and a third one finishes it with the same transcript as a calm run."""
    deployment.llm.script(
        [
            {"tool_calls": [{"id": "c_loc", "name": "get_location", "arguments": {}}]},
            {"text": "You are in Paris."},
        ],
        mode="by_iteration",
    )
    doomed = deployment.start_worker("doomed", {"CHATWORKER_FAILPOINT": "paused"})
    conversation_id = deployment.client.create_conversation(client_tools=[LOCATE])
    deployment.client.submit_message(conversation_id, "Where am I?")
    assert doomed.wait_exit(timeout=30) is not None, f"the failpoint never fired\n{doomed.log()}"
    turn = deployment.client.current_turn(conversation_id)
    assert turn is not None and turn.status == "requires_action"
    assert [a.call_id for a in turn.pending_actions] == ["c_loc"]
    view = deployment.client.get_conversation(conversation_id)
    assert view.status == "idle"

    resumer = deployment.start_worker("resumer", {"CHATWORKER_FAILPOINT": "after_claim"})
    finisher = deployment.start_worker("finisher", ready=False)
    finisher.wait_until_ready()
    finisher.pause()  # the armed worker must be the one that resumes the turn
    assert deployment.client.answer_actions(turn.id, {"c_loc": "Paris"}).status == "running"
    assert resumer.wait_exit(timeout=30) is not None, f"never resumed\n{resumer.log()}"
    finisher.resume()

    view = deployment.wait(conversation_id, timeout=60)
    assert view.status == "idle", f"{view.error}\n{finisher.log()}"
    assert [(m.role, m.content) for m in view.messages] == [
        ("user", "Where am I?"),
        ("assistant", None),
        ("tool", "Paris"),
        ("assistant", "You are in Paris."),
    ]
    assert len(deployment.llm.requests()) == 2  # the killed resumer never asked the model
    assert deployment.client.get_turn(turn.id).status == "completed"
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))


def waiting_turn(deployment: Deployment, conversation_id: object, timeout: float = 60) -> TurnView:
    """The conversation's current turn once it waits for the user."""
    deadline = time.monotonic() + timeout
    while True:
        turn = deployment.client.current_turn(conversation_id)  # type: ignore[arg-type]
        if turn is not None and turn.status == "requires_action":
            return turn
        logs = "\n".join(worker.log() for worker in deployment.workers)
        assert time.monotonic() < deadline, f"never waited: {turn}\n{logs}"
        time.sleep(0.1)


def test_with_the_error_policy_a_call_in_flight_at_a_kill_is_reported_unknown_not_run_again(
    deployment: Deployment,
) -> None:
    """`CHATWORKER_IN_FLIGHT_RECOVERY=error`: no question; the model reads that the outcome of
    the call that was running is unknown, and the tool ran once."""
    deployment.env["CHATWORKER_IN_FLIGHT_RECOVERY"] = "error"
    script(deployment.llm, "write_note", {"text": "once at most"})
    conversation_id, _, replacement = killed_and_replaced(
        deployment, "tool_ran@write_note", ["write_note", "add"]
    )

    view = deployment.wait(conversation_id, timeout=60)
    assert view.status == "idle", f"{view.error}\n{replacement.log()}"
    result = next(m for m in view.messages if m.tool_call_id == "call_tool")
    assert (result.content, result.is_error) == (OUTCOME_UNKNOWN_RESULT, True)
    assert deployment.tool_runs() == Counter({"write_note": 1, "add": 1})
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))


def test_an_approval_covers_one_run_a_call_approved_then_killed_mid_run_is_asked_about_again(
    deployment: Deployment,
) -> None:
    """`write_note` needs the user's approval (`tool_approval: always`). Approved, it starts
    running (committed in flight) and its worker is SIGKILLed after the tool ran, before its
    result: the approval given before that run does not cover a second one, so the replacement
    asks again ("may or may not have happened") instead of running it silently; approved again,
    it runs a second time and the turn completes."""
    servers = json.loads(mcp_servers_json(deployment.ledger, deployment.tmp_path / "notes.txt"))
    servers["mcpServers"]["tools"]["tool_approval"] = {"write_note": "always"}
    deployment.env["CHATWORKER_MCP_SERVERS"] = json.dumps(servers)
    script(deployment.llm, "write_note", {"text": "approved once"})
    doomed = deployment.start_worker("doomed", {"CHATWORKER_FAILPOINT": "tool_ran@write_note"})
    conversation_id = deployment.chat(QUESTION, ["write_note", "add"])
    turn = waiting_turn(deployment, conversation_id)
    ((asked,),) = [turn.pending_actions]
    assert (asked.call_id, asked.kind, asked.reason) == ("call_tool", "approval", None)
    replacement = deployment.start_worker("replacement", ready=False)
    replacement.wait_until_ready()
    replacement.pause()  # the armed worker must be the one that runs the approved call
    deployment.client.answer_actions(turn.id, approvals={"call_tool": True})
    assert doomed.wait_exit(timeout=30) is not None, f"the failpoint never fired\n{doomed.log()}"
    replacement.resume()

    again = waiting_turn(deployment, conversation_id)
    ((asked,),) = [again.pending_actions]
    assert (asked.call_id, asked.kind, asked.reason) == ("call_tool", "approval", IN_FLIGHT_REASON)
    assert deployment.tool_runs()["write_note"] == 1  # not run again without the user
    deployment.client.answer_actions(again.id, approvals={"call_tool": True})
    view = deployment.wait(conversation_id, timeout=60)
    assert view.status == "idle", f"{view.error}\n{replacement.log()}"
    assert deployment.tool_runs() == Counter({"write_note": 2, "add": 1})
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))


def in_result_order(transcript: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """The transcript without seqs, each run of tool results sorted by call id."""
    rows = [row[1:] for row in transcript]
    out: list[tuple[object, ...]] = []
    results: list[tuple[object, ...]] = []
    for row in rows:
        if row[0] == "tool":
            results.append(row)
            continue
        out += sorted(results, key=str)
        results = []
        out.append(row)
    return out + sorted(results, key=str)
