"""Shared fixtures: real PostgreSQL and Redis (see app/testing/services.py), isolated per test.

Each test that asks for `database_url` gets its own database cloned from a migrated template
(~20 ms); `redis_url` is a logical Redis database claimed for the session and flushed around each
test. Under CI=true a skipped integration test is reported as a failure.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine, text
from xdist.remote import Producer
from xdist.scheduler import Scheduling

from app.db import make_engine
from app.migrate import upgrade
from app.models import Base
from app.testing import services
from app.testing.fake_llm import FakeLLMServer
from app.testing.zygote import ENABLE_ENV as ZYGOTE_ENV
from tests import scheduling
from tests.database_pool import DatabasePool
from tests.invariants import violations_after_test

# The worker and API processes tests start are forked from one warm process per test runner
# (`app/testing/zygote.py`): a real process each, without paying ~8 s of CPU to import litellm
# again. CHATWORKER_TEST_ZYGOTE=0 starts each from a new interpreter instead.
os.environ.setdefault(ZYGOTE_ENV, "1")
# The suite's webhook receivers listen on loopback, which the egress policy refuses by default
# (`app/egress.py`); the tests of that refusal set the networks themselves.
LOOPBACK_NETWORKS = "127.0.0.0/8,::1/128"
os.environ.setdefault("CHATWORKER_WEBHOOK_ALLOWED_NETWORKS", LOOPBACK_NETWORKS)

INTEGRATION_FIXTURES = {"postgres_server", "redis_server"}
# Every test of these directories needs a service (PostgreSQL, Redis, an MCP server, the fake
# model's HTTP server, a browser): a skip there is a hole in the net, whatever its fixtures say.
INTEGRATION_DIRS = {"integration", "api", "crash"}


@pytest.hookimpl(trylast=True)  # after pytest's own ordering by fixture scope
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _in_integration_dir(item) or INTEGRATION_FIXTURES & _all_fixtures(item):
            item.add_marker(pytest.mark.integration)
    scheduling.slowest_first(items)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> Scheduling | None:
    """`--dist loadgroup` hands out the slowest units first (tests/scheduling.py)."""
    if config.getvalue("dist") == "loadgroup":
        return scheduling.SlowestFirst(config, log)
    return None


def _in_integration_dir(node: pytest.Item | pytest.Collector) -> bool:
    try:
        parts = node.path.relative_to(node.config.rootpath).parts[:-1]
    except ValueError:
        return False
    return bool(INTEGRATION_DIRS & set(parts))


def _all_fixtures(item: pytest.Item) -> set[str]:
    info = getattr(item, "_fixtureinfo", None)
    return set(info.names_closure) if info is not None else set()


def _under_ci() -> bool:
    return os.environ.get("CI") == "true"


def _reason(longrepr: object) -> object:
    return longrepr[2] if isinstance(longrepr, tuple) else longrepr


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    report = yield
    if _under_ci() and report.skipped and "integration" in item.keywords:
        report.outcome = "failed"
        report.longrepr = (
            f"integration test skipped under CI=true (not allowed): {_reason(report.longrepr)}"
        )
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> object:
    """A module skipped while collected (`importorskip`, a module-level skip) has no test to
    report, so the hook above never sees it: under CI it is a collection error instead."""
    report = yield
    if _under_ci() and report.skipped and _in_integration_dir(collector):
        report.outcome = "failed"
        report.longrepr = (
            "integration module skipped while collected under CI=true (not allowed): "
            f"{_reason(report.longrepr)}"
        )
    return report


def _service_or_exit(provide: object) -> services.Service:
    try:
        return provide()  # type: ignore[operator,no-any-return]
    except services.ServiceUnavailable as exc:
        pytest.exit(str(exc), returncode=3)


# --- PostgreSQL ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """Admin URL of a PostgreSQL server the tests may create databases on."""
    service = _service_or_exit(services.provide_postgres)
    _drop_leftovers(service.url)
    yield service.url
    service.stop()


def _drop_leftovers(server_url: str) -> None:
    """Drop throwaway databases of earlier runs whose process is gone (a killed test run)."""
    with psycopg.connect(services.libpq_dsn(server_url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (services.PREFIX + "%",)
        ).fetchall()
    for (name,) in rows:
        pid = name.split("_")[-2]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            services.drop_database(server_url, name)


@pytest.fixture(scope="session")
def migrated_template(postgres_server: str) -> Iterator[str]:
    """A database migrated to head, cloned by every test that needs a schema."""
    name = services.unique_name("template")
    url = services.create_database(postgres_server, name)
    upgrade(url)
    yield name
    services.drop_database(postgres_server, name)


@pytest.fixture(scope="session")
def database_pool(postgres_server: str, migrated_template: str) -> Iterator[DatabasePool]:
    """Clones of the template, emptied and reused within this test process
    (`tests/database_pool.py`)."""
    pool = DatabasePool(postgres_server, migrated_template)
    yield pool
    pool.close()


@pytest.fixture
def database_url(database_pool: DatabasePool, request: pytest.FixtureRequest) -> Iterator[str]:
    """A PostgreSQL database at the head migration, empty, for this test only.

    After the test, the structural invariants (tests/invariants.py) must hold in it, unless the
    test is marked `raw_rows` (it writes rows by hand to test the constraints themselves).
    """
    url = database_pool.take()
    yield url
    try:
        _check_invariants(url, request)
    finally:
        database_pool.give_back(url)


def _check_invariants(url: str, request: pytest.FixtureRequest) -> None:
    """The strong check when the test left everything at rest (tests/invariants.py), with the
    test's own MCP servers (their environment names its tmp_path) looked for as orphans."""
    if request.node.get_closest_marker("raw_rows") is not None:
        return
    tmp_path = request.node.funcargs.get("tmp_path") if "tmp_path" in request.fixturenames else None
    problems = violations_after_test(url, mcp_marker=None if tmp_path is None else str(tmp_path))
    if problems:
        pytest.fail("invariants violated after the test:\n  " + "\n  ".join(problems))


