"""The one settings object, in named sections, read from the environment (and a `.env` file).

`load_settings()` is the only entry point; `python -m app.config.readme` writes the tables of
docs/SETTINGS.md.
"""

from app.config.api_settings import (
    API_KEY_AUTH,
    AUTH_MODES,
    JWT_AUTH,
    NO_AUTH,
    RATE_PERIODS,
    parse_rate,
)
from app.config.database_settings import DEFAULT_DATABASE_URL
from app.config.mcp_servers import ApprovalPolicy, McpServerConfig, parse_mcp_servers
from app.config.model_settings import DEMO_MODEL
from app.config.section import ENV_PREFIX
from app.config.settings import SECTIONS, Settings, env_name, get_settings, load_settings

__all__ = [
    "API_KEY_AUTH",
    "AUTH_MODES",
    "DEFAULT_DATABASE_URL",
    "DEMO_MODEL",
    "ENV_PREFIX",
    "JWT_AUTH",
    "NO_AUTH",
    "RATE_PERIODS",
    "SECTIONS",
    "ApprovalPolicy",
    "McpServerConfig",
    "Settings",
    "env_name",
    "get_settings",
    "load_settings",
    "parse_mcp_servers",
    "parse_rate",
]
