"""The tree's steps across real kills: a worker SIGKILLed as it takes a steer message in (before
the commit, `steer_found`; after it, `steered`), and as it starts a queued edit that moves the
active path (`after_claim`: the claim's cut is committed, nothing else). A replacement worker
continues; the transcript is what a calm run leaves, and the invariants hold."""

from __future__ import annotations

import uuid

import pytest

from tests.deployment import Deployment
from tests.invariants import assert_invariants

ANSWER = "Both read: the capital is Paris, and the river is the Seine."


def steered_before_pickup(deployment: Deployment) -> tuple[uuid.UUID, uuid.UUID, uuid.UUID]:
    """A turn submitted with no worker to take it, and a steer message behind it: the first
    claim finds the steer message waiting and takes it in before the first model call."""
    conversation_id = deployment.client.create_conversation()
    first = deployment.client.submit_message(conversation_id, "What is the capital of France?")
    steer = deployment.client.submit_message(
        conversation_id, "And which river runs through it?", on_busy="steer"
    )
    assert first.turn_id is not None and steer.turn_id is not None
    return conversation_id, first.turn_id, steer.turn_id


@pytest.mark.parametrize("failpoint", ["steer_found", "steered"])
def test_a_worker_killed_taking_a_steer_message_in_is_continued_by_another(
    deployment: Deployment, failpoint: str
) -> None:
    deployment.llm.script([{"text": ANSWER}])
    # Both submitted before any worker runs: a running worker picks a doorbell up within
    # milliseconds, so it could start the first turn (and ask the model) before the steer came.
    conversation_id, first, steer = steered_before_pickup(deployment)
    doomed = deployment.start_worker("doomed", {"CHATWORKER_FAILPOINT": failpoint})
    assert doomed.wait_exit(timeout=30) is not None, f"the failpoint never fired\n{doomed.log()}"
    assert f"failpoint {failpoint} reached: SIGKILL" in doomed.log()
    committed = [m.content for m in deployment.client.get_conversation(conversation_id).messages]
    if failpoint == "steer_found":  # nothing of it was committed
        assert committed == ["What is the capital of France?"]
    else:
        assert committed[-1] == "And which river runs through it?"

    replacement = deployment.start_worker("replacement")
    view = deployment.wait(conversation_id, timeout=60)
    assert view.status == "idle", f"{view.error}\n{replacement.log()}"
    assert [(m.role, m.content) for m in view.messages] == [
        ("user", "What is the capital of France?"),
        ("user", "And which river runs through it?"),
        ("assistant", ANSWER),
    ]
    # the model was asked once, with both messages (the killed worker never asked it)
    (asked,) = [r["body"] for r in deployment.llm.requests()]
    assert [m["content"] for m in asked["messages"] if m["role"] == "user"] == [
        "What is the capital of France?",
        "And which river runs through it?",
    ]
    turns = [deployment.client.get_turn(t) for t in (first, steer)]
    assert [(t.kind, t.status) for t in turns] == [("message", "completed"), ("steer", "completed")]
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))


def test_a_worker_killed_after_claiming_a_queued_edit_leaves_the_path_moved(
    deployment: Deployment,
) -> None:
    deployment.llm.script([{"text": "Paris."}])
    calm = deployment.start_worker("calm")
    conversation_id = deployment.client.create_conversation()
    deployment.client.submit_message(conversation_id, "Capital of France?")
    assert deployment.wait(conversation_id).status == "idle"
    calm.terminate()
    calm.stop()
    # an edit queued behind a turn that no worker has taken yet
    deployment.client.submit_message(conversation_id, "And of Italy?")
    edited = deployment.client.edit_message(
        conversation_id, 1, "Capital of Spain?", on_busy="enqueue"
    )
    assert edited.turn_id is not None
    deployment.llm.script([{"text": "Rome."}, {"text": "Madrid."}])
    doomed = deployment.start_worker("doomed", {"CHATWORKER_FAILPOINT": "after_claim:2"})
    assert doomed.wait_exit(timeout=30) is not None, f"the failpoint never fired\n{doomed.log()}"
    # killed right after the claim that started the edit: the path was cut and moved with it
    path = deployment.client.get_conversation(conversation_id).messages
    assert [m.content for m in path] == ["Capital of Spain?"]

    replacement = deployment.start_worker("replacement")
    view = deployment.wait(conversation_id, timeout=60)
    assert view.status == "idle", f"{view.error}\n{replacement.log()}"
    assert [m.content for m in view.messages] == ["Capital of Spain?", "Madrid."]
    assert view.messages[0].siblings == [1, 5]
    every = deployment.client.get_conversation(conversation_id, all_versions=True).messages
    assert [m.content for m in every if not m.active] == [
        "Capital of France?", "Paris.", "And of Italy?", "Rome.",
    ]  # fmt: skip
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))
