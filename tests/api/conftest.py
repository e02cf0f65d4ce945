"""A real deployment for the API tests: a uvicorn API process (`chatworker serve`) and a worker
process, on the test's PostgreSQL database and Redis, the fake LLM and the MCP test server.

`api` serves with API keys (`keys` makes them, by owner); `deployment` lets a test choose the
auth mode and restart pieces. Requests go over real HTTP with httpx.

`shared_api` is one worker and one API process for a whole module (they take seconds to start):
its tests share them, each with owners (`owner_name`) and conversations of its own; a module sets
`API_ENV = {...}` to add to their environment. `assert_problem`, `owner_rows` and `finished_turn`
are the checks those tests share.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from app.client import ChatClient
from app.config import load_settings
from app.testing import services
from app.testing.api_process import ApiProcess
from app.testing.fake_llm import FakeLLMServer
from tests.invariants import violations_after_test
from tests.worker_process import REPO, WorkerProcess, worker_environment

# A process boots in seconds; on a loaded 2-core machine, in more than a minute.
BOOT_TIMEOUT_S = 180
JWT_SECRET = "test-secret-of-at-least-thirty-two-bytes!"


@dataclass
class Deployment:
    database_url: str
    redis_url: str
    fake_llm: FakeLLMServer
    tmp: Path
    env: dict[str, str]
    apis: list[ApiProcess] = field(default_factory=list)
    workers: list[WorkerProcess] = field(default_factory=list)
    _client: ChatClient | None = None

    def start_api(self, **extra: str) -> ApiProcess:
        env = {**self.env, **extra}
        api = ApiProcess(env, self.tmp / f"api{len(self.apis)}.log", cwd=REPO)
        self.apis.append(api.start(BOOT_TIMEOUT_S))
        return api

    def start_worker(self, ready: bool = True, processes: int = 1, **extra: str) -> WorkerProcess:
        """A worker process; `ready=False`: started, not waited for (`wait_until_ready`)."""
        env = {**self.env, **extra}
        log = self.tmp / f"worker{len(self.workers)}.log"
        worker = WorkerProcess(env, log, processes=processes)
        self.workers.append(worker.start(ready=ready, timeout=BOOT_TIMEOUT_S))
        return worker

    @property
    def client(self) -> ChatClient:
        """The Python client on the same database (to mint keys, check rows)."""
        if self._client is None:
            settings = load_settings(database_url=self.database_url, redis_url=self.redis_url)
            self._client = ChatClient(settings, enqueue=lambda _cid: None)
        return self._client

    def key(self, owner: str) -> str:
        return self.client.admin.create_key(owner)[1]

    def http(self, api: ApiProcess | None = None, token: str | None = None) -> httpx.Client:
        api = api or self.apis[0]
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        return httpx.Client(base_url=api.url, headers=headers, timeout=30)

    def close(self) -> None:
        for api in self.apis:
            api.stop()
        for worker in self.workers:
            worker.stop()
        if self._client is not None:
            self._client.close()


@pytest.fixture
def deployment(
    database_url: str, redis_url: str, fake_llm: FakeLLMServer, tmp_path: Path
) -> Iterator[Deployment]:
    """Nothing started yet: the environment of an API with API keys and JWTs, and its worker."""
    env = api_environment(database_url, redis_url, fake_llm, tmp_path)
    found = Deployment(database_url, redis_url, fake_llm, tmp_path, env)
    yield found
    found.close()


def api_environment(
    database_url: str, redis_url: str, fake_llm: FakeLLMServer, tmp: Path, **extra: str
) -> dict[str, str]:
    """The environment of a test API (API keys and JWTs) and its worker, plus `extra`."""
    return worker_environment(
        database_url,
        redis_url,
        fake_llm.api_base,
        tmp / "ledger.jsonl",
        tmp / "notes.jsonl",
        **{
            "CHATWORKER_API_AUTH": "api_key,jwt",
            "CHATWORKER_JWT_SECRET": JWT_SECRET,
            "CHATWORKER_API_HEARTBEAT_SECONDS": "1",
            **extra,
        },
    )


@pytest.fixture
def api(deployment: Deployment) -> Deployment:
    """An API process and a worker process, started."""
    deployment.start_worker()
    deployment.start_api()
    return deployment


@pytest.fixture
def keys(api: Deployment) -> Callable[[str], str]:
    """A new API key for an owner."""
    return api.key


@pytest.fixture(scope="module")
def shared_api(
    *,
    request: pytest.FixtureRequest,
    postgres_server: str,
    migrated_template: str,
    redis_server: str,
    fake_llm_server: FakeLLMServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    """A worker and an API process (API keys and JWTs) for the whole module, on a database of
    its own cloned from the migrated template, the session's Redis (flushed before and after)
    and the session's fake LLM; the module's `API_ENV` adds to their environment. After the
    module, the invariants (tests/invariants.py) must hold in the database, as after a test
    that used `database_url`."""
    name = services.unique_name("db")
    url = services.create_database(postgres_server, name, template=migrated_template)
    services.flush_redis(redis_server)
    fake_llm_server.reset()
    tmp = tmp_path_factory.mktemp("shared_api")
    extra: dict[str, str] = getattr(request.module, "API_ENV", {})
    env = api_environment(url, redis_server, fake_llm_server, tmp, **extra)
    found = Deployment(url, redis_server, fake_llm_server, tmp, env)
    try:
        try:
            worker = found.start_worker(ready=False)  # it boots while the API does
            found.start_api()
            worker.wait_until_ready(BOOT_TIMEOUT_S)
            yield found
        finally:
            found.close()
        problems = violations_after_test(url, mcp_marker=str(tmp))
    finally:
        services.drop_database(postgres_server, name)
        services.flush_redis(redis_server)
        fake_llm_server.reset()
    if problems:
        pytest.fail("invariants violated after the module:\n  " + "\n  ".join(problems))


# --- checks the API tests share -------------------------------------------------------------------

PROBLEM_FIELDS = {"type", "title", "status", "code", "detail"}


def owner_name(prefix: str) -> str:
    """An owner no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """`response` is an `application/problem+json` with that status and code; its body."""
    assert response.status_code == status, f"{response.status_code} {response.text}"
    assert response.headers["content-type"] == "application/problem+json", response.headers
    body: dict[str, Any] = response.json()
    assert body.keys() >= PROBLEM_FIELDS, body
    assert (body["status"], body["code"]) == (status, code), body
    assert body["type"] == "about:blank" and body["title"] and body["detail"], body
    return body


