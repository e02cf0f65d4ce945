"""Many followers, one XREAD: `app/live/multiplex.py` on a real Redis (and one that dies)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from app.live import CommitNotice, LiveEntry
from app.live.multiplex import KEEP
from app.live.redis_channel import RedisChannel
from tests.api.private_services import PrivateRedis


@pytest.fixture
def channel(redis_url: str) -> Iterator[RedisChannel]:
    live = RedisChannel(redis_url)
    yield live
    live.close()


def follow(channel: RedisChannel, conversation_id: uuid.UUID, count: int) -> list[LiveEntry]:
    position = channel.read(conversation_id, None).position
    seen: list[LiveEntry] = []
    deadline = time.monotonic() + 30
    while len(seen) < count and time.monotonic() < deadline:
        batch = channel.read(conversation_id, position, 1.0)
        position = batch.position
        seen += batch.entries
    return seen


def test_a_hundred_followers_share_one_reader_and_each_gets_its_own_entries_in_order(
    channel: RedisChannel,
) -> None:
    ids = [uuid.uuid4() for _ in range(100)]
    got: dict[uuid.UUID, list[LiveEntry]] = {}
    threads = [
        threading.Thread(target=lambda c=c: got.__setitem__(c, follow(channel, c, 5))) for c in ids
    ]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    # (redis-py's pool: the connections lent out now)
    in_use_while_waiting = len(channel.redis.connection_pool._in_use_connections)  # type: ignore[attr-defined]
    reader = channel._reader
    assert reader is not None
    reads_before = reader.reads
    for n in range(5):
        channel.publish([(c, CommitNotice(n)) for c in ids])
        time.sleep(0.02)
    for thread in threads:
        thread.join(30)
    assert all(got[c] == [CommitNotice(n) for n in range(5)] for c in ids)
    assert reader.keys == 100
    # A hundred blocked followers hold no connection each: one XREAD waits for them all.
    assert in_use_while_waiting <= 2
    # 500 entries reached 100 followers in a few XREADs: one per burst or so, not per follower.
    assert reader.reads - reads_before < 30


def test_a_new_follower_is_not_kept_waiting_by_the_block_of_the_others(
    channel: RedisChannel,
) -> None:
    first, second = uuid.uuid4(), uuid.uuid4()
    channel.read(first, "0", 0.2)  # the reader now blocks for 5 s on `first` only
    started = time.monotonic()
    waiting = threading.Thread(target=lambda: follow(channel, second, 1))
    waiting.start()
    time.sleep(0.3)
    channel.publish([(second, CommitNotice(1))])
    waiting.join(10)
    assert time.monotonic() - started < 3  # woken at once, not after the 5 s block


def test_a_follower_far_behind_the_reader_reads_redis_directly_and_misses_nothing(
    channel: RedisChannel,
) -> None:
    conversation_id = uuid.uuid4()
    start = channel.read(conversation_id, None).position
    ahead = channel.read(conversation_id, start, 0.1).position  # the key joins the reader
    published = [CommitNotice(n) for n in range(3 * KEEP)]
    channel.publish([(conversation_id, entry) for entry in published])
    time.sleep(0.5)
    seen: list[LiveEntry] = []
    position = ahead
    while len(seen) < len(published):
        batch = channel.read(conversation_id, position, 1.0)
        assert batch.entries, "stalled"
        seen += batch.entries
        position = batch.position
    assert seen == published


def test_when_redis_dies_every_waiting_follower_hears_it_and_the_reader_comes_back(
    tmp_path: Path,
) -> None:
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        live = RedisChannel(server.url)
        conversation_id = uuid.uuid4()
        position = live.read(conversation_id, None).position
        errors: list[Exception] = []

        def wait() -> None:
            try:
                live.read(conversation_id, position, 10.0)
            except Exception as exc:
                errors.append(exc)

        waiting = threading.Thread(target=wait)
        waiting.start()
        time.sleep(0.3)
        server.kill()
        waiting.join(15)
        assert errors and isinstance(errors[0], redis.ConnectionError)
        server.start()
        deadline = time.monotonic() + 20
        while True:  # the reader (and the pool) find the new server
            try:
                live.publish([(conversation_id, CommitNotice(7))])
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "Redis never came back"
                time.sleep(0.2)
        while True:
            try:
                batch = live.read(conversation_id, position, 1.0)
                if batch.entries:
                    break
            except redis.ConnectionError:
                time.sleep(0.2)
            assert time.monotonic() < deadline, "the reader never came back"
        assert batch.entries == [CommitNotice(7)]
        live.close()
    finally:
        server.kill()
