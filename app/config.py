"""The one settings object, read from the environment (and a `.env` file in the working directory).

`load_settings()` is the only entry point: it validates everything at start and raises `ConfigError`
naming the variable to fix, so a bad deployment fails before it touches a conversation.
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.errors import ConfigError

ENV_PREFIX = "CHATWORKER_"
DEFAULT_DATABASE_URL = "sqlite:///chatworker.db"
DEMO_MODEL = "demo/offline"

API_KEY_AUTH = "api_key"
JWT_AUTH = "jwt"
NO_AUTH = "none"  # every caller is trusted and sees every conversation: set it explicitly
AUTH_MODES = (API_KEY_AUTH, JWT_AUTH, NO_AUTH)

_SERVER_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


ApprovalPolicy = Literal["never", "always", "destructive"]


class McpServerConfig(BaseModel):
    """One `{"mcpServers": {name: {...}}}` entry: stdio (`command`) or remote (`url`)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    # Which calls the user approves first: never, always, or (the default) those of a tool whose
    # annotations say destructiveHint and not readOnlyHint. Per tool (by the server's own name)
    # in `tool_approval`, which wins over the server's.
    approval: ApprovalPolicy = "destructive"
    tool_approval: dict[str, ApprovalPolicy] = Field(default_factory=dict)

    def approval_of(self, tool: str) -> str:
        return self.tool_approval.get(tool, self.approval)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if not _SERVER_NAME.match(self.name):
            raise ValueError(f"server name {self.name!r} must match {_SERVER_NAME.pattern}")
        if (self.command is None) == (self.url is None):
            raise ValueError(f"server {self.name!r} needs exactly one of 'command' or 'url'")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"server {self.name!r}: url must start with http:// or https://")
        return self

    @property
    def is_remote(self) -> bool:
        return self.url is not None


def parse_mcp_servers(
    raw: str, environ: dict[str, str] | None = None
) -> tuple[McpServerConfig, ...]:
    """Parse inline JSON or a path to a JSON file into server configs.

    `${VAR}` in `env` and `headers` values is taken from the worker's environment, so secrets need
    not be written into the file; an undefined variable is an error, never an empty string.
    """
    text = raw.strip()
    if not text:
        return ()
    if not text.startswith("{"):
        path = Path(text).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"cannot read MCP servers file {str(path)!r}: {exc.strerror}") from exc
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc}") from exc
    servers = document.get("mcpServers") if isinstance(document, dict) else None
    if not isinstance(servers, dict):
        raise ValueError('expected an object of the shape {"mcpServers": {"name": {...}}}')
    environ = dict(os.environ) if environ is None else environ
    configs = []
    for name, entry in servers.items():
        if not isinstance(entry, dict):
            raise ValueError(f"server {name!r} must be an object")
        if entry.get("disabled") is True:
            continue
        fields = {**entry, "name": name}
        for key in ("env", "headers"):
            if isinstance(fields.get(key), dict):
                fields[key] = {k: _expand(str(v), environ, name) for k, v in fields[key].items()}
        configs.append(McpServerConfig.model_validate(fields))
    return tuple(configs)


def _expand(value: str, environ: dict[str, str], server: str) -> str:
    def substitute(match: re.Match[str]) -> str:
        variable = match.group(1)
        if variable not in environ:
            raise ValueError(f"server {server!r} refers to ${{{variable}}}, which is not set")
        return environ[variable]

    return _ENV_REFERENCE.sub(substitute, value)


