"""The test harness itself: where services come from, isolation, and how it fails.

Meta-tests run pytest in a subprocess so the real fixtures, hooks and exit paths are exercised.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
import redis
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from app.client import ChatClient
from app.config import load_settings
from app.testing import services
from app.testing.services import libpq_dsn
from tests.database_pool import TABLES, DatabasePool
from tests.invariants import violations

REPO = Path(__file__).resolve().parents[2]
PROBE = "CHATWORKER_HARNESS_PROBE"


def run_pytest(*args: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result, time.monotonic() - started


def environment_without_services() -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in (services.ENV_DATABASE, services.ENV_REDIS)
    }
    env["DOCKER_HOST"] = "unix:///nonexistent/docker.sock"
    env["CHATWORKER_TEST_LOCAL_POSTGRES"] = "postgresql+psycopg://postgres@127.0.0.1:1/postgres"
    env["CHATWORKER_TEST_LOCAL_REDIS"] = "redis://127.0.0.1:1/0"
    return env


def test_without_any_service_the_run_stops_in_seconds_saying_what_to_set() -> None:
    result, elapsed = run_pytest(
        "tests/integration/test_constraints.py", env=environment_without_services()
    )
    output = result.stdout + result.stderr
    assert result.returncode == 3, output
    assert services.ENV_DATABASE in output and services.ENV_REDIS in output
    assert "Docker engine" in output and "127.0.0.1:5432" in output
    assert elapsed < 30, f"took {elapsed:.1f} s to give up"


def test_an_unreachable_explicit_url_is_reported_not_ignored() -> None:
    env = environment_without_services()
    env[services.ENV_DATABASE] = "postgresql+psycopg://postgres@127.0.0.1:1/postgres"
    result, _ = run_pytest("tests/integration/test_constraints.py", env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 3, output
    assert f"{services.ENV_DATABASE} is set but nothing answers" in output


def test_probe_integration_test(redis_url: str) -> None:
    """Passes normally; skips when the meta-test below asks it to."""
    if os.environ.get(PROBE) == "skip":
        pytest.skip("asked to skip by the harness meta-test")


@pytest.mark.parametrize(("ci", "outcome"), [("true", "1 failed"), ("", "1 skipped")])
def test_a_skipped_integration_test_fails_under_ci(ci: str, outcome: str) -> None:
    env = {**os.environ, PROBE: "skip", "CI": ci}
    result, _ = run_pytest(
        "tests/integration/test_harness.py::test_probe_integration_test", env=env
    )
    output = result.stdout + result.stderr
    assert outcome in output, output
    if ci:
        assert "integration test skipped under CI=true" in output


SYNTHETIC_SUITE = {
    "pytest.ini": "[pytest]\nmarkers = integration\n",
    "conftest.py": "from tests.conftest import (pytest_collection_modifyitems,"
    " pytest_make_collect_report, pytest_runtest_makereport)\n",
    "integration/test_plain.py": "import pytest\n\ndef test_skips():\n    pytest.skip('no')\n",
    "api/test_gone.py": "import pytest\n\npytest.importorskip('no_such_module_anywhere')\n"
    "\ndef test_never_collected():\n    pass\n",
    "unit/test_optional.py": "import pytest\n\ndef test_skips_freely():\n    pytest.skip('no')\n",
}


RUN_IN_PLACE = ("-p", "no:cacheprovider", "-p", "no:xdist", "-rA")


@pytest.mark.parametrize("ci", ["true", ""])
def test_under_ci_a_skip_in_an_integration_directory_fails_even_while_collecting(
    ci: str, tmp_path: Path
) -> None:
    """No service fixture in sight: the directory alone makes a test an integration test, and
    an `importorskip` that skips the whole module is caught too. A unit test may still skip."""
    for name, source in SYNTHETIC_SUITE.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(source)
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *RUN_IN_PLACE, "--continue-on-collection-errors"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    summary = output.strip().splitlines()[-1]
    if ci:
        assert result.returncode == 1, output
        assert "1 failed, 1 skipped, 1 error" in summary, output
        assert "integration test skipped under CI=true (not allowed): Skipped: no" in output
        assert "integration module skipped while collected under CI=true" in output
        assert "no_such_module_anywhere" in output
    else:
        assert result.returncode == 0, output
        assert "3 skipped" in summary, output


def test_each_test_gets_its_own_migrated_database(engine: Engine, migrated_template: str) -> None:
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM conversations")).scalar() == 0
        name = connection.execute(text("SELECT current_database()")).scalar()
    assert name != migrated_template
    assert str(name).startswith(services.PREFIX)


def test_a_database_given_back_is_taken_again_empty_with_its_sequences_restarted(
    postgres_server: str, migrated_template: str
) -> None:
    """The pool's reset (deletes, not TRUNCATE): a database a test filled comes back to the next
    one with no row in any table and ids counting from 1 again; one whose schema a test changed
    is dropped instead of reused."""
    pool = DatabasePool(postgres_server, migrated_template)
    try:
        url = pool.take()
        client = ChatClient(load_settings(database_url=url, redis_url=None), enqueue=lambda _: None)
        for _ in range(3):
            conversation_id = client.create_conversation()
            client.submit_message(conversation_id, "hello")
        client.engine.dispose()
        pool.give_back(url)
        assert pool.take() == url  # the same database, reused
        with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
            tables = [row[0] for row in conn.execute(TABLES).fetchall()]
            counts = {
                table: conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]  # type: ignore[index]
                for table in tables
            }
            assert set(counts.values()) == {0}, counts
            conn.execute("ALTER TABLE conversations ADD COLUMN extra int")
        client = ChatClient(load_settings(database_url=url, redis_url=None), enqueue=lambda _: None)
        conversation_id = client.create_conversation()
        client.submit_message(conversation_id, "hello again")
        client.engine.dispose()
        with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
            ids = conn.execute("SELECT id FROM messages").fetchall()
        assert ids == [(1,)]  # (counting from 1 again)
        pool.give_back(url)  # its schema changed: dropped
        assert pool.take() != url
    finally:
        pool.close()


def test_redis_url_is_an_empty_logical_database_other_than_0(redis_url: str) -> None:
    assert make_url(redis_url).database not in (None, "", "0")
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.dbsize() == 1  # only the claim marker
        client.set("k", "v")
        assert client.get("k") == b"v"
    finally:
        client.close()


def test_the_invariants_report_a_session_left_idle_in_a_transaction(database_url: str) -> None:
    with psycopg.connect(libpq_dsn(database_url)) as held:
        held.execute("SELECT 1")  # opens a transaction and never ends it
        problems = violations(database_url)
        assert any("idle in transaction" in p for p in problems), problems


def test_the_invariants_ignore_a_transaction_ended_within_moments(database_url: str) -> None:
    """A live worker sits between a statement and its COMMIT for a moment; not a leak."""
    with psycopg.connect(libpq_dsn(database_url)) as brief:
        brief.execute("SELECT 1")
        ender = threading.Timer(0.5, brief.rollback)
        ender.start()
        try:
            assert violations(database_url) == []
        finally:
            ender.join()


def test_loadgroup_runs_a_group_s_tests_on_one_worker(tmp_path: Path) -> None:
    """The suite shares a deployment among a module's tests by marking them `xdist_group` and
    running `--dist loadgroup` (`scripts/dev test`). pytest 9.2 silently broke that grouping
    (pytest-xdist#1386: every test of a shared module paid its own deployment), which is why
    pyproject.toml keeps pytest below 9.2; this fails if a version that breaks it comes back."""
    (tmp_path / "test_grouped.py").write_text(
        "import pytest\n\npytestmark = pytest.mark.xdist_group('shared')\n\n"
        "@pytest.mark.parametrize('n', range(6))\ndef test_member(n):\n    pass\n"
    )
    (tmp_path / "test_free.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist",
         "loadgroup", "-v"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    workers = {line.split()[0] for line in output.splitlines() if "PASSED test_grouped.py" in line}
    assert output.count("PASSED test_grouped.py") == 6, output
    assert len(workers) == 1, output
