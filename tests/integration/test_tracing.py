"""Traces: one trace per turn, from the submit into whichever worker runs it; a span per model
call (GenAI semantic conventions) and per tool call; a resumed turn continues the same trace and
links to it. In process with the SDK's in-memory exporter, and across a real worker's SIGKILL
with the workers exporting over OTLP/HTTP to a receiver run by the test.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from app.telemetry import tracing
from app.testing import fakes
from app.testing.fake_llm import FakeLLMServer
from app.worker.lease_runner import Outcome
from tests.deployment import Deployment
from tests.integration.test_loop import World, make_tools, run
from tests.integration.test_user_in_the_loop import world_of

_exporter = InMemorySpanExporter()


@pytest.fixture(scope="module")
def spans() -> InMemorySpanExporter:
    """This process's tracer provider (set once: OpenTelemetry allows one), into memory."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    assert isinstance(provider, TracerProvider)
    provider.add_span_processor(SimpleSpanProcessor(_exporter))
    return _exporter


@pytest.fixture
def world(any_database_url: str, spans: InMemorySpanExporter) -> Iterator[World]:
    spans.clear()
    yield from world_of(any_database_url, make_tools())


def by_name(found: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {span.name: span for span in found}


def test_a_tool_turn_is_one_trace_from_the_submit_to_its_model_and_tool_calls(
    world: World, spans: InMemorySpanExporter
) -> None:
    conversation_id = world.conversation("What is 1 + 2?", tools=["add"])
    turn = world.client.current_turn(conversation_id)
    assert turn is not None
    scripted = fakes.ScriptedModel(
        fakes.by_iteration([fakes.calls(("c1", "add", {"a": 1, "b": 2})), fakes.text("3")])
    )
    assert run(world.runner(scripted), conversation_id) is Outcome.IDLE

    found = spans.get_finished_spans()
    model = world.client.get_conversation(conversation_id).model
    names = [span.name for span in found]
    assert names.count(f"chat {model}") == 2 and names.count("execute_tool add") == 1
    named = by_name(found)
    submit, worker = named["chat submit"], named["chat turn"]
    assert {span.context.trace_id for span in found} == {submit.context.trace_id}  # one trace
    assert submit.kind is SpanKind.PRODUCER and submit.parent is None
    assert submit.attributes is not None
    assert submit.attributes["chatworker.turn_id"] == str(turn.id)
    assert worker.kind is SpanKind.CONSUMER
    assert worker.parent is not None and worker.parent.span_id == submit.context.span_id
    assert worker.attributes is not None
    assert worker.attributes["chatworker.resumed"] is False
    assert worker.attributes["chatworker.outcome"] == "idle"
    for span in found:
        if span.name.startswith(("chat demo", "chat openai", "execute_tool")):
            assert span.parent is not None and span.parent.span_id == worker.context.span_id
    first_call = next(span for span in found if span.name == f"chat {model}")
    attributes = dict(first_call.attributes or {})
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.model"] == model
    assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]) == (
        10,
        5,
    )
    assert attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    tool = dict(named["execute_tool add"].attributes or {})
    assert tool["gen_ai.tool.name"] == "add" and tool["gen_ai.tool.call.id"] == "c1"
    assert (tool["chatworker.tool.server"], tool["chatworker.tool.outcome"]) == ("memory", "ok")


def test_a_failed_tool_call_and_a_failed_model_call_are_error_spans(
    world: World, spans: InMemorySpanExporter
) -> None:
    conversation_id = world.conversation("Explode", tools=["explode"])
    scripted = fakes.ScriptedModel(
        fakes.by_iteration(
            [fakes.calls(("c1", "explode", {})), fakes.ModelError("LLM call failed: no")]
        )
    )
    assert run(world.runner(scripted), conversation_id) is Outcome.FAILED
    found = spans.get_finished_spans()
    tool = by_name(found)["execute_tool explode"]
    assert not tool.status.is_ok and tool.attributes is not None
    assert tool.attributes["error.type"] == "error"
    calls = [s for s in found if (s.attributes or {}).get("gen_ai.operation.name") == "chat"]
    failed = calls[-1]
    assert not failed.status.is_ok and "no" in (failed.status.description or "")


def test_a_resumed_turn_continues_its_trace_and_links_to_it(
    world: World, spans: InMemorySpanExporter
) -> None:
    conversation_id = world.conversation("Hi", tools=["add"])
    assert world.store.claim(conversation_id, "dead-worker", -1) is not None  # it died there
    scripted = fakes.ScriptedModel(fakes.by_iteration([fakes.text("Hello")]))
    assert run(world.runner(scripted), conversation_id) is Outcome.IDLE
    named = by_name(spans.get_finished_spans())
    submit, worker = named["chat submit"], named["chat turn"]
    assert worker.context.trace_id == submit.context.trace_id
    assert worker.attributes is not None
    assert worker.attributes["chatworker.resumed"] is True
    assert worker.attributes["chatworker.taken_over"] is True
    assert [link.context.span_id for link in worker.links] == [submit.context.span_id]


def test_an_untraced_submit_stores_no_context() -> None:
    assert tracing.wanted({}) is False
    assert tracing.wanted({"OTEL_TRACES_EXPORTER": "none"}) is False
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}) is True
    assert tracing.wanted({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}) is False


