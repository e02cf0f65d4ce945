"""Settings: defaults that run anywhere, and every bad value named by its variable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.config import (
    DEFAULT_DATABASE_URL,
    DEMO_MODEL,
    Settings,
    env_name,
    load_settings,
    parse_mcp_servers,
)
from app.errors import ConfigError

ALL_VARIABLES = [env_name(field) for field in Settings.model_fields]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for variable in ALL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.chdir(tmp_path)  # no stray .env


def test_defaults_need_no_environment() -> None:
    settings = load_settings()
    assert settings.database_url == DEFAULT_DATABASE_URL
    assert settings.is_sqlite
    assert settings.redis_url is None
    assert settings.model == DEMO_MODEL
    assert settings.max_iterations == 20
    assert settings.stale_after_seconds == 300
    assert settings.heartbeat_seconds < settings.lease_ttl_seconds
    assert settings.mcp_servers == ()


def test_variable_names() -> None:
    assert env_name("database_url") == "DATABASE_URL"
    assert env_name("redis_url") == "REDIS_URL"
    assert env_name("max_iterations") == "CHATWORKER_MAX_ITERATIONS"
    assert env_name("mcp_servers") == "CHATWORKER_MCP_SERVERS"


def test_environment_overrides_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql+psycopg://u:p@db:5432/chat")
    monkeypatch.setenv("REDIS_URL", "redis://cache:6379/2")
    monkeypatch.setenv("CHATWORKER_MODEL", "openai/gpt-4o-mini")
    monkeypatch.setenv("CHATWORKER_MAX_ITERATIONS", "5")
    monkeypatch.setenv("CHATWORKER_TOOL_TIMEOUT_SECONDS", "2.5")
    settings = load_settings()
    assert settings.database_url == "postgresql+psycopg://u:p@db:5432/chat"
    assert settings.redis_url == "redis://cache:6379/2"
    assert settings.model == "openai/gpt-4o-mini"
    assert settings.max_iterations == 5
    assert settings.tool_timeout_seconds == 2.5


def test_dotenv_file_in_working_directory_is_read(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("CHATWORKER_MAX_ITERATIONS=7\n")
    assert load_settings().max_iterations == 7


@pytest.mark.parametrize("url", ["postgres://u@h/db", "postgresql://u@h/db"])
def test_plain_postgres_urls_get_the_psycopg_driver(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.setenv("DATABASE_URL", url)
    assert load_settings().database_url == "postgresql+psycopg://u@h/db"


def test_empty_redis_url_means_in_process_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "")
    assert load_settings().redis_url is None


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("DATABASE_URL", "mysql://u@h/db", "must start with"),
        ("REDIS_URL", "http://cache:6379", "must start with redis://"),
        ("CHATWORKER_MAX_ITERATIONS", "many", "valid integer"),
        ("CHATWORKER_MAX_ITERATIONS", "0", "greater than or equal to 1"),
        ("CHATWORKER_LLM_TIMEOUT_SECONDS", "-1", "greater than 0"),
        ("CHATWORKER_MAX_MESSAGE_CHARS", "0", "greater than or equal to 1"),
        ("CHATWORKER_MCP_SERVERS", "{not json", "invalid JSON"),
        ("CHATWORKER_MCP_SERVERS", '{"servers": {}}', "mcpServers"),
        ("CHATWORKER_MCP_SERVERS", '{"mcpServers": {"a": {}}}', "exactly one of"),
        ("CHATWORKER_MCP_SERVERS", "/no/such/file.json", "cannot read MCP servers file"),
        ("CHATWORKER_API_RATE_LIMIT", "lots", "must be N/second, N/minute or N/hour"),
        ("CHATWORKER_API_RATE_LIMIT", "0/minute", "must be N/second, N/minute or N/hour"),
        ("CHATWORKER_API_RATE_LIMIT", "5/day", "must be N/second, N/minute or N/hour"),
        ("CHATWORKER_OWNER_MAX_RUNNING_TURNS", "0", "greater than or equal to 1"),
        ("CHATWORKER_OWNER_LIMIT_POLICY", "drop", "'queue' or 'reject'"),
        ("CHATWORKER_WEBHOOK_RETRY_SCHEDULE", "5,soon", "seconds separated by commas"),
        ("CHATWORKER_WEBHOOK_RETRY_SCHEDULE", "5,-1", "cannot be negative"),
        ("CHATWORKER_WEBHOOK_TIMEOUT_SECONDS", "0", "greater than 0"),
    ],
)
def test_invalid_value_fails_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as error:
        load_settings()
    assert f"{variable}: " in str(error.value)
    assert message in str(error.value)


def test_heartbeat_must_be_shorter_than_the_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATWORKER_LEASE_TTL_SECONDS", "10")
    monkeypatch.setenv("CHATWORKER_HEARTBEAT_SECONDS", "10")
    with pytest.raises(ConfigError) as error:
        load_settings()
    assert "CHATWORKER_HEARTBEAT_SECONDS" in str(error.value)
    assert "CHATWORKER_LEASE_TTL_SECONDS" in str(error.value)


def test_every_bad_variable_is_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "mysql://x")
    monkeypatch.setenv("CHATWORKER_MAX_ITERATIONS", "x")
    with pytest.raises(ConfigError) as error:
        load_settings()
    assert "DATABASE_URL" in str(error.value)
    assert "CHATWORKER_MAX_ITERATIONS" in str(error.value)


MCP_DOCUMENT = {
    "mcpServers": {
        "tools": {"command": "python", "args": ["-m", "tools"], "env": {"TOKEN": "${MY_TOKEN}"}},
        "remote": {"url": "https://mcp.example.test/mcp", "headers": {"X-Key": "k-${MY_TOKEN}"}},
        "off": {"command": "never-started", "disabled": True},
    }
}


def test_mcp_servers_from_inline_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_TOKEN", "t0k")
    monkeypatch.setenv("CHATWORKER_MCP_SERVERS", json.dumps(MCP_DOCUMENT))
    servers = load_settings().mcp_servers
    assert [s.name for s in servers] == ["tools", "remote"]
    tools, remote = servers
    assert tools.command == "python" and tools.args == ("-m", "tools")
    assert tools.env == {"TOKEN": "t0k"} and not tools.is_remote
    assert remote.is_remote and remote.headers == {"X-Key": "k-t0k"}


def test_mcp_servers_from_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"one": {"command": "x"}}}))
    monkeypatch.setenv("CHATWORKER_MCP_SERVERS", str(path))
    assert [s.name for s in load_settings().mcp_servers] == ["one"]


def test_mcp_env_reference_to_an_unset_variable_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"\$\{MISSING\}, which is not set"):
        parse_mcp_servers(json.dumps(MCP_DOCUMENT).replace("MY_TOKEN", "MISSING"), environ={})


@pytest.mark.parametrize(
    "entry",
    [
        {"command": "x", "url": "http://h/mcp"},
        {"url": "ftp://h/mcp"},
        {"command": "x", "args": "not-a-list"},
        {"command": "x", "approval": "sometimes"},
        {"command": "x", "tool_approval": {"t": "maybe"}},
    ],
)
def test_bad_mcp_server_entries_are_rejected(entry: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        parse_mcp_servers(json.dumps({"mcpServers": {"s": entry}}))


def test_bad_mcp_server_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="server name"):
        parse_mcp_servers(json.dumps({"mcpServers": {"has space": {"command": "x"}}}))


def test_the_api_auth_mode_is_api_keys_unless_set() -> None:
    assert load_settings().api_auth == ("api_key",)
    assert load_settings(api_auth="none").api_auth == ("none",)
    both = load_settings(api_auth=" api_key , jwt ", jwt_secret="s" * 32)
    assert both.api_auth == ("api_key", "jwt")


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"api_auth": ""}, "CHATWORKER_API_AUTH: name at least one mode"),
        ({"api_auth": "basic"}, "CHATWORKER_API_AUTH: unknown mode 'basic'"),
        ({"api_auth": "none,api_key"}, "'none' cannot be combined"),
        ({"api_auth": "jwt"}, "CHATWORKER_JWT_SECRET must be set"),
        ({"api_auth": "jwt", "jwt_secret": "short"}, "at least 32 bytes"),
        ({"api_max_streams": 0}, "CHATWORKER_API_MAX_STREAMS"),
        (
            {"webhook_timeout_seconds": 30, "webhook_lease_seconds": 20},
            "CHATWORKER_WEBHOOK_LEASE_SECONDS (20.0) must be longer than",
        ),
    ],
)
def test_bad_api_settings_name_the_variable(overrides: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(**overrides)
    assert says in str(refused.value)


def test_cors_origins_are_a_comma_list() -> None:
    settings = load_settings(cors_origins="https://app.example.com, http://localhost:3000")
    assert settings.cors_origins == ("https://app.example.com", "http://localhost:3000")
    assert load_settings().cors_origins == ()


def test_an_mcp_server_s_approval_policy_defaults_to_destructive_and_a_tool_s_wins() -> None:
    entry = {"command": "x", "approval": "never", "tool_approval": {"pay": "always"}}
    (server,) = parse_mcp_servers(json.dumps({"mcpServers": {"s": entry}}))
    assert (server.approval_of("pay"), server.approval_of("read")) == ("always", "never")
    (plain,) = parse_mcp_servers(json.dumps({"mcpServers": {"s": {"command": "x"}}}))
    assert plain.approval_of("anything") == "destructive"