@pytest.fixture
def empty_database_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database, for migration tests."""
    name = services.unique_name("empty")
    url = services.create_database(postgres_server, name)
    yield url
    services.drop_database(postgres_server, name)


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh, empty SQLite database file for this test."""
    return f"sqlite:///{tmp_path / 'chatworker.db'}"


@pytest.fixture(scope="session")
def migrated_sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to head once per test process, copied by every test that needs a
    schema (as `migrated_template` is cloned on PostgreSQL)."""
    path = tmp_path_factory.mktemp("sqlite-template") / "chatworker.db"
    upgrade(f"sqlite:///{path}")
    return path


def _copy_sqlite(source: Path, target: Path) -> None:
    """SQLite's own online backup: the whole database, whatever its journal holds."""
    with (
        contextlib.closing(sqlite3.connect(source)) as read,
        contextlib.closing(sqlite3.connect(target)) as write,
    ):
        read.backup(write)


@pytest.fixture(params=["postgresql", "sqlite"])
def any_database_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh database at the head migration, once on PostgreSQL and once on SQLite.

    The invariants are checked after the test on both: a SQLite database's rows are copied into
    a clone of the PostgreSQL template first, so one set of checks (in SQL) serves both.
    """
    if request.param == "postgresql":
        yield str(request.getfixturevalue("database_url"))
        return
    pool: DatabasePool = request.getfixturevalue("database_pool")
    url = str(request.getfixturevalue("sqlite_url"))
    _copy_sqlite(request.getfixturevalue("migrated_sqlite_template"), Path(url.split("///", 1)[1]))
    yield url
    copy = pool.take()
    try:
        copy_rows(url, copy)
        _check_invariants(copy, request)
    finally:
        pool.give_back(copy)


def copy_rows(source_url: str, target_url: str) -> None:
    """Every row of the models' tables, as they are: no trigger fires and no foreign key is
    checked while copying (the checks are there to judge them, not to refuse them)."""
    source, target = make_engine(source_url), make_engine(target_url, pool_size=1)
    try:
        with source.connect() as read, target.begin() as write:
            write.execute(text("SET LOCAL session_replication_role = replica"))
            for table in Base.metadata.sorted_tables:
                rows = [row._asdict() for row in read.execute(table.select())]
                if rows:
                    write.execute(table.insert(), rows)
    finally:
        source.dispose()
        target.dispose()


# --- Redis --------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    service = _service_or_exit(services.provide_redis)
    with services.claimed_redis_db(service.url) as url:
        yield url
    service.stop()


@pytest.fixture
def redis_url(redis_server: str) -> Iterator[str]:
    """A logical Redis database that is empty at the start and the end of this test."""
    services.flush_redis(redis_server)
    yield redis_server
    services.flush_redis(redis_server)


# --- the fake LLM server --------------------------------------------------------------------------


@pytest.fixture(scope="session")
def fake_llm_server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def fake_llm(fake_llm_server: FakeLLMServer) -> FakeLLMServer:
    """The session's fake OpenAI-compatible server, with no script and no recorded requests."""
    fake_llm_server.reset()
    return fake_llm_server