class Settings(BaseSettings):
    """Every tunable of the worker and the web-app client. Field docs are the README's table."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        extra="ignore",
        frozen=True,
        populate_by_name=True,
    )

    database_url: str = Field(
        DEFAULT_DATABASE_URL,
        validation_alias="DATABASE_URL",
        description="SQLAlchemy URL; postgresql+psycopg://... in production",
    )
    redis_url: str | None = Field(
        None,
        validation_alias="REDIS_URL",
        description=(
            "Redis URL of the queue; unset, a web app rings no worker (enqueued=False) and "
            "`chatworker demo` runs an in-process broker and worker"
        ),
    )
    model: str = Field(DEMO_MODEL, min_length=1, description="default litellm model string")
    max_iterations: int = Field(20, ge=1, le=1000, description="LLM calls allowed per turn")
    stale_after_seconds: float = Field(
        300, gt=0, description="janitor: fail running conversations silent this long"
    )
    lease_ttl_seconds: float = Field(30, gt=0, description="how long a claim lasts unrenewed")
    heartbeat_seconds: float = Field(10, gt=0, description="how often a running worker renews")
    llm_timeout_seconds: float = Field(120, gt=0, description="timeout of one LLM request")
    llm_max_retry_after_seconds: float = Field(
        60,
        ge=0,
        le=3600,
        description="a 429 or 503 waits max(the policy's 3 s / 6 s, the provider's Retry-After) "
        "up to this; a provider asking for longer fails the turn at once, its wait in the error",
    )
    llm_stream: bool = Field(
        True, description="ask the model for a stream and show its reply live as it forms"
    )
    live_flush_seconds: float = Field(
        0.05,
        ge=0.001,
        le=5,
        description="a streamed reply's fragments are sent to readers at most this often",
    )
    tool_timeout_seconds: float = Field(60, gt=0, description="timeout of one MCP tool call")
    max_message_chars: int = Field(100_000, ge=1, description="largest accepted user message")
    llm_api_base: str | None = Field(None, description="base URL of an OpenAI-compatible API")
    llm_api_key: SecretStr | None = Field(
        None, description="API key for the model (else litellm reads the provider's variable)"
    )
    max_attempts: int = Field(
        3, ge=1, le=100, description="claims of a turn that may end without progress"
    )
    max_tool_output_chars: int = Field(
        1_000_000,
        ge=100,
        description="the most of one tool output kept at all; longer output is truncated with a "
        "visible marker",
    )
    tool_context_chars: int = Field(
        10_000,
        ge=100,
        le=1_000_000,
        description="the most of one tool output the model's context holds; the rest is in the "
        "session tool cache (a marker says how to read on)",
    )
    session_cache: bool = Field(
        True,
        description="keep every MCP tool output whole outside the prompt and offer the model "
        "session_cache_list / session_cache_get to read it (off: long outputs are cut)",
    )
    clarify: bool = Field(
        True,
        description="offer the model agent_clarify (ask the user a question) in conversations "
        "that allow it; false turns it off everywhere",
    )
    max_in_flight: int = Field(
        500, ge=1, le=10_000, description="conversations one worker process runs at once"
    )
    shutdown_grace_seconds: float = Field(
        10, ge=0, description="on SIGTERM, how long running turns may finish before release"
    )
    recovery_interval_seconds: float = Field(
        15, gt=0, description="how often a worker re-enqueues conversations whose lease expired"
    )
    mcp_servers: Annotated[tuple[McpServerConfig, ...], NoDecode] = Field(
        (), description='JSON file path or inline JSON: {"mcpServers": {...}}'
    )
    api_auth: Annotated[tuple[str, ...], NoDecode] = Field(
        (API_KEY_AUTH,),
        description="how HTTP callers prove who they are: api_key, jwt, api_key,jwt, or none",
    )
    jwt_secret: SecretStr | None = Field(
        None, description="HS256 secret of the bearer tokens (auth mode jwt), at least 32 bytes"
    )
    jwt_audience: str | None = Field(None, description="if set, a token's `aud` must name it")
    jwt_issuer: str | None = Field(None, description="if set, a token's `iss` must be it")
    cors_origins: Annotated[tuple[str, ...], NoDecode] = Field(
        (), description="origins a browser may call the API from (comma-separated; * for any)"
    )
    api_heartbeat_seconds: float = Field(
        15, gt=0, le=300, description="an idle event stream sends a comment this often"
    )
    api_max_wait_seconds: float = Field(
        60, gt=0, le=3600, description="longest wait of ?wait= (events) and ?wait=true (messages)"
    )
    api_max_streams: int = Field(
        2000, ge=1, le=100_000, description="event streams one API process serves at once"
    )
    in_flight_recovery: Literal["ask", "error"] = Field(
        "ask",
        description="a call that was running when its worker stopped, of a tool that is neither "
        "read-only nor idempotent: ask the user to approve running it again, or give the "
        "model an 'outcome unknown' error result",
    )
    retention_days: float | None = Field(
        None,
        gt=0,
        description="`chatworker prune` deletes resting conversations untouched for this many "
        "days when no --older-than is given (unset: it must be given)",
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description="log lines as text, or one JSON object per line (with the conversation, "
        "turn and worker ids on every line of a turn)",
    )
    metrics: bool = Field(
        True,
        description="record Prometheus metrics (false: nothing is recorded; the liveness "
        "heartbeat still is)",
    )
    metrics_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="a worker serves GET /metrics and GET /healthz (liveness) on this port; "
        "unset: no endpoint (the API always serves /metrics)",
    )
    metrics_host: str = Field(
        "0.0.0.0", min_length=1, description="the address the worker's metrics endpoint binds"
    )
    metrics_dir: str | None = Field(
        None,
        description="where a worker's processes share their metric values (multiprocess mode); "
        "default: a directory under the system's temp dir named after the port, emptied at start",
    )
    liveness_seconds: float = Field(
        60,
        gt=0,
        description="the worker's /healthz fails when a host's loop has not beaten for this long",
    )
    api_log_poll_seconds: float = Field(
        10,
        ge=1,
        le=300,
        description="a stream or wait with no commit notice reads the database this often "
        "(a safety net: every commit wakes its readers through the live channel)",
    )

    owner_max_running_turns: int | None = Field(
        None,
        ge=1,
        description="the most turns one owner's conversations run at once (unset: no limit); "
        "a worker claims another of its turns only when one ends",
    )
    owner_limit_policy: Literal["queue", "reject"] = Field(
        "queue",
        description="past the owner's limit, a new turn is accepted and waits for one of its "
        "owner's turns to end (`queue`), or refused with 429 too_many_running_turns and "
        "Retry-After (`reject`)",
    )
    api_rate_limit: str | None = Field(
        None,
        description="requests each API key (or JWT subject) may make: N/second, N/minute or "
        "N/hour, up to N at once (unset: no limit); shared through Redis by every API process",
    )
    webhook_timeout_seconds: float = Field(
        10, gt=0, le=300, description="how long a webhook's receiver has to answer one POST"
    )
    webhook_retry_schedule: Annotated[tuple[float, ...], NoDecode] = Field(
        (5, 60, 300, 1800, 7200, 18000, 28800, 28800),
        description="the waits (seconds, comma-separated) before each new attempt of a webhook "
        "delivery that failed; after the last one fails it is given up (default: 9 attempts "
        "over about a day)",
    )
    webhook_lease_seconds: float = Field(
        60,
        gt=0,
        description="a worker that took a webhook delivery has it for this long; if it dies, "
        "another sends it after (longer than the timeout)",
    )
    webhook_poll_seconds: float = Field(
        1, gt=0, le=60, description="how often a worker looks for webhook deliveries that are due"
    )
    webhook_delivery: bool = Field(
        True, description="this worker delivers webhooks (false: leave them to other workers)"
    )

    @field_validator("api_rate_limit")
    @classmethod
    def _rate_limit(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parse_rate(value)
        return value.strip()

    @field_validator("webhook_retry_schedule", mode="before")
    @classmethod
    def _parse_schedule(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = tuple(float(part) for part in _comma_list(value))
            except ValueError:
                raise ValueError("must be seconds separated by commas, e.g. 5,60,300") from None
        if any(wait < 0 for wait in value):
            raise ValueError("a wait cannot be negative")
        return value

    @model_validator(mode="after")
    def _webhook_lease_past_timeout(self) -> Settings:
        if self.webhook_lease_seconds <= self.webhook_timeout_seconds:
            raise ValueError(
                f"{env_name('webhook_lease_seconds')} ({self.webhook_lease_seconds}) must be "
                f"longer than {env_name('webhook_timeout_seconds')} "
                f"({self.webhook_timeout_seconds}), or a slow receiver gets every delivery twice"
            )
        return self

    @field_validator("database_url")
    @classmethod
    def _database_scheme(cls, value: str) -> str:
        # Hosting platforms hand out postgres:// URLs; SQLAlchemy needs the driver named.
        for prefix in ("postgres://", "postgresql://"):
            if value.startswith(prefix):
                return "postgresql+psycopg://" + value[len(prefix) :]
        if not value.startswith(("postgresql+psycopg://", "sqlite://")):
            raise ValueError("must start with postgresql+psycopg:// (or postgres://) or sqlite://")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            return None
        if value is not None and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return value

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _parse_mcp_servers(cls, value: Any) -> Any:
        return parse_mcp_servers(value) if isinstance(value, str) else value

    @field_validator("api_auth", mode="before")
    @classmethod
    def _parse_auth(cls, value: Any) -> Any:
        modes = _comma_list(value)
        if not modes:
            raise ValueError(f"name at least one mode of {', '.join(AUTH_MODES)}")
        unknown = [mode for mode in modes if mode not in AUTH_MODES]
        if unknown:
            raise ValueError(f"unknown mode {unknown[0]!r}; use {', '.join(AUTH_MODES)}")
        if NO_AUTH in modes and len(modes) > 1:
            raise ValueError("'none' cannot be combined with another mode")
        return modes

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _parse_origins(cls, value: Any) -> Any:
        return _comma_list(value)

    @model_validator(mode="after")
    def _jwt_has_a_secret(self) -> Settings:
        if JWT_AUTH not in self.api_auth:
            return self
        if self.jwt_secret is None:
            raise ValueError(
                f"{env_name('api_auth')} includes jwt, so {env_name('jwt_secret')} must be set"
            )
        if len(self.jwt_secret.get_secret_value().encode()) < 32:
            raise ValueError(f"{env_name('jwt_secret')} must be at least 32 bytes (RFC 7518 3.2)")
        return self

    @model_validator(mode="after")
    def _heartbeat_within_lease(self) -> Settings:
        if self.heartbeat_seconds >= self.lease_ttl_seconds:
            raise ValueError(
                f"{env_name('heartbeat_seconds')} ({self.heartbeat_seconds}) must be shorter than "
                f"{env_name('lease_ttl_seconds')} ({self.lease_ttl_seconds}), "
                "or a live worker loses its lease between two heartbeats"
            )
        return self

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


RATE_PERIODS = {"second": 1.0, "minute": 60.0, "hour": 3600.0}


def parse_rate(text: str) -> tuple[int, float]:
    """`N/second`, `N/minute` or `N/hour` as (N, the period in seconds); ValueError if not."""
    count, _, period = text.strip().partition("/")
    try:
        allowed = int(count)
    except ValueError:
        allowed = 0
    if allowed < 1 or period.strip() not in RATE_PERIODS:
        raise ValueError(f"must be N/second, N/minute or N/hour with N >= 1, not {text!r}")
    return allowed, RATE_PERIODS[period.strip()]


def _comma_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = value.split(",")
    return tuple(str(part).strip() for part in value if str(part).strip())


def env_name(field: str) -> str:
    """The environment variable that sets `field`."""
    alias = Settings.model_fields[field].validation_alias
    return alias if isinstance(alias, str) else ENV_PREFIX + field.upper()


def load_settings(**overrides: Any) -> Settings:
    """Read and validate the settings; raise `ConfigError` naming each bad variable."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


def _describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors(include_url=False, include_input=False):
        location = [str(part) for part in error["loc"]]
        detail = error["msg"].removeprefix("Value error, ")
        if not location:  # a rule across fields: its message names the variables
            lines.append(detail)
            continue
        head = location[0]
        where = env_name(head) if head in Settings.model_fields else head
        suffix = f" (at {'.'.join(location[1:])})" if len(location) > 1 else ""
        lines.append(f"{where}: {detail}{suffix}")
    return "invalid settings:\n  " + "\n  ".join(lines)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return load_settings()
