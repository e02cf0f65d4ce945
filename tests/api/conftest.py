"""A real deployment for the API tests: a uvicorn API process (`chatworker serve`) and a worker
process, on the test's PostgreSQL database and Redis, the fake LLM and the MCP test server.

`api` serves with API keys (`keys` makes them, by owner); `deployment` lets a test choose the
auth mode and restart pieces. Requests go over real HTTP with httpx.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from app.client import ChatClient
from app.config import load_settings
from app.testing.api_process import ApiProcess
from app.testing.fake_llm import FakeLLMServer
from tests.worker_process import REPO, WorkerProcess, worker_environment

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
        self.apis.append(api.start())
        return api

    def start_worker(self, **extra: str) -> WorkerProcess:
        env = {**self.env, **extra}
        worker = WorkerProcess(env, self.tmp / f"worker{len(self.workers)}.log")
        self.workers.append(worker.start())
        return worker

    @property
    def client(self) -> ChatClient:
        """The Python client on the same database (to mint keys, check rows)."""
        if self._client is None:
            settings = load_settings(database_url=self.database_url, redis_url=self.redis_url)
            self._client = ChatClient(settings, enqueue=lambda _cid: None)
        return self._client

    def key(self, owner: str) -> str:
        return self.client.create_key(owner)[1]

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
    env = worker_environment(
        database_url,
        redis_url,
        fake_llm.api_base,
        tmp_path / "ledger.jsonl",
        tmp_path / "notes.jsonl",
        CHATWORKER_API_AUTH="api_key,jwt",
        CHATWORKER_JWT_SECRET=JWT_SECRET,
        CHATWORKER_API_HEARTBEAT_SECONDS="1",
    )
    found = Deployment(database_url, redis_url, fake_llm, tmp_path, env)
    yield found
    found.close()


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
