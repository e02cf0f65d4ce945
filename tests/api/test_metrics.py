"""Metrics, scraped from real processes: a worker of two processes (`chatworker worker
--processes 2`, its endpoint a third process summing the others' values) and an API process,
after a tool turn whose first model request was rate limited; and what each counter says in
process, for the paths a real deployment rarely takes on demand (a takeover, a lost lease, the
janitor, a paused and a cancelled turn).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update

from app.models import Conversation
from app.telemetry import exposition, metrics
from app.testing import fakes
from app.testing.api_process import free_port
from app.worker.janitor import clean_up
from app.worker.lease_runner import Outcome
from app.worker.ports import NO_SINK, ModelReply, ModelRequest, ReplySink
from tests.api.conftest import Deployment, finished_turn
from tests.integration.test_loop import World, make_tools, run
from tests.integration.test_user_in_the_loop import world_of
from tests.worker_process import FAKE_MODEL

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    response = httpx.get(url, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """A sample's value (0 when absent), or the sum over the samples with these labels."""
    wanted = set(labels.items())
    return sum(v for (found, have), v in samples.items() if found == name and wanted <= have)


def test_a_tool_turn_is_counted_by_the_worker_and_the_api(deployment: Deployment) -> None:
    port = free_port()
    worker = deployment.start_worker(processes=2, CHATWORKER_METRICS_PORT=str(port))
    deployment.start_api()
    deployment.fake_llm.script(
        [
            {"error": 429, "message": "Rate limit reached for requests"},
            {"tool_calls": [{"id": "call_add", "name": "add", "arguments": {"a": 2, "b": 3}}]},
            {"text": "2 + 3 = 5", "stream": True, "chunks": 3},
        ]
    )
    endpoint = f"http://127.0.0.1:{port}"
    assert httpx.get(f"{endpoint}/healthz", timeout=10).status_code == 200

    with deployment.http(token=deployment.key("alice")) as http:
        conversation = http.post("/v1/conversations", json={"tools": ["add"]}).json()
        path = f"/v1/conversations/{conversation['id']}/messages"
        submitted = http.post(path, json={"text": "add 2 and 3"})
        assert submitted.status_code == 202, submitted.text
        turn_id = submitted.json()["turn"]["id"]
        finished = finished_turn(http, turn_id)
        assert finished["status"] == "completed", finished
        assert http.get("/v1/no/such/route").status_code == 404
        api = scrape(f"{deployment.apis[0].url}/metrics")

    found = scrape(f"{endpoint}/metrics")
    model = {"model": FAKE_MODEL}
    assert value(found, "chatworker_turns_started_total", **model) == 1
    assert value(found, "chatworker_turns_ended_total", status="completed", **model) == 1
    assert value(found, "chatworker_turns_ended_total", status="failed") == 0
    assert value(found, "chatworker_turns_in_flight") == 0
    assert value(found, "chatworker_model_retries_total", cause="429", **model) == 1
    assert value(found, "chatworker_model_call_seconds_count", outcome="ok", **model) == 2
    assert value(found, "chatworker_model_time_to_first_token_seconds_count", **model) == 2
    assert value(found, "chatworker_model_tokens_total", kind="prompt", **model) > 0
    assert value(found, "chatworker_model_tokens_total", kind="completion", **model) > 0
    assert value(found, "chatworker_tool_calls_total", tool="add", outcome="ok") == 1
    assert value(found, "chatworker_tool_call_seconds_count", tool="add") == 1
    assert value(found, "chatworker_host_heartbeat_timestamp_seconds") > 0
    # dramatiq's own middleware, through the same endpoint: the doorbell was processed
    assert value(found, "dramatiq_messages_total", actor_name="chat_turn") >= 1

    messages = "/v1/conversations/{conversation_id}/messages"
    assert value(api, "chatworker_http_requests_total", route=messages, status="202") == 1
    assert value(api, "chatworker_http_requests_total", route="/v1/conversations") == 1
    assert value(api, "chatworker_http_requests_total", route="unmatched", status="404") == 1
    assert value(api, "chatworker_http_request_seconds_count", route=messages) == 1
    assert value(api, "chatworker_event_followers") == 0
    assert "dramatiq_messages_total" not in {name for name, _ in api}
    worker.stop()


# --- in process ---------------------------------------------------------------------------------


@pytest.fixture
def world(any_database_url: str) -> Iterator[World]:
    yield from world_of(any_database_url, make_tools())


