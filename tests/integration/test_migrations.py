"""The migrations build exactly the schema the models describe, on PostgreSQL and on SQLite."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import CheckConstraint, create_engine, inspect, text
from sqlalchemy.exc import IntegrityError

from app.migrate import downgrade, upgrade
from app.models import Base

EXPECTED_TABLES = {
    "alembic_version",
    "api_keys",
    "audit_log",
    "budgets",
    "compactions",
    "conversations",
    "events",
    "file_names",
    "file_uses",
    "files",
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


def closed_sets(url: str) -> dict[str, set[str]]:
    """Each CHECK of a closed set at head ("ck_events_type" -> its words), read from the
    database (compare_metadata does not compare CHECKs)."""
    engine = create_engine(url)
    try:
        found = inspect(engine)
        return {
            str(check["name"]): set(re.findall(r"'([^']*)'", check["sqltext"]))
            for table in found.get_table_names()
            for check in found.get_check_constraints(table)
            if " IN " in check["sqltext"].upper() or "ANY" in check["sqltext"].upper()
        }
    finally:
        engine.dispose()


def test_migrations_at_head_check_the_models_closed_sets(blank_url: str) -> None:
    upgrade(blank_url)
    expected = {
        str(constraint.name): set(re.findall(r"'([^']*)'", str(constraint.sqltext)))
        for table in Base.metadata.sorted_tables
        for constraint in table.constraints
        if isinstance(constraint, CheckConstraint) and " IN (" in str(constraint.sqltext)
    }
    assert "ck_events_type" in expected and "ck_turns_status" in expected
    at_head = closed_sets(blank_url)
    assert {name: at_head.get(name) for name in expected} == expected


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


def test_existing_conversations_become_a_single_active_path_with_nothing_lost(
    blank_url: str,
) -> None:
    """Migration 0019 on a database with a conversation: each message's parent is the one
    before it, every message is active, the session cache's outputs stay (SQLite adds the
    columns in place: copying `messages` would have dropped them through its foreign key)."""
    upgrade(blank_url, "0018")
    engine = create_engine(blank_url)
    conversation = uuid.uuid4()
    turn = uuid.uuid4()
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO conversations (id, status, model, allowed_tools)"
                    " VALUES (:id, 'idle', 'm', '[]')"
                ),
                {"id": conversation.hex if "sqlite" in blank_url else conversation},
            )
            for seq, role, call in ((1, "user", None), (2, "assistant", None), (3, "tool", "c1")):
                connection.execute(
                    text(
                        "INSERT INTO messages (conversation_id, seq, role, content,"
                        " tool_call_id, tool_name, is_error) VALUES (:c, :seq, :role, 'x',"
                        " :call, :tool, false)"
                    ),
                    {
                        "c": conversation.hex if "sqlite" in blank_url else conversation,
                        "seq": seq,
                        "role": role,
                        "call": call,
                        "tool": "add" if call else None,
                    },
                )
            connection.execute(
                text(
                    "INSERT INTO tool_outputs (conversation_id, call_id, turn_id, seq, tool,"
                    " arguments, content, chars, is_error, created_at) VALUES (:c, 'c1', :t, 3,"
                    " 'add', '{}', 'x', 1, false, CURRENT_TIMESTAMP)"
                ),
                {
                    "c": conversation.hex if "sqlite" in blank_url else conversation,
                    "t": turn.hex if "sqlite" in blank_url else turn,
                },
            )
        upgrade(blank_url)
        with engine.connect() as connection:
            rows = connection.execute(
                text("SELECT seq, parent_seq, active FROM messages ORDER BY seq")
            ).all()
            kept = connection.execute(text("SELECT count(*) FROM tool_outputs")).scalar_one()
    finally:
        engine.dispose()
    assert [(seq, parent, bool(active)) for seq, parent, active in rows] == [
        (1, None, True),
        (2, 1, True),
        (3, 2, True),
    ]
    assert kept == 1


def test_turns_in_flight_keep_their_rows_and_a_forced_tool_needs_required(
    blank_url: str,
) -> None:
    """Migration 0026 on a database with a turn running: the turn reads back with no echo, the
    conversation forces no tool; from then on a forced tool comes only with `required`."""
    upgrade(blank_url, "0025")
    engine = create_engine(blank_url)
    sqlite = "sqlite" in blank_url
    conversation, turn = uuid.uuid4(), uuid.uuid4()
    ids = {"c": conversation.hex if sqlite else conversation, "t": turn.hex if sqlite else turn}
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO conversations (id, status, model, allowed_tools, tool_choice,"
                    " turn_number, turn_count) VALUES (:c, 'processing', 'm', '[]', 'required',"
                    " 1, 1)"
                ),
                ids,
            )
            connection.execute(
                text(
                    "INSERT INTO turns (id, conversation_id, number, status)"
                    " VALUES (:t, :c, 1, 'running')"
                ),
                ids,
            )
        upgrade(blank_url)
        with engine.begin() as connection:
            row = connection.execute(
                text(
                    "SELECT t.status, t.echo, c.tool_choice, c.forced_tool FROM turns t"
                    " JOIN conversations c ON c.id = t.conversation_id"
                )
            ).one()
            assert tuple(row) == ("running", None, "required", None)
            connection.execute(
                text("UPDATE conversations SET forced_tool = 'add' WHERE id = :c"), ids
            )
        with pytest.raises(IntegrityError), engine.begin() as connection:
            connection.execute(
                text("UPDATE conversations SET tool_choice = 'auto' WHERE id = :c"), ids
            )
        downgrade(blank_url, "0025")
        with engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM turns")).scalar_one() == 1
    finally:
        engine.dispose()
