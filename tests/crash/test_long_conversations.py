"""Long conversations through real worker processes: the fake LLM enforces a 6,000-token window
(a real tokenizer's count and OpenAI's own 400), the MCP test server returns 12,000 characters a
call. Two hundred turns never fail (the worker compacts what it sends); with compaction off, the
turn that passes the window fails saying so; and a worker SIGKILLed inside a compaction loses
nothing, never leaves half a summary, and its successor reuses a committed one.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest
from sqlalchemy import func, select

from app.models import Compaction, Message
from app.testing.fake_llm import FakeLLMServer
from app.worker import summary
from tests.deployment import Deployment
from tests.invariants import assert_invariants
from tests.worker_process import FAKE_MODEL

WINDOW = 6_000
SUMMARY = "The user asked for the report again and again; each call returned 12,000 characters."
# 200 turns here (~40 s); CI runs a shorter version (still past several summaries).
TURNS = 60 if os.environ.get("CI") == "true" else 200


def script(llm: FakeLLMServer) -> None:
    llm.script(
        [
            {
                "tool_calls": [
                    {"id": "call_out", "name": "huge_output", "arguments": {"size": 12_000}}
                ]
            },
            {"text": "That is the whole report."},
        ],
        mode="by_iteration",
        context_window=WINDOW,
    )
    llm.script([], match=summary.MARKER, default={"text": SUMMARY}, context_window=WINDOW)


def conversation(deployment: Deployment, **policy: object) -> uuid.UUID:
    return deployment.client.create_conversation(
        model=FAKE_MODEL, tools=["huge_output"], context_policy={"window": WINDOW, **policy}
    )


def ask(deployment: Deployment, conversation_id: uuid.UUID, n: int) -> str:
    deployment.client.submit_message(conversation_id, f"Show me the report ({n}).")
    view = deployment.wait(conversation_id, timeout=60)
    return f"{view.status}: {view.error}" if view.status != "idle" else "idle"


def summaries(deployment: Deployment, conversation_id: uuid.UUID) -> int:
    with deployment.engine.connect() as connection:
        return int(
            connection.scalar(
                select(func.count())
                .select_from(Compaction)
                .where(Compaction.conversation_id == conversation_id, Compaction.kind == "summary")
            )
            or 0
        )


@pytest.mark.slow
def test_two_hundred_turns_of_large_outputs_never_fail(deployment: Deployment) -> None:
    script(deployment.llm)
    deployment.start_worker()
    conversation_id = conversation(deployment)
    for n in range(TURNS):
        assert ask(deployment, conversation_id, n) == "idle", n
    refused = [r for r in deployment.llm.requests() if (r["step"] or {}).get("error")]
    assert refused == []
    with deployment.engine.connect() as connection:
        messages = connection.scalar(
            select(func.count())
            .select_from(Message)
            .where(Message.conversation_id == conversation_id)
        )
    assert messages == 4 * TURNS
    assert summaries(deployment, conversation_id) >= 3
    assert len(deployment.llm.requests(match=summary.MARKER)) == summaries(
        deployment, conversation_id
    )
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))


def test_with_compaction_off_the_turn_past_the_window_fails_with_the_documented_error(
    deployment: Deployment,
) -> None:
    script(deployment.llm)
    deployment.start_worker()
    conversation_id = conversation(deployment, compaction=False)
    outcomes = []
    while not outcomes or outcomes[-1] == "idle":
        assert len(outcomes) < 10, "the window was never passed"
        outcomes.append(ask(deployment, conversation_id, len(outcomes)))
    failed = outcomes[-1]
    refused = [r for r in deployment.llm.requests() if (r["step"] or {}).get("error")]
    assert len(refused) == 1  # the turn that passed the window, at once: no retry
    assert failed.startswith("failed: The request is larger than the model's context window")
    assert "compaction is off (CHATWORKER_COMPACTION=false" in failed
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))


@pytest.mark.parametrize("failpoint", ["compaction_summarized", "compacted", "compacted:2"])
def test_a_worker_killed_in_a_compaction_is_continued_and_loses_nothing(
    deployment: Deployment, failpoint: str
) -> None:
    script(deployment.llm)
    doomed = deployment.start_worker("doomed", {"CHATWORKER_FAILPOINT": failpoint})
    conversation_id = conversation(deployment)
    for n in range(40):
        deployment.client.submit_message(conversation_id, f"Show me the report ({n}).")
        deadline = time.monotonic() + 60
        while doomed.wait_exit(timeout=0.1) is None and time.monotonic() < deadline:
            if not deployment.client.get_conversation(conversation_id).is_running:
                break
        if doomed.wait_exit(timeout=0) is not None:
            break
        assert deployment.client.get_conversation(conversation_id).status == "idle"
    assert doomed.wait_exit(timeout=0) is not None, f"never reached\n{doomed.log()}"
    assert f"failpoint {failpoint.split(':', maxsplit=1)[0]} reached: SIGKILL" in doomed.log()
    written = summaries(deployment, conversation_id)
    asked = len(deployment.llm.requests(match=summary.MARKER))
    if failpoint == "compaction_summarized":
        assert asked == written + 1  # the summary it was given died with it: nothing half done

    replacement = deployment.start_worker("replacement")
    view = deployment.wait(conversation_id, timeout=60)
    assert view.status == "idle", f"{view.error}\n{replacement.log()}"
    turns = len([m for m in view.messages if m.role == "user"])
    assert len(view.messages) == 4 * turns
    assert all(m.seq == i + 1 for i, m in enumerate(view.messages))
    if failpoint != "compaction_summarized":
        # The successor sends by the committed compaction: it never asks for it again.
        assert len(deployment.llm.requests(match=summary.MARKER)) == summaries(
            deployment, conversation_id
        )
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))
