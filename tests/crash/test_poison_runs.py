"""A run that raises the same way on every claim (an answer the worker's own code cannot handle:
here the failpoint `llm_answered@POISON=raise`, the model answering "POISON") is bounded: each
claim counts an attempt, and after `CHATWORKER_MAX_ATTEMPTS` the turn fails with the real
error, not "the worker stopped"; the conversation's next turn runs. A cancel ends such a turn
`cancelled`, whether a run of it holds the lease or none does. Real worker processes, production
leases (`conftest.py`): a crashed run gives its lease back, so none of this waits one out.
"""

from __future__ import annotations

import time

from tests.deployment import Deployment
from tests.invariants import assert_invariants

RAISES = {"CHATWORKER_FAILPOINT": "llm_answered@POISON=raise"}
ERROR = (
    "Gave up after 3 attempts: the run failed each time; the last error: "
    "FailpointRaised: failpoint llm_answered raised"
)


def test_a_run_that_raises_on_every_claim_fails_after_its_attempts_with_the_real_error(
    deployment: Deployment,
) -> None:
    # (the second turn's requests hold the first question too: its script is looked at first)
    deployment.llm.script([], match="second question", default={"text": "Fine."})
    deployment.llm.script([], match="first question", default={"text": "POISON"})
    worker = deployment.start_worker("worker", {**RAISES, "CHATWORKER_MAX_ATTEMPTS": "3"})
    conversation_id = deployment.chat("first question")

    failed = deployment.wait(conversation_id, timeout=90)
    assert failed.status == "failed", worker.log()
    assert failed.error == ERROR
    # every claim asked the model again: three attempts, three calls, no more
    assert len(deployment.llm.requests(match="first question")) == 3
    assert worker.log().count("run crashed on attempt") == 3
    turn = deployment.client.current_turn(conversation_id)
    assert turn is not None and turn.status == "failed" and turn.error == ERROR

    # nothing is wedged: the next turn of the conversation runs on the same worker
    deployment.client.submit_message(conversation_id, "second question")
    answered = deployment.wait(conversation_id, timeout=60)
    assert answered.status == "idle", answered.error
    assert answered.messages[-1].content == "Fine."
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))


def test_a_cancel_ends_a_turn_whose_run_keeps_crashing(deployment: Deployment) -> None:
    deployment.llm.script([], match="first question", default={"text": "POISON"})
    worker = deployment.start_worker("worker", {**RAISES, "CHATWORKER_MAX_ATTEMPTS": "100"})
    conversation_id = deployment.chat("first question")
    deadline = time.monotonic() + 60
    while len(deployment.llm.requests(match="first question")) < 2:  # it crashed at least once
        assert time.monotonic() < deadline, worker.log()
        time.sleep(0.05)

    deployment.client.cancel(conversation_id)

    view = deployment.wait(conversation_id, timeout=60)
    assert view.status == "idle", f"{view.status} {view.error}\n{worker.log()}"
    turn = deployment.client.current_turn(conversation_id)
    assert turn is not None and turn.status == "cancelled"
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))
