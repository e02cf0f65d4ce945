"""The product's metrics, one definition each (Prometheus; `docs/OPERATIONS.md` says what to
alert on). Shared by both sides: the worker records turns, model and tool calls, recovery; the
API its requests and event streams; the janitor what it failed.

Multiprocess-safe: with `PROMETHEUS_MULTIPROC_DIR` set before this module is first imported
(`chatworker worker` sets it for dramatiq's processes; set it yourself for several uvicorn
workers), every process writes its values to files there and `exposition()` sums them, the way
dramatiq's own Prometheus middleware does for the queue's metrics. Without it, one process's
registry. Gauges say how processes combine (`livesum`: only live processes count).
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client import multiprocess as _multiprocess
from prometheus_client.metrics import MetricWrapperBase

from app.telemetry import MULTIPROC_ENV

_MODEL_SECONDS = (0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300)
_FIRST_TOKEN_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60)
_TOOL_SECONDS = (0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

# --- turns ------------------------------------------------------------------------------------

TURNS_STARTED = Counter("chatworker_turns_started", "Turns a worker began (first claim)", ["model"])
TURNS_ENDED = Counter(
    "chatworker_turns_ended",
    "Turns that ended, by status (completed, failed, cancelled)",
    ["model", "status"],
)
TURNS_PAUSED = Counter(
    "chatworker_turns_paused",
    "Times a turn stopped to wait for the user (requires_action)",
    ["model"],
)
TURNS_RESUMED = Counter(
    "chatworker_turns_resumed",
    "Claims that continued a started turn: after='takeover' when its worker had stopped without "
    "releasing it (a crash, a kill, a partition), 'handover' otherwise (a shutdown, an answer)",
    ["model", "after"],
)
TURNS_IN_FLIGHT = Gauge(
    "chatworker_turns_in_flight",
    "Turns running in the worker processes now",
    multiprocess_mode="livesum",
)
TURNS_DEFERRED = Counter(
    "chatworker_turns_deferred",
    "Claims refused because the owner runs its limit of turns (the turn waits for one to end)",
)
LEASES_LOST = Counter(
    "chatworker_leases_lost", "Runs stopped because another worker took the conversation over"
)
RUNS_CRASHED = Counter(
    "chatworker_runs_crashed",
    "Runs that raised in the worker's own step code (counted as attempts; app/worker/crashes.py)",
)
RECOVERY_REENQUEUES = Counter(
    "chatworker_recovery_reenqueues",
    "Doorbells re-sent by the recovery sweep for running conversations nobody was touching",
)
JANITOR_FAILED = Counter("chatworker_janitor_failed", "Conversations the janitor failed as stuck")

# --- the model ----------------------------------------------------------------------------------

MODEL_CALL_SECONDS = Histogram(
    "chatworker_model_call_seconds",
    "One model call, retries included, by outcome (ok, error, cancelled)",
    ["model", "outcome"],
    buckets=_MODEL_SECONDS,
)
MODEL_FIRST_TOKEN_SECONDS = Histogram(
    "chatworker_model_time_to_first_token_seconds",
    "From sending a model request to its first streamed fragment (text or tool call)",
    ["model"],
    buckets=_FIRST_TOKEN_SECONDS,
)
MODEL_RETRIES = Counter(
    "chatworker_model_retries",
    "Transient model errors retried, by cause (429, 503, rate, overloaded, ...)",
    ["model", "cause"],
)
MODEL_FALLBACKS = Counter(
    "chatworker_model_fallbacks",
    "Turns moved to a fallback model after their model failed (down, or retries spent)",
    ["model", "to"],
)
MODEL_TOKENS = Counter(
    "chatworker_model_tokens", "Tokens the model read and wrote", ["model", "kind"]
)

MODEL_COST = Counter(
    "chatworker_model_cost_usd",
    "US dollars of model calls, by litellm's prices (calls of unpriced models not included)",
    ["model"],
)
MODEL_UNPRICED_CALLS = Counter(
    "chatworker_model_unpriced_calls",
    "Model calls whose cost is unknown: litellm has no price for the model",
    ["model"],
)

# --- tools ------------------------------------------------------------------------------------

TOOL_CALLS = Counter(
    "chatworker_tool_calls",
    "MCP tool calls by tool and outcome (ok, error, timeout, unavailable, cancelled)",
    ["tool", "outcome"],
)
TOOL_CALL_SECONDS = Histogram(
    "chatworker_tool_call_seconds", "One MCP tool call", ["tool"], buckets=_TOOL_SECONDS
)

# --- webhooks -----------------------------------------------------------------------------------

WEBHOOK_DELIVERIES = Counter(
    "chatworker_webhook_deliveries",
    "Webhook delivery attempts by outcome (delivered; retry: failed, another attempt is due; "
    "failed: the last attempt failed, the delivery is given up)",
    ["outcome"],
)
WEBHOOK_SECONDS = Histogram(
    "chatworker_webhook_seconds", "One webhook POST, until its response (or its failure)"
)

# --- the worker host ----------------------------------------------------------------------------

HEARTBEAT_METRIC = "chatworker_host_heartbeat_timestamp_seconds"
HOST_HEARTBEAT = Gauge(
    HEARTBEAT_METRIC,
    "When each worker host's loop last ran its heartbeat, by process (the liveness probe reads "
    "the oldest; 0: a process without a host, such as the endpoint's own)",
    multiprocess_mode="liveall",
)

# --- the API ------------------------------------------------------------------------------------

HTTP_REQUESTS = Counter(
    "chatworker_http_requests", "API requests by route and status", ["method", "route", "status"]
)
HTTP_REQUEST_SECONDS = Histogram(
    "chatworker_http_request_seconds",
    "API request time until the response starts (a stream's whole life is not counted)",
    ["method", "route"],
)
EVENT_FOLLOWERS = Gauge(
    "chatworker_event_followers",
    "Event streams (SSE) and long polls following a conversation now",
    multiprocess_mode="livesum",
)


class _Off:
    """A metric that records nothing (`CHATWORKER_METRICS=false`)."""

    def labels(self, *_values: Any, **_named: Any) -> _Off:
        return self

    def inc(self, *_args: Any, **_named: Any) -> None:
        pass

    dec = set = observe = inc

    def track_inprogress(self) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()

    time = track_inprogress


# Every metric but the hosts' heartbeat (the liveness probe reads it), by its module name.
_RECORDING: dict[str, Any] = {
    name: value
    for name, value in globals().items()
    if isinstance(value, MetricWrapperBase) and value is not HOST_HEARTBEAT
}


def enable(on: bool = True) -> None:
    """Record (the default) or not: off, every metric here is a no-op in this process (the
    callers read `metrics.NAME` when they record, so the switch reaches them)."""
    off = _Off()
    for name, metric in _RECORDING.items():
        globals()[name] = metric if on else off


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROC_ENV) or None


def exposition() -> tuple[bytes, str]:
    """Every metric of this process, or of every process sharing the multiprocess directory,
    in Prometheus's text format, with its content type."""
    return generate_latest(_registry()), CONTENT_TYPE_LATEST