def here(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_turn_taken_from_a_stopped_worker_counts_as_a_takeover(world: World) -> None:
    conversation_id = world.conversation()
    model = world.client.get_conversation(conversation_id).model
    assert world.store.claim(conversation_id, "dead-worker", -1) is not None  # never released
    before = here("chatworker_turns_resumed_total", model=model, after="takeover")
    started = here("chatworker_turns_started_total", model=model)
    scripted = fakes.ScriptedModel(fakes.by_iteration([fakes.text("3")]))
    assert run(world.runner(scripted), conversation_id) is Outcome.IDLE
    assert here("chatworker_turns_resumed_total", model=model, after="takeover") == before + 1
    assert here("chatworker_turns_started_total", model=model) == started  # not a new start


def test_a_turn_that_waits_for_the_user_and_a_cancelled_one_are_counted(world: World) -> None:
    conversation_id = world.conversation(tools=["add"])
    model = world.client.get_conversation(conversation_id).model
    paused = here("chatworker_turns_paused_total", model=model)
    cancelled = here("chatworker_turns_ended_total", model=model, status="cancelled")
    handover = here("chatworker_turns_resumed_total", model=model, after="handover")
    ask = fakes.calls(("ask", "agent_clarify", {"question": "Which?"}))
    scripted = fakes.ScriptedModel(fakes.by_iteration([ask, fakes.text("ok")]))
    assert run(world.runner(scripted), conversation_id) is Outcome.REQUIRES_ACTION
    assert here("chatworker_turns_paused_total", model=model) == paused + 1
    world.client.submit_message(conversation_id, "That one")  # answers: handed back
    assert run(world.runner(scripted), conversation_id) is Outcome.IDLE
    assert here("chatworker_turns_resumed_total", model=model, after="handover") == handover + 1

    class CancelledMeanwhile(fakes.ScriptedModel):
        """The user cancels while the model answers (the worker holds a live lease)."""

        async def complete(self, request: ModelRequest, sink: ReplySink = NO_SINK) -> ModelReply:
            world.client.cancel(conversation_id)
            return await super().complete(request, sink)

    world.client.submit_message(conversation_id, "Add 1 and 2")
    calls = fakes.calls(("c1", "add", {"a": 1, "b": 2}))
    stopped = CancelledMeanwhile(fakes.by_iteration([calls, fakes.text("3")]))
    assert run(world.runner(stopped), conversation_id) is Outcome.CANCELLED
    assert here("chatworker_turns_ended_total", model=model, status="cancelled") == cancelled + 1


def test_with_metrics_off_nothing_is_recorded_but_the_liveness_beat(world: World) -> None:
    conversation_id = world.conversation()
    model = world.client.get_conversation(conversation_id).model
    ended = here("chatworker_turns_ended_total", model=model, status="completed")
    metrics.enable(False)
    try:
        scripted = fakes.ScriptedModel(fakes.by_iteration([fakes.text("3")]))
        assert run(world.runner(scripted), conversation_id) is Outcome.IDLE
        assert here("chatworker_turns_ended_total", model=model, status="completed") == ended
        assert metrics.HOST_HEARTBEAT is not None
        metrics.beat()  # still real: /healthz reads it
    finally:
        metrics.enable(True)
    world.client.submit_message(conversation_id, "again")
    assert run(world.runner(scripted), conversation_id) is Outcome.IDLE
    assert here("chatworker_turns_ended_total", model=model, status="completed") == ended + 1


def test_a_lost_lease_and_the_janitor_s_failures_are_counted(world: World) -> None:
    conversation_id = world.conversation()
    lost = here("chatworker_leases_lost_total")
    janitor = here("chatworker_janitor_failed_total")

    class Usurped(fakes.ScriptedModel):
        """While the model answers, another worker takes the conversation over."""

        async def complete(self, request: ModelRequest, sink: ReplySink = NO_SINK) -> ModelReply:
            with world.engine.begin() as connection:
                expired = datetime(2000, 1, 1, tzinfo=UTC)
                connection.execute(
                    update(Conversation)
                    .where(Conversation.id == conversation_id)
                    .values(lease_expires_at=expired)
                )
            assert world.store.claim(conversation_id, "usurper", 30) is not None
            return await super().complete(request, sink)

    scripted = Usurped(fakes.by_iteration([fakes.text("3")]))
    assert run(world.runner(scripted), conversation_id) is Outcome.LEASE_LOST
    assert here("chatworker_leases_lost_total") == lost + 1

    report = clean_up(world.upkeep, older_than=0.0)  # the usurper is silent from now on
    assert [stale.id for stale in report.conversations] == [conversation_id]
    assert here("chatworker_janitor_failed_total") == janitor + 1


# --- the worker's endpoint ----------------------------------------------------------------------


def test_the_liveness_probe_fails_when_a_host_loop_stops_beating() -> None:
    metrics.beat()
    assert exposition.liveness(60)[0] == 200
    status, text = exposition.liveness(60, now=time.time() + 120)
    assert status == 503 and "last beat 120 s ago (limit 60 s)" in text


def test_the_worker_endpoint_serves_metrics_and_liveness_and_nothing_else(tmp_path: Path) -> None:
    metrics.beat()
    server = exposition.make_server("127.0.0.1", 0, 60)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        assert "chatworker_host_heartbeat_timestamp_seconds" in httpx.get(f"{base}/metrics").text
        assert httpx.get(f"{base}/healthz").status_code == 200
        assert httpx.get(f"{base}/").status_code == 404
    finally:
        server.shutdown()
        server.server_close()
