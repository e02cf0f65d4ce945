"""The migrations build exactly the schema the models describe, on PostgreSQL and on SQLite."""

from __future__ import annotations

import subprocess
import sys

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from app.migrate import downgrade, upgrade
from app.models import Base

EXPECTED_TABLES = {
    "alembic_version",
    "api_keys",
    "budgets",
    "compactions",
    "conversations",
    "events",
    "messages",
    "tool_catalog",
    "tool_outputs",
    "turns",
    "webhook_deliveries",
    "webhooks",
}


@pytest.fixture(params=["postgresql", "sqlite"])
def blank_url(request: pytest.FixtureRequest) -> str:
    fixture = "empty_database_url" if request.param == "postgresql" else "sqlite_url"
    return str(request.getfixturevalue(fixture))


def schema_diff(url: str) -> list[object]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            return list(compare_metadata(context, Base.metadata))
    finally:
        engine.dispose()


def table_names(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_migrations_at_head_equal_the_models(blank_url: str) -> None:
    upgrade(blank_url)
    assert schema_diff(blank_url) == []


def test_upgrade_downgrade_upgrade_round_trip(blank_url: str) -> None:
    upgrade(blank_url)
    downgrade(blank_url, "base")
    assert table_names(blank_url) == {"alembic_version"}
    upgrade(blank_url)
    assert table_names(blank_url) == EXPECTED_TABLES
    assert schema_diff(blank_url) == []


def test_upgrade_twice_is_a_no_op(blank_url: str) -> None:
    upgrade(blank_url)
    upgrade(blank_url)
    assert schema_diff(blank_url) == []


def test_janitor_index_is_partial_on_running_statuses(empty_database_url: str) -> None:
    upgrade(empty_database_url)
    engine = create_engine(empty_database_url)
    try:
        with engine.connect() as connection:
            definition = connection.exec_driver_sql(
                "SELECT indexdef FROM pg_indexes"
                " WHERE indexname = 'ix_conversations_running_heartbeat'"
            ).scalar_one()
    finally:
        engine.dispose()
    assert "(heartbeat_at)" in definition
    assert "WHERE" in definition and "processing" in definition and "tool_loop" in definition


def test_chatworker_migrate_command_upgrades_the_configured_database(sqlite_url: str) -> None:
    env = {"DATABASE_URL": sqlite_url, "PATH": "/usr/bin:/bin"}
    command = [sys.executable, "-m", "app.cli", "migrate"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "at revision head" in result.stdout
    assert table_names(sqlite_url) == EXPECTED_TABLES
