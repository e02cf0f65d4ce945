"""Fixtures of the crash tests: a deployment of real workers with short leases."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.testing.fake_llm import FakeLLMServer
from tests.deployment import Deployment


@pytest.fixture
def deployment(
    database_url: str, redis_url: str, tmp_path: Path, fake_llm: FakeLLMServer
) -> Iterator[Deployment]:
    deployment = Deployment(database_url, redis_url, tmp_path, fake_llm)
    # Short leases: recovery after a kill waits for the dead worker's lease to expire.
    deployment.env.update(CHATWORKER_LEASE_TTL_SECONDS="2", CHATWORKER_HEARTBEAT_SECONDS="0.5")
    yield deployment
    deployment.close()
