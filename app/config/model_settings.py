"""The model section: which model a turn calls, how, and how its reply reaches the readers.

Any litellm model string works; the default is the built-in offline demo model.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from app.config.section import Section, comma_list

DEMO_MODEL = "demo/offline"


class ModelSettings(Section):
    """The model, its endpoint and key, timeouts and retries, and the live stream of its reply."""

    title: ClassVar[str] = "Model"

    model: str = Field(
        DEMO_MODEL,
        min_length=1,
        description="default litellm model string of new conversations, e.g. "
        "`openai/gpt-4o-mini` (the default is the built-in offline demo model)",
    )
    fallback_models: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="models a call moves to, in order, comma-separated, when the one in use "
        "is down (no connection, a 5xx, a timeout) or its transient errors spent their "
        "retries (a conversation's own `fallback_models` replace them); the event "
        "`model.fallback` and each message's `usage.model` say which model answered",
    )
    model_file_kinds: dict[str, list[Literal["image", "pdf"]]] = Field(
        default_factory=dict,
        description="the kinds of file models take, over litellm's model map, as JSON: "
        '`{"openai/my-vision-model": ["image", "pdf"]}` (a model the map does not know takes '
        "neither: a message with an image for it is refused, 400 `file_not_taken`)",
    )
    llm_api_base: str | None = Field(
        None, description="base URL of an OpenAI-compatible API (a local server, a gateway)"
    )
    llm_api_key: SecretStr | None = Field(
        None,
        description="API key for the model (unset: litellm reads the provider's own variable, "
        "`OPENAI_API_KEY`, ...); never written to the database, logs or errors",
    )
    max_iterations: int = Field(
        20,
        ge=1,
        le=1000,
        description='LLM calls allowed in one turn; the next one fails the turn with "Max tool '
        'iterations reached"',
    )
    llm_timeout_seconds: float = Field(120, gt=0, description="timeout of one LLM request")
    llm_max_retry_after_seconds: float = Field(
        60,
        ge=0,
        le=3600,
        description='a transient error (429, 503, "rate", "overloaded") is retried after max(3 s '
        "then 6 s, the provider's `Retry-After` / `retry-after-ms`), 3 attempts in all; a "
        "provider asking for a longer wait than this fails the turn at once, its wait in the error",
    )
    schema_check_seconds: float = Field(
        2,
        gt=0,
        le=60,
        description="how long checking one structured answer against its output schema may "
        "take, in a process of its own (past it the process is killed and the turn fails saying "
        "why; the worker's other turns go on)",
    )
    schema_check_memory_mb: int = Field(
        256,
        ge=64,
        le=16_384,
        description="the memory cap of the process that checks structured answers (past it the "
        "turn fails saying why)",
    )
    llm_stream: bool = Field(
        True,
        description="ask the model for a stream and show its reply live as it forms (the "
        "committed reply is the same either way)",
    )
    live_flush_seconds: float = Field(
        0.05,
        ge=0.001,
        le=5,
        description="a streamed reply's fragments are sent to readers at most this often (one "
        "Redis write per interval, not per token; the first at once)",
    )

    @field_validator("fallback_models", mode="before")
    @classmethod
    def _parse_fallbacks(cls, value: Any) -> Any:
        return comma_list(value)
