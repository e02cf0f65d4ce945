"""The API and auth section: who may call the HTTP API, from where, how often; its streams' pace.

Also the request-rate grammar (`N/minute`) that the API's limiter reads with `parse_rate`.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Self

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from app.config.section import Section, comma_list, variable_of

API_KEY_AUTH = "api_key"
JWT_AUTH = "jwt"
NO_AUTH = "none"  # every caller is trusted and sees every conversation: set it explicitly
AUTH_MODES = (API_KEY_AUTH, JWT_AUTH, NO_AUTH)

RATE_PERIODS = {"second": 1.0, "minute": 60.0, "hour": 3600.0}


class ApiSettings(Section):
    """Authentication, CORS, the request rate, event streams and long polls, message size."""

    title: ClassVar[str] = "API and auth"

    api_auth: Annotated[tuple[str, ...], NoDecode] = Field(
        (API_KEY_AUTH,),
        description="how HTTP callers prove who they are: `api_key`, `jwt`, `api_key,jwt`, or "
        "`none` (every caller trusted, sees every conversation); `chatworker serve` with nothing "
        "configured on 127.0.0.1 uses `none`",
    )
    jwt_secret: SecretStr | None = Field(
        None,
        description="the HS256 secret of bearer tokens (needed by `jwt`; at least 32 bytes)",
    )
    jwt_audience: str | None = Field(None, description="when set, a token's `aud` must name it")
    jwt_issuer: str | None = Field(None, description="when set, a token's `iss` must be it")
    cors_origins: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="origins a browser may call the API from, comma-separated (`*` for any)",
    )
    api_rate_limit: str | None = Field(
        None,
        description="requests per API key (and per JWT subject): `120/minute`, `N/second` or "
        "`N/hour`, up to N at once (unset: no limit); shared through Redis by every API "
        "process; past it 429 `rate_limited`",
    )
    api_auth_failure_limit: str | None = Field(
        "60/minute",
        description="failed authentications allowed per client address (`N/minute`, ...; past "
        "it 429 `rate_limited` instead of 401, until the rate allows one again; unset: none); "
        "behind a proxy, the proxy's address unless uvicorn is told to trust its forwarded one",
    )
    api_key_cache_seconds: float = Field(
        5,
        ge=0,
        le=300,
        description="how long an API process keeps the owner of an API key it accepted, "
        "sparing each request a database round trip; a revoked key still works on a process "
        "that saw it for up to this long (0: every request asks the database)",
    )
    api_body_timeout_seconds: float = Field(
        30,
        gt=0,
        le=3600,
        description="how long a client has to send a request's whole body (then 408): a body "
        "sent slowly holds nothing for long",
    )
    api_heartbeat_seconds: float = Field(
        15,
        gt=0,
        le=300,
        description="an idle event stream sends a comment this often, so proxies keep it open",
    )
    api_max_header_bytes: int = Field(
        65536,
        ge=4096,
        le=16 * 2**20,
        description="the largest request line and headers `chatworker serve` reads (then 431, "
        "the connection closed)",
    )
    api_header_timeout_seconds: float = Field(
        10,
        gt=0,
        le=300,
        description="how long a client has to send a request's line and headers once it began "
        "(then 408, the connection closed): a slowly sent request holds nothing for long",
    )
    api_max_wait_seconds: float = Field(
        60,
        gt=0,
        le=3600,
        description="the longest `?wait=` of the events page and `?wait=true` of a submit",
    )
    api_max_streams: int = Field(
        2000,
        ge=1,
        le=100_000,
        description="event streams and long polls one API process serves at once (then 503 "
        "`too_many_streams`)",
    )
    api_max_streams_per_owner: int = Field(
        200,
        ge=1,
        le=100_000,
        description="event streams and long polls one owner holds at once on one API process "
        "(then 429 `too_many_owner_streams`): one owner can never take the process's last ones",
    )
    api_log_poll_seconds: float = Field(
        10,
        ge=1,
        le=300,
        description="a stream or long poll with no commit notice reads the database this often "
        "(a safety net: every commit wakes its readers through the live channel); stretched so "
        "one process's streams make at most 100 such reads a second",
    )
    api_max_body_bytes: int = Field(
        1_048_576,
        ge=16_384,
        le=1_073_741_824,
        description="the largest request body of a route that takes no files (then 413 "
        "`request_too_large`, counted as it arrives); at least `CHATWORKER_MAX_MESSAGE_CHARS` "
        "x 6 + 64 KiB is taken (a message's text escaped); the routes that take files add "
        "their files to it (docs/SECURITY.md)",
    )
    max_message_chars: int = Field(100_000, ge=1, description="the largest user message accepted")
    max_file_bytes: int = Field(
        10_000_000,
        ge=1,
        le=100_000_000,
        description="the largest file a message may carry (an image, a PDF, a text file); "
        "larger: 413 `file_too_large`",
    )
    max_message_file_bytes: int = Field(
        20_000_000,
        ge=1,
        le=500_000_000,
        description="the most bytes of files one message may carry, all its files together",
    )
    max_message_files: int = Field(
        10, ge=0, le=100, description="the most files one message may carry (0: none)"
    )
    owner_storage_bytes: int = Field(
        1_000_000_000,
        ge=1,
        description="the most bytes one owner may store: its files (each once) and the text of "
        "its conversations' messages and kept tool outputs (a fork's copies count); a message "
        "with new files or a fork past it: 429 `storage_quota_exceeded` (413 "
        "`larger_than_storage_quota` when it alone holds more)",
    )

    @field_validator("api_auth", mode="before")
    @classmethod
    def _parse_auth(cls, value: Any) -> Any:
        modes = comma_list(value)
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
        return comma_list(value)

    @field_validator("api_rate_limit", "api_auth_failure_limit")
    @classmethod
    def _rate_limit(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parse_rate(value)
        return value.strip()

    @model_validator(mode="after")
    def _jwt_has_a_secret(self) -> Self:
        if JWT_AUTH not in self.api_auth:
            return self
        auth, secret = variable_of(type(self), "api_auth"), variable_of(type(self), "jwt_secret")
        if self.jwt_secret is None:
            raise ValueError(f"{auth} includes jwt, so {secret} must be set")
        if len(self.jwt_secret.get_secret_value().encode()) < 32:
            raise ValueError(f"{secret} must be at least 32 bytes (RFC 7518 3.2)")
        return self


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