# --- across a worker's SIGKILL, over OTLP ---------------------------------------------------------


class Receiver:
    """An OTLP/HTTP trace receiver: every span the workers export, decoded."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, Any]] = []  # (service.name, span)
        self.bodies: list[bytes] = []  # as they came
        received, bodies = self.spans, self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                bodies.append(body)
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    service = next(
                        a.value.string_value
                        for a in resource.resource.attributes
                        if a.key == "service.name"
                    )
                    for scope in resource.scope_spans:
                        received.extend((service, span) for span in scope.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_turn_resumed_after_a_worker_is_killed_continues_the_submit_s_trace(
    database_url: str,
    redis_url: str,
    fake_llm: FakeLLMServer,
    tmp_path: Path,
    spans: InMemorySpanExporter,
) -> None:
    spans.clear()
    receiver = Receiver()
    deployment = Deployment(database_url, redis_url, tmp_path, fake_llm)
    traced = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
    try:
        fake_llm.script(
            [
                {"tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 2}}]},
                {"text": "4"},
            ],
            mode="by_iteration",
        )
        doomed = deployment.start_worker(
            "doomed",
            {
                **traced,
                "OTEL_SERVICE_NAME": "doomed",
                "CHATWORKER_FAILPOINT": "tool_calls_committed",
            },
        )
        conversation_id = deployment.chat("2 + 2?", ["add"])
        assert doomed.wait_exit(60) is not None, "the failpoint did not kill the worker"
        deployment.start_worker("heir", {**traced, "OTEL_SERVICE_NAME": "heir"})
        view = deployment.wait(conversation_id, timeout=60)
        assert (view.status, view.error) == ("idle", None)
        # The heir's turn span is exported once it ends (50 ms batches), while the heir runs; a
        # loaded machine may take seconds.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
            service == "heir" and span.name == "chat turn" for service, span in receiver.spans
        ):
            time.sleep(0.1)
        deployment.close()  # the heir stops, exporting what it still buffered
        submit = by_name(spans.get_finished_spans())["chat submit"]
    finally:
        deployment.close()
        receiver.close()

    heirs = [span for service, span in receiver.spans if service == "heir"]
    names = sorted({(service, span.name) for service, span in receiver.spans})
    turns = [span for span in heirs if span.name == "chat turn"]
    assert len(turns) == 1, f"the heir's turn span: {len(turns)}; received {names}"
    (turn,) = turns
    trace_id = submit.context.trace_id.to_bytes(16, "big")
    assert turn.trace_id == trace_id
    assert turn.parent_span_id == submit.context.span_id.to_bytes(8, "big")
    attributes = {a.key: a.value for a in turn.attributes}
    assert attributes["chatworker.resumed"].bool_value is True
    assert attributes["chatworker.taken_over"].bool_value is True
    assert attributes["chatworker.conversation_id"].string_value == str(conversation_id)
    assert [link.span_id for link in turn.links] == [submit.context.span_id.to_bytes(8, "big")]
    # the heir's model and tool calls are in the same trace, under its turn span
    for span in heirs:
        if span.name.startswith(("chat openai", "execute_tool")):
            assert span.trace_id == trace_id and span.parent_span_id == turn.span_id
    assert any(span.name == "execute_tool add" for span in heirs)
    # every span of the turn either worker exported before it stopped is in the same trace
    # (the MCP SDK's own spans of a tool call too; its start-up's are traces of their own)
    of_the_turn = [
        (service, span)
        for service, span in receiver.spans
        if span.name.startswith(("chat ", "execute_tool", "MCP send tools/call"))
    ]
    assert {service for service, _ in of_the_turn} >= {"heir"}
    assert all(span.trace_id == trace_id for _, span in of_the_turn), [
        (service, span.name, span.trace_id.hex()) for service, span in of_the_turn
    ]


def test_a_submit_over_http_joins_the_caller_s_trace(
    sqlite_url: str, spans: InMemorySpanExporter
) -> None:
    from fastapi.testclient import TestClient

    from app.api import create_app
    from app.config import load_settings
    from app.migrate import upgrade

    upgrade(sqlite_url)
    spans.clear()
    settings = load_settings(database_url=sqlite_url, api_auth=("none",))
    caller_trace, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    with TestClient(create_app(settings)) as http:
        conversation = http.post("/v1/conversations", json={"tools": []}).json()
        submitted = http.post(
            f"/v1/conversations/{conversation['id']}/messages",
            json={"text": "hello"},
            headers={"traceparent": f"00-{caller_trace}-{caller_span}-01"},
        )
        assert submitted.status_code == 202, submitted.text
        untraced = http.post(
            f"/v1/conversations/{conversation['id']}/messages",
            json={"text": "again", "on_busy": "enqueue"},
        )
        assert untraced.status_code == 202, untraced.text
    submits = [s for s in spans.get_finished_spans() if s.name == "chat submit"]
    joined, alone = sorted(submits, key=lambda span: span.start_time or 0)
    # FastAPI's own request span continues the caller's trace; the submit is a child of it
    assert f"{joined.context.trace_id:032x}" == caller_trace
    assert joined.parent is not None and joined.parent.span_id != int(caller_span, 16)
    assert alone.context.trace_id != joined.context.trace_id  # a request of its own
