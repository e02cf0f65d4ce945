"""A `/v1/responses` stream through a worker SIGKILLed mid-reply, read by the official `openai`
SDK: the response goes on by itself, the partial reply is closed (`output_item.done`, status
`incomplete`) and the committed one is streamed whole under numbers above it, so neither the
live stream, nor a replay, nor a resume from inside the dead attempt shows any text twice."""

from __future__ import annotations

import threading
from typing import Any

import openai

from tests.api.conftest import Deployment
from tests.api.private_services import boot
from tests.worker_process import FAKE_MODEL

ANSWER = (
    "Two and three make five; the add tool agrees, and so does every accountant who has "
    "ever balanced a ledger at the end of a long and quiet afternoon."
)


def assembled(events: list[Any]) -> str:
    """The reply's text as a client keyed by output_index builds it: an output_item.added for
    an index it holds replaces that item."""
    items: dict[int, str] = {}
    for event in events:
        if event.type == "response.output_item.added":
            items[event.output_index] = ""
        elif event.type == "response.output_text.delta":
            items[event.output_index] += event.delta
    return "".join(items[index] for index in sorted(items))


def sent(events: list[Any]) -> list[dict[str, Any]]:
    return [event.model_dump(exclude_none=True) for event in events]


def test_a_worker_killed_mid_reply_leaves_no_text_twice(deployment: Deployment) -> None:
    deployment.fake_llm.script(
        [{"text": ANSWER, "stream": True, "chunks": 30, "chunk_delay": 0.1}], mode="by_iteration"
    )
    boot(deployment, workers=2)
    doomed, replacement = deployment.workers
    replacement.pause()  # frozen: the doomed worker must be the one answering
    sdk = openai.OpenAI(
        base_url=f"{deployment.apis[0].url}/v1", api_key=deployment.key("dana"), max_retries=0
    )
    killed = threading.Event()
    live: list[Any] = []
    with sdk.responses.create(model=FAKE_MODEL, input="tell me about sums", stream=True) as raw:
        for event in raw:
            live.append(event)
            deltas = sum(e.type == "response.output_text.delta" for e in live)
            if deltas == 4 and not killed.is_set():
                doomed.kill()
                killed.set()
                replacement.resume()  # it claims the turn when the dead lease (3 s) expires
    assert killed.is_set()
    assert live[-1].type == "response.completed"
    final = live[-1].response
    assert final.status == "completed" and final.output_text == ANSWER

    # The partial reply was closed as incomplete, then the committed one streamed whole.
    numbers = [event.sequence_number for event in live]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    (dropped,) = [
        e for e in live if e.type == "response.output_item.done" and e.item.status == "incomplete"
    ]
    assert ANSWER.startswith(dropped.item.content[0].text)
    assert assembled(live) == ANSWER

    # A replay shows only what was committed, with the numbers the live stream gave it.
    replay = list(sdk.responses.retrieve(final.id, stream=True))
    assert assembled(replay) == ANSWER
    by_number = {event["sequence_number"]: event for event in sent(live)}
    assert all(by_number[event["sequence_number"]] == event for event in sent(replay)[:-1])
    live_only = [n for n in by_number if n not in {e.sequence_number for e in replay}]
    assert live_only and max(live_only) == dropped.sequence_number  # the dead attempt's events
    # A client that lost its connection inside the dead attempt resumes from its last number:
    # it gets the committed reply whole, from its output_item.added.
    inside = next(e for e in live if e.type == "response.output_text.delta").sequence_number
    resumed = list(sdk.responses.retrieve(final.id, stream=True, starting_after=inside))
    assert resumed[0].type == "response.output_item.added"
    assert assembled(resumed) == ANSWER
    with sdk.responses.stream(response_id=final.id, starting_after=inside) as helper:
        assert helper.get_final_response().output_text == ANSWER
