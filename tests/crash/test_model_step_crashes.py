"""The new steps across real kills: a worker SIGKILLed right after it moved a turn to a
fallback model (`fell_back`: `model.fallback` committed, the fallback not yet called), and right
after it kept an answer that missed the turn's JSON Schema (`answer_refused`: the refused answer
committed, no repair asked yet). A replacement worker continues from what is committed: on the
fallback model, never the failed one again; with the repair, never the first question again.
"""

from __future__ import annotations

import base64
import json

from tests.deployment import Deployment
from tests.invariants import assert_invariants

PRIMARY, BACKUP = "openai/gpt-4o-mini", "openai/gpt-4o"
TICKET = {
    "name": "ticket",
    "schema": {
        "type": "object",
        "properties": {"kind": {"enum": ["bug", "question"]}},
        "required": ["kind"],
    },
}


def test_a_worker_killed_after_falling_back_is_continued_on_the_fallback(
    deployment: Deployment,
) -> None:
    # (a 500 is not retried: the primary is asked once, then the turn moves on)
    deployment.llm.script([], default={"error": 500, "message": "down"}, model="gpt-4o-mini")
    deployment.llm.script([{"text": "The backup answers."}], model="gpt-4o")
    doomed = deployment.start_worker("doomed", {"CHATWORKER_FAILPOINT": "fell_back"})
    conversation_id = deployment.client.create_conversation(model=PRIMARY, fallback_models=[BACKUP])
    deployment.client.submit_message(conversation_id, "Hello?")
    assert doomed.wait_exit(timeout=30) is not None, f"the failpoint never fired\n{doomed.log()}"
    assert "failpoint fell_back reached: SIGKILL" in doomed.log()
    turn = deployment.client.current_turn(conversation_id)
    assert turn is not None and turn.model == BACKUP  # committed before the kill

    replacement = deployment.start_worker("replacement")
    view = deployment.wait(conversation_id, timeout=60)
    assert view.status == "idle", f"{view.error}\n{replacement.log()}"
    assert [r["body"]["model"] for r in deployment.llm.requests()] == ["gpt-4o-mini", "gpt-4o"]
    answer = view.messages[-1]
    assert answer.content == "The backup answers."
    assert answer.usage is not None and answer.usage["model"] == BACKUP
    types = [e.type for e in deployment.client.events(conversation_id, limit=100).events]
    assert types.count("model.fallback") == 1 and "turn.resumed" in types
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))


def test_a_worker_killed_after_a_refused_answer_is_continued_with_the_repair(
    deployment: Deployment,
) -> None:
    deployment.llm.script([{"text": '{"kind": "feature"}'}, {"text": '{"kind": "bug"}'}])
    doomed = deployment.start_worker("doomed", {"CHATWORKER_FAILPOINT": "answer_refused"})
    conversation_id = deployment.client.create_conversation(output_schema=TICKET)
    deployment.client.submit_message(conversation_id, "The export button crashes.")
    assert doomed.wait_exit(timeout=30) is not None, f"the failpoint never fired\n{doomed.log()}"
    assert "failpoint answer_refused reached: SIGKILL" in doomed.log()
    refused = deployment.client.get_conversation(conversation_id).messages[-1]
    assert refused.is_error and refused.content == '{"kind": "feature"}'

    replacement = deployment.start_worker("replacement")
    view = deployment.wait(conversation_id, timeout=60)
    assert view.status == "idle", f"{view.error}\n{replacement.log()}"
    assert view.messages[-1].output == {"kind": "bug"}
    first, second = (r["body"] for r in deployment.llm.requests())
    # (the deployment's model takes no schema: it is told it, last, in a system message)
    assert "does not match the required JSON Schema" in json.dumps(second["messages"][-2])
    assert second["messages"][-3]["content"] == '{"kind": "feature"}'
    assert len(first["messages"]) + 2 == len(second["messages"])
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))


def test_a_queued_message_s_image_survives_a_kill_after_the_claim_that_moved_it_in(
    deployment: Deployment,
) -> None:
    """A message with an image waits behind a turn; the worker that claims it (moving it and
    its files into the transcript, `after_claim:2`) is killed; its replacement sends the image."""
    from tests.integration.test_files import png

    image = png(seed=21)
    deployment.llm.script([{"text": "First."}, {"text": "A grey square."}])
    conversation_id = deployment.client.create_conversation(model=PRIMARY)
    deployment.client.submit_message(conversation_id, "one")
    deployment.client.submit_message(conversation_id, "two", on_busy="enqueue", files=[image])
    doomed = deployment.start_worker("doomed", {"CHATWORKER_FAILPOINT": "after_claim:2"})
    assert doomed.wait_exit(timeout=30) is not None, f"the failpoint never fired\n{doomed.log()}"
    moved = deployment.client.get_conversation(conversation_id).messages[-1]
    assert moved.content == "two" and len(moved.files) == 1  # in the transcript, with its file

    replacement = deployment.start_worker("replacement")
    view = deployment.wait(conversation_id, timeout=60)
    assert view.status == "idle", f"{view.error}\n{replacement.log()}"
    assert view.messages[-1].content == "A grey square."
    sent = deployment.llm.requests()[-1]["body"]["messages"][-1]["content"]
    url = "data:image/png;base64," + base64.b64encode(image).decode()
    assert {"type": "image_url", "image_url": {"url": url}} in sent
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))
