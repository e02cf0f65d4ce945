"""Upgrading from the previous release corrupts nothing: its worker and API (its own code, from
git) run against this release's schema, in docs/OPERATIONS.md's order, with turns in flight
(`tests/upgrade.py`); and every migration since that release only expands its schema."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, inspect

from app.migrate import upgrade
from app.testing.fake_llm import FakeLLMServer
from tests.upgrade import PREVIOUS_REVISION, Plan, Upgrade


def test_an_upgrade_with_turns_in_flight_keeps_every_tree_and_transcript(
    empty_database_url: str, redis_url: str, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    report = Upgrade(empty_database_url, redis_url, fake_llm, tmp_path, Plan()).run()
    print("\n" + report.table())
    assert report.problems == [], "\n".join(report.problems) + "\n" + report.table()
    assert sum(len(turns) for turns in report.accepted.values()) >= 4 * Plan().conversations


def columns(url: str) -> dict[str, dict[str, tuple[bool, object]]]:
    """Each table's columns: whether NULL is allowed, and the server's default."""
    engine = create_engine(url)
    try:
        found = inspect(engine)
        return {
            table: {c["name"]: (c["nullable"], c.get("default")) for c in found.get_columns(table)}
            for table in found.get_table_names()
        }
    finally:
        engine.dispose()


def test_every_migration_since_the_previous_release_only_expands(
    empty_database_url: str,
) -> None:
    """What the previous release writes stays valid: every table and column it knows is still
    there and takes NULL wherever it did, and a column added to one of its tables takes NULL or
    has a default (it never names it). Tightening waits for the release after."""
    upgrade(empty_database_url, PREVIOUS_REVISION)
    before = columns(empty_database_url)
    upgrade(empty_database_url)
    after = columns(empty_database_url)
    problems = []
    for table, known in before.items():
        now = after.get(table)
        if now is None:
            problems.append(f"{table} was dropped")
            continue
        for name, (nullable, _default) in known.items():
            if name not in now:
                problems.append(f"{table}.{name} was dropped")
            elif nullable and not now[name][0]:
                problems.append(f"{table}.{name} no longer takes NULL")
        for name, (nullable, default) in now.items():
            if name not in known and not nullable and default is None:
                problems.append(f"{table}.{name} is new, NOT NULL and has no default")
    assert problems == []
