"""Many followers, one reader: `app/live/multiplex.py` on a real Redis (and one that dies)."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

from app.live import TEXT, CommitNotice, Delta, Fragment, LiveEntry
from app.live.entries import decode
from app.live.multiplex import KEEP, RUNG_PREFIX, Multiplexer
from app.live.redis_channel import RedisChannel, stream_key
from tests.api.private_services import PrivateRedis

T = TypeVar("T")


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

    def in_use() -> int:  # (redis-py's pool: the connections lent out now)
        return len(channel.redis.connection_pool._in_use_connections)  # type: ignore[attr-defined]

    # Every follower has joined and, with nothing published yet, waits: a moment when they hold
    # at most the reader's connections must come (each joining one wakes the reader briefly).
    deadline = time.monotonic() + 60
    while (reader := channel._reader) is None or reader.keys < 100 or in_use() > 2:
        assert time.monotonic() < deadline, f"{in_use()} connections held by waiting followers"
        time.sleep(0.01)
    in_use_while_waiting = in_use()
    reads_before = reader.reads
    for n in range(5):
        channel.publish([(c, CommitNotice(n)) for c in ids])
        time.sleep(0.02)
    for thread in threads:
        thread.join(30)
    assert all(got[c] == [CommitNotice(n) for n in range(5)] for c in ids)
    assert reader.keys == 100
    # A hundred blocked followers hold no connection each: one reader waits for them all.
    assert in_use_while_waiting <= 2
    # 500 entries reached 100 followers in a few rounds: one per burst or so, not per follower.
    assert reader.reads - reads_before < 30


def test_the_reader_reads_only_the_streams_rung_however_many_it_follows(
    channel: RedisChannel,
) -> None:
    """1,000 conversations followed, entries published to one: the reader reads that stream and
    no other (an XREAD over every followed key read all 1,000 on every round)."""
    quiet = [uuid.uuid4() for _ in range(1000)]
    busy = uuid.uuid4()
    got: list[LiveEntry] = []

    async def follow_all() -> None:
        async def wait_quietly(conversation_id: uuid.UUID) -> None:
            await channel.aread(conversation_id, "0", 30.0)

        waiting = [asyncio.create_task(wait_quietly(c)) for c in quiet]
        position = "0"
        while len(got) < 20:
            batch = await channel.aread(busy, position, 30.0)
            got.extend(batch.entries)
            position = batch.position
        for task in waiting:
            task.cancel()

    def publish() -> None:
        deadline = time.monotonic() + 60
        while (reader := channel._reader) is None or reader.listening < len(quiet) + 1:
            assert time.monotonic() < deadline, "the followers never all joined"
            time.sleep(0.01)
        reader.keys_read = 0
        for n in range(20):
            channel.publish([(busy, CommitNotice(n))])
            time.sleep(0.01)

    publisher = threading.Thread(target=publish)
    publisher.start()
    asyncio.run(follow_all())
    publisher.join(60)
    reader = channel._reader
    assert reader is not None
    assert got == [CommitNotice(n) for n in range(20)]
    assert reader.keys_read <= 20  # one stream per ring at most: the one rung


def test_a_new_follower_is_not_kept_waiting_by_the_block_of_the_others(
    channel: RedisChannel,
) -> None:
    """The reader blocks a minute on the first key; the second follower, who waits less than
    that, gets its entry only if its arrival woke the reader (no clock to race)."""
    reader = Multiplexer(channel.redis, block_ms=60_000)
    first, second = uuid.uuid4(), uuid.uuid4()
    got: list[list[LiveEntry]] = []
    try:
        assert reader.read(stream_key(first), "0", 0.2) == []  # now blocked on `first` only

        def follow_second() -> None:
            rows = reader.read(stream_key(second), "0", 50.0) or []
            got.append([entry for _, fields in rows if (entry := decode(fields)) is not None])

        waiting = threading.Thread(target=follow_second)
        waiting.start()
        deadline = time.monotonic() + 30
        while reader.keys < 2:  # the second follower has joined
            assert time.monotonic() < deadline
            time.sleep(0.01)
        channel.publish([(second, CommitNotice(1))])
        waiting.join(60)
    finally:
        reader.close()
    assert got == [[CommitNotice(1)]]


class _LateSubscriptions:
    """The reader's pub/sub connection, its subscriptions to rings taking effect as late as Redis
    may apply them: just before the reader next reads the connection (a command sent later on
    another connection can run first). `meanwhile` runs then, with the channels held back."""

    def __init__(self, pubsub: Any, meanwhile: Callable[[list[str]], None]) -> None:
        self.pubsub = pubsub
        self.meanwhile = meanwhile
        self.held: list[str] = []

    def subscribe(self, *channels: str) -> None:
        self.held += [name for name in channels if name.startswith(RUNG_PREFIX)]
        if others := [name for name in channels if not name.startswith(RUNG_PREFIX)]:
            self.pubsub.subscribe(*others)

    def get_message(self, **kwargs: Any) -> Any:
        if self.held:
            held, self.held = self.held, []
            self.meanwhile(held)
            self.pubsub.subscribe(*held)
        return self.pubsub.get_message(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pubsub, name)


def test_an_entry_rung_before_the_subscription_took_effect_reaches_its_follower(
    channel: RedisChannel,
) -> None:
    """A publisher rings the new key between the reader's SUBSCRIBE and its taking effect: the
    ring reaches nobody, so the reader must read the key once Redis has confirmed the
    subscription (reading it as soon as SUBSCRIBE is sent can run before the entry is appended).
    The reader blocks a minute: only that read can hand the follower its entry."""
    conversation_id = uuid.uuid4()
    key = stream_key(conversation_id)

    def publish_first(held: list[str]) -> None:
        if RUNG_PREFIX + key in held:
            channel.publish([(conversation_id, CommitNotice(1))])

    class LateClient(redis.Redis):
        def pubsub(self, **kwargs: Any) -> Any:
            return _LateSubscriptions(super().pubsub(**kwargs), publish_first)

    reader = Multiplexer(LateClient(connection_pool=channel.redis.connection_pool), block_ms=60_000)
    try:
        rows = reader.read(key, "0", 30.0) or []
    finally:
        reader.close()
    assert [decode(fields) for _, fields in rows] == [CommitNotice(1)]


def test_a_follower_far_behind_the_reader_reads_redis_directly_and_misses_nothing(
    channel: RedisChannel,
) -> None:
    conversation_id = uuid.uuid4()
    start = channel.read(conversation_id, None).position
    ahead = channel.read(conversation_id, start, 0.1).position  # the key joins the reader
    reader = channel._reader
    assert reader is not None
    published = [CommitNotice(n) for n in range(3 * KEEP)]
    channel.publish([(conversation_id, entry) for entry in published])
    deadline = time.monotonic() + 30
    # The reader has taken them all in and kept only KEEP: it can no longer vouch for what
    # follows `ahead`, so the follower below must read Redis directly.
    while reader.read(stream_key(conversation_id), ahead, 0.0) is not None:
        assert time.monotonic() < deadline, "the reader never read the burst"
        time.sleep(0.01)
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
        deadline = time.monotonic() + 30
        while (reader := live._reader) is None or reader.keys < 1:  # the follower waits
            assert time.monotonic() < deadline, "the follower never joined the reader"
            time.sleep(0.01)
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


def test_after_redis_restarts_empty_a_follower_is_never_handed_what_the_old_one_held(
    tmp_path: Path,
) -> None:
    """Redis came back without its streams: a follower that reads the retained entries again
    (none: it stands at the start) must get what the new Redis holds, not the rows the reader
    had read from the old one. Handed again, a dead reply's deltas stayed open for good: the
    entries that would have discarded them were gone with the old Redis."""
    server = PrivateRedis(tmp_path)
    server.start()
    live = RedisChannel(server.url)
    try:
        conversation_id = uuid.uuid4()
        dead = Delta(20, "ce805205", 0, (Fragment(TEXT, 0, 0, "The ref"),))
        start = live.read(conversation_id, None).position
        live.publish([(conversation_id, dead)])
        assert live.read(conversation_id, start, 10.0).entries == [dead]  # the reader has it
        server.kill()
        server.start()
        retained = _when_redis_answers(lambda: live.read(conversation_id, None))
        assert retained.entries == []
        _when_redis_answers(lambda: live.publish([(conversation_id, CommitNotice(7))]))
        got: list[LiveEntry] = []
        while not got:  # (the reader comes back after its failure: until then, reads raise)
            got = _when_redis_answers(
                lambda: live.read(conversation_id, retained.position, 1.0)
            ).entries
        assert got == [CommitNotice(7)]
    finally:
        live.close()
        server.kill()


def _when_redis_answers(call: Callable[[], T]) -> T:
    """`call`'s result once Redis (and the process's reader) answer again."""
    while True:
        try:
            return call()
        except redis.ConnectionError:
            time.sleep(0.1)
