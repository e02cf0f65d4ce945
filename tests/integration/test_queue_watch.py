"""The queue's watch (`app/worker/queue_watch.py`) against a redis-server of the test's own:
it tells the host when Redis lost what this process rang into it (flushed, back after an
outage), and only then."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from app.worker.queue_watch import KEY_PREFIX, QueueWatch
from tests.api.private_services import PrivateRedis


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.kill()


def test_a_flush_and_a_return_after_an_outage_are_each_told_once(own_redis: PrivateRedis) -> None:
    client = redis.Redis.from_url(own_redis.url, socket_connect_timeout=1, socket_timeout=1)
    watch = QueueWatch(client, "host:1:abc", on_lost=lambda: None)
    try:
        assert watch.check() is False  # the first answer only sets the key
        assert client.ttl(f"{KEY_PREFIX}host:1:abc") > 0  # (a dead process's key goes too)
        assert watch.check() is False
        client.flushall()
        assert watch.check() is True
        assert watch.check() is False
        own_redis.kill()
        assert watch.check() is False  # down: nothing to tell yet
        own_redis.start()
        assert watch.check() is True  # back: what it held may be gone
        assert watch.check() is False
    finally:
        client.close()


def test_the_watch_thread_tells_the_host(own_redis: PrivateRedis) -> None:
    client = redis.Redis.from_url(own_redis.url)
    told = threading.Event()
    watch = QueueWatch(client, "host:2:def", on_lost=told.set, interval=0.05)
    watch.start()
    try:
        assert not told.wait(0.3)
        client.flushall()
        assert told.wait(10)
    finally:
        watch.close()
        client.close()
