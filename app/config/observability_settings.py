"""The observability section: the log format, Prometheus metrics and the worker's liveness probe.

Traces are turned on by the standard OpenTelemetry variables, not by a setting of ours.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from app.config.section import Section


class ObservabilitySettings(Section):
    """Logs, metrics and the worker's /metrics and /healthz endpoint."""

    title: ClassVar[str] = "Observability"

    log_format: Literal["text", "json"] = Field(
        "text",
        description="`json`: one JSON object per line from every process (the CLI, the worker's "
        "processes, uvicorn), with `conversation_id`, `turn_id` and `worker_id` on every line "
        "of a turn",
    )
    metrics: bool = Field(
        True,
        description="record Prometheus metrics; `false`: nothing is recorded (the worker's "
        "liveness heartbeat still is)",
    )
    metrics_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="a worker serves `GET /metrics` (every process of it, dramatiq's queue "
        "metrics included) and `GET /healthz` (its hosts' liveness) on this port (unset: no "
        "endpoint); the API always serves `/metrics`",
    )
    metrics_host: str = Field(
        "0.0.0.0", min_length=1, description="the address the worker's metrics endpoint binds"
    )
    metrics_dir: str | None = Field(
        None,
        description="where a worker's processes share their metric values, emptied when the "
        "worker starts (unset: `$TMPDIR/chatworker-metrics-<port>`); the janitor counts into "
        "it when set",
    )
    liveness_seconds: float = Field(
        60,
        gt=0,
        description="the worker's `/healthz` fails when a host's loop has not beaten for this long",
    )