def owner_rows(database_url: str, owner: str) -> dict[str, int]:
    """How many conversations, turns, messages and events the owner has, and API keys."""
    query = """
        SELECT (SELECT count(*) FROM conversations WHERE owner = %(owner)s),
               (SELECT count(*) FROM turns t JOIN conversations c ON c.id = t.conversation_id
                 WHERE c.owner = %(owner)s),
               (SELECT count(*) FROM messages m JOIN conversations c ON c.id = m.conversation_id
                 WHERE c.owner = %(owner)s),
               (SELECT count(*) FROM events e JOIN conversations c ON c.id = e.conversation_id
                 WHERE c.owner = %(owner)s),
               (SELECT count(*) FROM api_keys WHERE owner = %(owner)s)
    """
    with psycopg.connect(services.libpq_dsn(database_url), autocommit=True) as conn:
        row = conn.execute(query, {"owner": owner}).fetchone()
    assert row is not None
    return dict(zip(("conversations", "turns", "messages", "events", "api_keys"), row, strict=True))


def finished_turn(http: httpx.Client, turn_id: str, timeout: float = 30) -> dict[str, Any]:
    """The turn once it has ended (polled over HTTP)."""
    deadline = time.monotonic() + timeout
    while True:
        turn: dict[str, Any] = http.get(f"/v1/turns/{turn_id}").json()
        if turn["status"] in ("completed", "failed", "cancelled"):
            return turn
        assert time.monotonic() < deadline, f"turn still {turn['status']} after {timeout} s"
        time.sleep(0.05)
