"""Upgrading from the previous release corrupts nothing: its worker and API (its own code, from
git) run against this release's schema, in docs/OPERATIONS.md's order, with turns in flight
(`tests/upgrade.py`); and every migration since that release only expands its schema."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from app.migrate import upgrade
from app.testing.fake_llm import FakeLLMServer
from tests.upgrade import PREVIOUS_REVISION, Plan, Upgrade


@pytest.mark.slow
def test_an_upgrade_with_turns_in_flight_keeps_every_tree_and_transcript(
    empty_database_url: str, redis_url: str, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    report = Upgrade(empty_database_url, redis_url, fake_llm, tmp_path, Plan()).run()
    print("\n" + report.table())
    assert report.problems == [], "\n".join(report.problems) + "\n" + report.table()
    assert sum(len(turns) for turns in report.accepted.values()) >= 4 * Plan().conversations


LITERAL = re.compile(r"'((?:[^']|'')*)'(?:::[a-z ]+)?")


@dataclass(frozen=True)
class Shape:
    """What the previous release's writes meet in a table: its columns (whether NULL is allowed,
    the server's default) and its CHECK constraints' texts, by name."""

    columns: dict[str, tuple[bool, object]]
    checks: dict[str, str]


def shapes(url: str) -> dict[str, Shape]:
    engine = create_engine(url)
    try:
        found = inspect(engine)
        return {
            table: Shape(
                {c["name"]: (c["nullable"], c.get("default")) for c in found.get_columns(table)},
                {c["name"]: c["sqltext"] for c in found.get_check_constraints(table)},
            )
            for table in found.get_table_names()
        }
    finally:
        engine.dispose()


def only_grew(before: str, after: str) -> bool:
    """A CHECK whose closed set of literals grew and is otherwise the same (`x IN (...)`)."""
    values_before, values_after = set(LITERAL.findall(before)), set(LITERAL.findall(after))

    def skeleton(text: str) -> str:
        return re.sub(r"'\?'(, '\?')*", "'?'", LITERAL.sub("'?'", text))

    return values_before < values_after and skeleton(before) == skeleton(after)


def test_every_migration_since_the_previous_release_only_expands(
    empty_database_url: str,
) -> None:
    """What the previous release writes stays valid: every table and column it knows is still
    there and takes NULL wherever it did; a column added to one of its tables takes NULL or has
    a default (it never names it); a CHECK it met is gone or only lets more through (a closed
    set grew), and a new CHECK on its tables constrains new columns. Tightening waits for the
    release after."""
    upgrade(empty_database_url, PREVIOUS_REVISION)
    before = shapes(empty_database_url)
    upgrade(empty_database_url)
    after = shapes(empty_database_url)
    problems = []
    for table, known in before.items():
        now = after.get(table)
        if now is None:
            problems.append(f"{table} was dropped")
            continue
        for name, (nullable, _default) in known.columns.items():
            if name not in now.columns:
                problems.append(f"{table}.{name} was dropped")
            elif nullable and not now.columns[name][0]:
                problems.append(f"{table}.{name} no longer takes NULL")
        added = set(now.columns) - set(known.columns)
        for name in added:
            nullable, default = now.columns[name]
            if not nullable and default is None:
                problems.append(f"{table}.{name} is new, NOT NULL and has no default")
        for name, text in now.checks.items():
            if name not in known.checks:
                if not any(re.search(rf"\b{column}\b", text) for column in added):
                    problems.append(f"{table}: the new CHECK {name} constrains old columns only")
            elif text != known.checks[name] and not only_grew(known.checks[name], text):
                problems.append(f"{table}: the CHECK {name} changed: {text}")
    assert problems == [], "\n".join(problems)
