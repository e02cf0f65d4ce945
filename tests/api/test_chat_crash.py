"""A `/v1/chat/completions` stream through a worker SIGKILLed mid-reply, read by the official
`openai` SDK: the turn goes on by itself, and because the retried model call says again what the
dead one had streamed, the chunks go on from where they stopped: the client's message holds the
answer once, with nothing repeated. The same request sent afterwards is the same turn, its
committed answer replayed whole. And a turn that outlasts a completion's wait is a 504 whose
retry waits for the same turn."""

from __future__ import annotations

import threading

import openai
import pytest

from app.client.runs import RunFilter
from tests.api.conftest import Deployment
from tests.api.private_services import boot
from tests.api.test_responses_crash import ANSWER
from tests.worker_process import FAKE_MODEL


def test_a_worker_killed_mid_reply_leaves_the_chunks_whole(deployment: Deployment) -> None:
    deployment.fake_llm.script(
        [{"text": ANSWER, "stream": True, "chunks": 30, "chunk_delay": 0.1}], mode="by_iteration"
    )
    boot(deployment, workers=2)
    doomed, replacement = deployment.workers
    replacement.pause()  # frozen: the doomed worker must be the one answering
    sdk = openai.OpenAI(
        base_url=f"{deployment.apis[0].url}/v1", api_key=deployment.key("erin"), max_retries=0
    )
    messages = [{"role": "user", "content": "tell me about sums"}]
    killed = threading.Event()
    said: list[str] = []
    finish = None
    with sdk.chat.completions.create(model=FAKE_MODEL, messages=messages, stream=True) as chunks:
        for chunk in chunks:
            for choice in chunk.choices:
                said.append(choice.delta.content or "")
                finish = choice.finish_reason or finish
            if sum(bool(piece) for piece in said) == 4 and not killed.is_set():
                doomed.kill()
                killed.set()
                replacement.resume()  # it claims the turn when the dead lease (3 s) expires
    assert killed.is_set()
    assert "".join(said) == ANSWER and finish == "stop"

    again = sdk.chat.completions.create(model=FAKE_MODEL, messages=messages)
    assert again.choices[0].message.content == ANSWER
    assert len(deployment.fake_llm.requests()) == 2  # the dead call and its retry: no third


def test_a_turn_still_running_after_the_waits_is_a_504_and_a_retry_waits_for_it(
    deployment: Deployment,
) -> None:
    """A non-streamed completion waits five of the server's longest waits (here 0.2 s each),
    then answers 504 `turn_still_running`; the SDK's retry is the same request, so it waits for
    the same turn, and the model is not asked twice."""
    deployment.fake_llm.script([{"hang": 30}])
    deployment.env["CHATWORKER_API_MAX_WAIT_SECONDS"] = "0.2"
    boot(deployment)
    sdk = openai.OpenAI(
        base_url=f"{deployment.apis[0].url}/v1", api_key=deployment.key("fay"), max_retries=0
    )
    messages = [{"role": "user", "content": "take your time"}]
    for _ in range(2):
        with pytest.raises(openai.APIStatusError) as running:
            sdk.chat.completions.create(model=FAKE_MODEL, messages=messages)
        assert running.value.status_code == 504
        assert running.value.body["code"] == "turn_still_running"  # type: ignore[index]
    assert len(deployment.fake_llm.requests()) == 1
    (hanging,) = deployment.client.admin.list_runs(RunFilter(status="running"))
    deployment.client.cancel_turn(hanging.turn_id)  # (its worker stops at once, not at 30 s)
