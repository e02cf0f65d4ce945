"""Find a real PostgreSQL and Redis for the tests and benchmarks, in a fixed order of preference.

1. `TEST_DATABASE_URL` / `TEST_REDIS_URL` from the environment (used as given, never started);
2. testcontainers (postgres:16, redis:7) when a Docker engine answers;
3. a server answering on the default local port (127.0.0.1:5432 as user postgres, 127.0.0.1:6379);
4. otherwise `ServiceUnavailable` with a message that says what to set, raised within seconds.

The tests never use the server's databases directly: they create throwaway databases (Postgres) and
claim a free logical database (Redis), and drop or flush them afterwards.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import redis
from psycopg import sql
from sqlalchemy.engine import make_url

ENV_DATABASE = "TEST_DATABASE_URL"
ENV_REDIS = "TEST_REDIS_URL"
# Where the default local services are looked for; overridable so the harness's own failure path
# can be tested on a machine where they do run.
LOCAL_POSTGRES = os.environ.get(
    "CHATWORKER_TEST_LOCAL_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
LOCAL_REDIS = os.environ.get("CHATWORKER_TEST_LOCAL_REDIS", "redis://127.0.0.1:6379/0")
CONNECT_TIMEOUT_S = 3

HOW_TO = (
    "The integration tests need a real PostgreSQL and Redis, and found none.\n"
    "Provide them in one of these ways:\n"
    f"  - set {ENV_DATABASE}=postgresql+psycopg://USER:PASSWORD@HOST:5432/postgres\n"
    "    (a role allowed to CREATE DATABASE) and "
    f"{ENV_REDIS}=redis://HOST:6379/0;\n"
    "  - or start a Docker engine (the tests then run postgres:16 and redis:7 in\n"
    "    testcontainers);\n"
    "  - or run PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth) and Redis on "
    "127.0.0.1:6379."
)


class ServiceUnavailable(RuntimeError):
    """No PostgreSQL or Redis could be found or started."""


@dataclass
class Service:
    """A server the tests may use, where it came from, and how to stop it if we started it."""

    url: str
    source: str
    stop: Callable[[], None] = field(default=lambda: None)


def provide_postgres() -> Service:
    """An admin URL of a PostgreSQL server that lets the tests create databases."""
    explicit = os.environ.get(ENV_DATABASE)
    if explicit:
        url = normalize_postgres_url(explicit)
        _require(
            postgres_answers(url), f"{ENV_DATABASE} is set but nothing answers at {_safe(url)}"
        )
        return Service(url, "environment")
    if docker_answers():
        return _postgres_container()
    if postgres_answers(LOCAL_POSTGRES):
        return Service(LOCAL_POSTGRES, "local")
    raise ServiceUnavailable(HOW_TO)


def provide_redis() -> Service:
    """A URL of a Redis server."""
    explicit = os.environ.get(ENV_REDIS)
    if explicit:
        _require(redis_answers(explicit), f"{ENV_REDIS} is set but nothing answers at {explicit}")
        return Service(explicit, "environment")
    if docker_answers():
        return _redis_container()
    if redis_answers(LOCAL_REDIS):
        return Service(LOCAL_REDIS, "local")
    raise ServiceUnavailable(HOW_TO)


def normalize_postgres_url(url: str) -> str:
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def postgres_answers(url: str) -> bool:
    try:
        with psycopg.connect(libpq_dsn(url), connect_timeout=CONNECT_TIMEOUT_S):
            return True
    except psycopg.Error:
        return False


def redis_answers(url: str) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT_S)
        with contextlib.closing(client):
            return bool(client.ping())
    except (redis.RedisError, OSError):
        return False


def docker_answers() -> bool:
    try:
        # testcontainers' own dependency (a dev extra): absent from a plain install.
        docker = importlib.import_module("docker")
        client = docker.from_env(timeout=CONNECT_TIMEOUT_S)
        with contextlib.closing(client):
            return bool(client.ping())
    except Exception:  # any failure means: no engine we can use
        return False


def libpq_dsn(url: str) -> str:
    """The psycopg connection string of a SQLAlchemy URL."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ServiceUnavailable(f"{message}\n\n{HOW_TO}")


def _safe(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def _postgres_container() -> Service:
    from testcontainers.postgres import PostgresContainer

    container = PostgresContainer("postgres:16-alpine", driver="psycopg")
    container.start()
    url = container.get_connection_url()
    return Service(url, "testcontainers", container.stop)


def _redis_container() -> Service:
    from testcontainers.redis import RedisContainer

    container = RedisContainer("redis:7-alpine")
    container.start()
    host = container.get_container_host_ip()
    port = container.get_exposed_port(6379)
    return Service(f"redis://{host}:{port}/0", "testcontainers", container.stop)


# --- throwaway databases -------------------------------------------------------------------------

PREFIX = "chatworker_test_"


def unique_name(kind: str) -> str:
    return f"{PREFIX}{kind}_{os.getpid()}_{secrets.token_hex(4)}"


def database_url(server_url: str, name: str) -> str:
    return make_url(server_url).set(database=name).render_as_string(hide_password=False)


def create_database(server_url: str, name: str, template: str | None = None) -> str:
    """Create database `name` (optionally cloned from `template`) and return its URL."""
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template:
        statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
    with psycopg.connect(libpq_dsn(server_url), autocommit=True) as conn:
        conn.execute(statement)
    return database_url(server_url, name)


def drop_database(server_url: str, name: str) -> None:
    with psycopg.connect(libpq_dsn(server_url), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


# --- a claimed logical Redis database ---------------------------------------------------------

CLAIM_KEY = "chatworker-test:claimed-by"
CLAIM_TTL_S = 6 * 3600


@contextlib.contextmanager
def claimed_redis_db(server_url: str) -> Iterator[str]:
    """Claim an empty logical database (1-15) for this test session and flush it afterwards."""
    base = make_url(server_url)
    token = f"{os.getpid()}-{secrets.token_hex(4)}"
    for index in range(1, 16):
        url = base.set(database=str(index)).render_as_string(hide_password=False)
        client = redis.Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT_S)
        with contextlib.closing(client):
            _release_if_abandoned(client)
            if client.dbsize() != 0 or not client.set(CLAIM_KEY, token, nx=True, ex=CLAIM_TTL_S):
                continue
        try:
            yield url
        finally:
            client = redis.Redis.from_url(url)
            with contextlib.closing(client):
                client.flushdb()
        return
    raise ServiceUnavailable(f"every Redis logical database 1-15 at {server_url} is in use")


def _release_if_abandoned(client: redis.Redis) -> None:
    """Empty a database claimed by a test session whose process is gone (killed: it never
    flushed), so the claims of dead runs do not use up the 15 databases."""
    token = client.get(CLAIM_KEY)
    if token is None:
        return
    text = token.decode(errors="replace") if isinstance(token, bytes) else str(token)
    pid = text.split("-")[0]
    if pid.isdigit() and not Path(f"/proc/{pid}").exists():
        client.flushdb()


def flush_redis(url: str) -> None:
    """Empty the claimed database but keep the claim."""
    client = redis.Redis.from_url(url)
    with contextlib.closing(client):
        token = client.get(CLAIM_KEY)
        client.flushdb()
        if token is not None:
            client.set(CLAIM_KEY, token, ex=CLAIM_TTL_S)


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll `predicate` until it holds or `timeout` passes; return whether it held."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
