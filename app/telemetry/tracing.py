"""Traces (OpenTelemetry): one trace per turn, from the submit through the queue into whichever
worker runs it, with a span per model call (the GenAI semantic conventions) and per tool call.

Off by default; on when the standard variables ask for it: `OTEL_TRACES_EXPORTER` (`otlp`, the
default exporter once on, or `console`), or an OTLP endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT` /
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); `OTEL_SDK_DISABLED=true` turns it off. The exporter reads
the rest (`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME`, `OTEL_BSP_SCHEDULE_DELAY`, ...).

The context travels with the turn, not in memory: the submit's span context is stored in the
turn's row (`turns.trace_context`, a W3C `traceparent` carrier), and every claim of the turn
starts its span as a child of it; a claim that resumes a turn (after a crash, a shutdown or the
user's answer) says so and links to it. Each process sets up its own provider after it starts
(`setup`; dramatiq's worker processes after they fork).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACER_NAME = "chatworker"
_propagator = TraceContextTextMapPropagator()
_set_up = False


def wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the OTEL_* variables ask for traces."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def setup(service: str) -> bool:
    """This process's tracer provider, once, if traces are wanted and no provider is set yet
    (a host application's own stays): a batch processor and the configured exporter."""
    global _set_up  # noqa: PLW0603 - one provider per process
    if _set_up or not wanted():
        return _set_up
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        _set_up = True
        return True  # someone set one up already (a host app, a test): use it
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or service})
    provider = TracerProvider(resource=resource)
    kind = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    exporter: Any
    if kind == "console":
        exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _set_up = True
    return True


def shutdown() -> None:
    """Export what is buffered (a stopping process)."""
    provider = trace.get_tracer_provider()
    flush = getattr(provider, "shutdown", None)
    if callable(flush):
        flush()


_cached: tuple[object, trace.Tracer] | None = None


def tracer() -> trace.Tracer:
    """This package's tracer from the process's provider (kept while the provider is the same:
    asking the SDK for it makes a new one each time, ~25 us)."""
    global _cached  # noqa: PLW0603 - a cache of the one provider's tracer
    provider = trace.get_tracer_provider()
    if _cached is None or _cached[0] is not provider:
        _cached = (provider, provider.get_tracer(TRACER_NAME))
    return _cached[1]


def carrier() -> dict[str, str] | None:
    """The current span's context as a W3C `traceparent` carrier, to store with a turn; None
    when nothing is traced."""
    found: dict[str, str] = {}
    _propagator.inject(found)
    return found or None


@contextmanager
def submit_span(name: str, parent: otel_context.Context | None = None) -> Iterator[Span]:
    """The web side's span of a turn's start (its context is stored with the turn)."""
    with tracer().start_as_current_span(name, context=parent, kind=SpanKind.PRODUCER) as span:
        yield span


@contextmanager
def turn_span(
    stored: Mapping[str, str] | None, *, resumed: bool, attributes: Mapping[str, Any]
) -> Iterator[Span]:
    """A worker's run of a turn: a child of the submit's span (`stored`), in the same trace
    whichever worker runs it; a resumed run links to it as the trace it continues."""
    parent = _propagator.extract(dict(stored)) if stored else None
    links = []
    if resumed and parent is not None:
        origin = trace.get_current_span(parent).get_span_context()
        if origin.is_valid:
            links.append(Link(origin, {"chatworker.link": "continues"}))
    with tracer().start_as_current_span(
        "chat turn", context=parent, kind=SpanKind.CONSUMER, links=links, attributes=attributes
    ) as span:
        yield span


@contextmanager
def model_span(model: str) -> Iterator[Span]:
    """One model call, retries included (GenAI semantic conventions: `chat {model}`)."""
    attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}
    provider = model.split("/", 1)[0] if "/" in model else None
    if provider:
        attributes["gen_ai.provider.name"] = provider
    with tracer().start_as_current_span(
        f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes
    ) as span:
        yield span


def model_answered(
    span: Span, input_tokens: int, output_tokens: int, finish_reason: str | None
) -> None:
    span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
    if finish_reason:
        span.set_attribute("gen_ai.response.finish_reasons", [finish_reason])


@contextmanager
def tool_span(name: str, call_id: str, server: str | None) -> Iterator[Span]:
    """One MCP tool call (GenAI semantic conventions: `execute_tool {name}`)."""
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
    }
    if server:
        attributes["chatworker.tool.server"] = server
    with tracer().start_as_current_span(
        f"execute_tool {name}", kind=SpanKind.INTERNAL, attributes=attributes
    ) as span:
        yield span


def failed(span: Span, error: str, kind: str) -> None:
    span.set_status(Status(StatusCode.ERROR, error[:500]))
    span.set_attribute("error.type", kind)


__all__ = [
    "TRACER_NAME",
    "carrier",
    "failed",
    "model_answered",
    "model_span",
    "setup",
    "shutdown",
    "submit_span",
    "tool_span",
    "tracer",
    "turn_span",
    "wanted",
]