def oldest_heartbeat() -> float | None:
    """The oldest heartbeat of the live worker hosts (seconds since the epoch), None if none."""
    beats = [
        sample.value
        for family in _registry().collect()
        if family.name == HEARTBEAT_METRIC
        for sample in family.samples
        if sample.value > 0
    ]
    return min(beats) if beats else None


def _registry() -> CollectorRegistry:
    """This process's registry, or one summing every process's files (multiprocess mode)."""
    if multiprocess_dir() is None:
        return REGISTRY
    registry = CollectorRegistry()
    _multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return registry


def beat() -> None:
    """This worker host's loop is alive."""
    HOST_HEARTBEAT.set(time.time())


def process_stopped(pid: int | None = None) -> None:
    """A worker process ends: its live gauges stop counting (multiprocess mode)."""
    directory = multiprocess_dir()
    if directory is not None:
        _multiprocess.mark_process_dead(pid or os.getpid(), directory)  # type: ignore[no-untyped-call]


__all__ = [
    "EVENT_FOLLOWERS",
    "HEARTBEAT_METRIC",
    "HOST_HEARTBEAT",
    "HTTP_REQUESTS",
    "HTTP_REQUEST_SECONDS",
    "JANITOR_FAILED",
    "LEASES_LOST",
    "MODEL_CALL_SECONDS",
    "MODEL_COST",
    "MODEL_FALLBACKS",
    "MODEL_FIRST_TOKEN_SECONDS",
    "MODEL_RETRIES",
    "MODEL_TOKENS",
    "MODEL_UNPRICED_CALLS",
    "MULTIPROC_ENV",
    "RECOVERY_REENQUEUES",
    "RUNS_CRASHED",
    "TOOL_CALLS",
    "TOOL_CALL_SECONDS",
    "TURNS_DEFERRED",
    "TURNS_ENDED",
    "TURNS_IN_FLIGHT",
    "TURNS_PAUSED",
    "TURNS_RESUMED",
    "TURNS_STARTED",
    "WEBHOOK_DELIVERIES",
    "WEBHOOK_SECONDS",
    "beat",
    "enable",
    "exposition",
    "multiprocess_dir",
    "oldest_heartbeat",
    "process_stopped",
]
