"""The migrations are frozen history: each holds its CHECK lists as literals and imports neither
another migration nor `app` (whose vocabulary moves on), and the latest list of each set equals
`app.vocabulary`'s, so a new word without its migration fails here."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from app import vocabulary

VERSIONS = Path(__file__).parents[2] / "migrations" / "versions"
MIGRATIONS = sorted(VERSIONS.glob("[0-9][0-9][0-9][0-9]_*.py"))
ALLOWED = ("__future__", "alembic", "sqlalchemy")  # beside the standard library


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"migration_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_migration_imports_another_or_the_app() -> None:
    crossings = {
        (path.name, name)
        for path in MIGRATIONS
        for name in imported(path)
        if name.split(".")[0] not in ALLOWED
        and (name.split(".")[0] not in sys.stdlib_module_names or name.startswith("importlib"))
    }
    assert sorted(crossings) == []
    assert not any("spec_from_file_location" in path.read_text() for path in MIGRATIONS)


def test_the_latest_check_lists_equal_the_vocabulary() -> None:
    sets = {name: value for name, value in vars(vocabulary).items() if isinstance(value, tuple)}
    latest: dict[str, tuple[str, ...]] = {}
    for path in MIGRATIONS:  # in revision order: a later list replaces an earlier one
        module = load(path)
        for name in sets:
            value = getattr(module, name, None)
            if isinstance(value, tuple):
                latest[name] = value
    assert {"EVENT_TYPES", "TURN_KINDS"} <= set(latest)
    assert {name: latest[name] for name in latest} == {name: sets[name] for name in latest}
