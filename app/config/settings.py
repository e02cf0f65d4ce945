"""The one settings object: every section's fields, read from the environment and a `.env` file.

`load_settings()` validates everything at start and raises `ConfigError` naming each bad variable.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.config.api_settings import ApiSettings
from app.config.context_settings import ContextSettings
from app.config.database_settings import DatabaseSettings
from app.config.model_settings import ModelSettings
from app.config.observability_settings import ObservabilitySettings
from app.config.retention_settings import RetentionSettings
from app.config.section import ENV_PREFIX, Section, variable_of
from app.config.tool_settings import ToolSettings
from app.config.webhook_settings import WebhookSettings
from app.config.worker_settings import WorkerSettings
from app.errors import ConfigError

# The order of the settings page's tables; every field of `Settings` is in exactly one section.
SECTIONS: tuple[type[Section], ...] = (
    DatabaseSettings,
    WorkerSettings,
    ModelSettings,
    ContextSettings,
    ToolSettings,
    ApiSettings,
    WebhookSettings,
    ObservabilitySettings,
    RetentionSettings,
)


# Pydantic collects the fields of the last base first, so the bases are listed in reverse of
# SECTIONS to keep the fields (and the errors naming them) in the sections' order.
class Settings(
    RetentionSettings,
    ObservabilitySettings,
    WebhookSettings,
    ApiSettings,
    ToolSettings,
    ContextSettings,
    ModelSettings,
    WorkerSettings,
    DatabaseSettings,
    BaseSettings,
):
    """Every tunable of the worker and the web-app client; the sections hold the fields."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        extra="ignore",
        frozen=True,
        populate_by_name=True,
    )


def env_name(field: str) -> str:
    """The environment variable that sets `field`."""
    return variable_of(Settings, field)


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
