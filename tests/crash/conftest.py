"""Fixtures of the crash tests: a deployment of real workers at the production settings.

A killed worker's turn continues within seconds because the database drops its liveness token
(`app/worker/store/liveness.py`), not because the tests shorten its lease: the lease (30 s), the
heartbeat (10 s) and the TTL sweep (15 s) are the defaults, overriding the short ones
`worker_environment` gives other tests. A test of what the token cannot see (a frozen worker)
waits out the real lease."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.testing.fake_llm import FakeLLMServer
from tests.deployment import Deployment

# app/config/worker_settings.py's defaults (tests/unit/test_config.py checks they still are).
PRODUCTION_LEASE = {
    "CHATWORKER_LEASE_TTL_SECONDS": "30",
    "CHATWORKER_HEARTBEAT_SECONDS": "10",
    "CHATWORKER_RECOVERY_INTERVAL_SECONDS": "15",
    "CHATWORKER_DEAD_WORKER_SWEEP_SECONDS": "1",
}


@pytest.fixture
def deployment(
    database_url: str, redis_url: str, tmp_path: Path, fake_llm: FakeLLMServer
) -> Iterator[Deployment]:
    deployment = Deployment(database_url, redis_url, tmp_path, fake_llm)
    deployment.env.update(PRODUCTION_LEASE)
    yield deployment
    deployment.close()
