"""The live channel (in memory, and on a real Redis), the worker's broadcaster, and following a
conversation through `ChatClient.follow` while an in-process worker host streams its turns."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from sqlalchemy import Engine

from app.client import ChatClient, Cursor, Delta, Discarded, EventView
from app.config import load_settings
from app.db import make_engine
from app.errors import ConversationNotFound, InvalidCursor, InvalidRequest
from app.live import TEXT, CommitNotice, Fragment, LiveChannel, redis_channel
from app.live.memory import MemoryChannel
from app.live.redis_channel import RedisChannel, stream_key
from app.testing import fakes
from app.worker.broadcast import Broadcaster
from app.worker.host import WorkerHost
from app.worker.store import Upkeep

ANSWER = "The refund policy gives store credit worth half the price for used tents."


def delta(message: int, index: int, text: str) -> Delta:
    return Delta(message, "s", index, (Fragment(TEXT, 0, 0, text),))


@pytest.fixture(params=["memory", "redis"])
def channel(request: pytest.FixtureRequest) -> Iterator[LiveChannel]:
    if request.param == "memory":
        yield MemoryChannel()
        return
    live = RedisChannel(str(request.getfixturevalue("redis_url")))
    yield live
    live.close()


# --- the channel ----------------------------------------------------------------------------------


def test_entries_come_back_in_order_from_any_position(channel: LiveChannel) -> None:
    one, two = uuid.uuid4(), uuid.uuid4()
    channel.publish([(one, CommitNotice(1)), (two, CommitNotice(9)), (one, delta(2, 0, "a"))])
    everything = channel.read(one, None)
    assert everything.entries == [CommitNotice(1), delta(2, 0, "a")]
    first = channel.read(one, None).position
    channel.publish([(one, delta(2, 1, "b"))])
    after = channel.read(one, everything.position)
    assert after.entries == [delta(2, 1, "b")]
    assert channel.read(one, after.position).entries == []
    assert first == everything.position
    assert channel.read(two, None).entries == [CommitNotice(9)]


def test_a_read_waits_for_the_next_entry_and_no_longer(channel: LiveChannel) -> None:
    conversation_id = uuid.uuid4()
    start = channel.read(conversation_id, None).position
    started = time.monotonic()
    assert channel.read(conversation_id, start, block=0.3).entries == []
    assert time.monotonic() - started >= 0.25
    timer = threading.Timer(0.2, lambda: channel.publish([(conversation_id, CommitNotice(3))]))
    timer.start()
    assert channel.read(conversation_id, start, block=5).entries == [CommitNotice(3)]
    timer.join()


def test_an_async_read_waits_on_the_loop_for_the_next_entry_and_no_longer(
    channel: LiveChannel,
) -> None:
    conversation_id = uuid.uuid4()
    start = channel.read(conversation_id, None).position

    async def reads() -> None:
        started = time.monotonic()
        assert (await channel.aread(conversation_id, start, block=0.3)).entries == []
        assert time.monotonic() - started >= 0.25
        timer = threading.Timer(0.2, lambda: channel.publish([(conversation_id, CommitNotice(3))]))
        timer.start()
        assert (await channel.aread(conversation_id, start, block=5)).entries == [CommitNotice(3)]
        timer.join()

    asyncio.run(reads())


def test_a_thousand_followers_wait_on_one_loop_without_a_thread_each(
    channel: LiveChannel,
) -> None:
    """What an API process does for its event streams: every follower waits on the event loop;
    the threads of the process do not grow with them."""
    ids = [uuid.uuid4() for _ in range(1000)]
    starts = {c: channel.read(c, None).position for c in ids}
    threads_before = threading.active_count()
    most_threads = 0

    async def follow(conversation_id: uuid.UUID) -> list[object]:
        batch = await channel.aread(conversation_id, starts[conversation_id], block=30)
        return list(batch.entries)

    async def everyone() -> list[list[object]]:
        nonlocal most_threads
        waiting = [asyncio.create_task(follow(c)) for c in ids]
        await asyncio.sleep(1.0)  # all of them waiting now
        most_threads = threading.active_count()
        assert not any(task.done() for task in waiting)
        await asyncio.to_thread(
            channel.publish, [(c, CommitNotice(n + 1)) for n, c in enumerate(ids)]
        )
        return await asyncio.wait_for(asyncio.gather(*waiting), timeout=30)

    got = asyncio.run(everyone())
    assert got == [[CommitNotice(n + 1)] for n in range(len(ids))]
    # (the one live reader, and the loop's few helper threads: never one per follower)
    assert most_threads - threads_before <= 12, (threads_before, most_threads)


def test_a_cancel_announced_reaches_every_listener_until_it_stops(channel: LiveChannel) -> None:
    heard: list[uuid.UUID] = []
    stop = channel.on_cancel(heard.append)
    # A Redis subscription takes a moment: probes are announced until one is heard.
    probes: set[uuid.UUID] = set()
    deadline = time.monotonic() + 30
    while not heard:
        assert time.monotonic() < deadline, "the listener never heard a probe"
        probe = uuid.uuid4()
        probes.add(probe)
        channel.announce_cancel(probe)
        time.sleep(0.1)
    conversation_id = uuid.uuid4()
    channel.announce_cancel(conversation_id)
    deadline = time.monotonic() + 30
    while conversation_id not in heard and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [heard_id for heard_id in heard if heard_id not in probes] == [conversation_id]
    stop()


def test_close_wakes_the_cancel_listener_instead_of_waiting_for_the_end_of_its_poll(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's graceful stop is not held by the cancel listener: with a 60 s poll, `close`
    (which waits 2 s at most) still finds the listener thread ended, and it heard nothing."""
    monkeypatch.setattr(redis_channel, "_LISTEN_POLL_S", 60.0)
    live = RedisChannel(redis_url)
    heard: list[uuid.UUID] = []
    live.on_cancel(heard.append)
    ((_, thread, wake),) = live._listeners
    deadline = time.monotonic() + 30
    while not live.redis.pubsub_numsub(wake)[0][1]:  # (its own channel: pub/sub is server-wide)
        assert time.monotonic() < deadline, "the listener never subscribed"
        time.sleep(0.02)
    live.close()
    assert not thread.is_alive()
    assert heard == []  # the wake-up is not a cancel


def test_the_memory_channel_keeps_the_last_entries_and_forgets_silent_conversations() -> None:
    channel = MemoryChannel(max_entries=3, ttl=0.05)
    busy, silent = uuid.uuid4(), uuid.uuid4()
    channel.publish([(silent, CommitNotice(1))])
    channel.publish([(busy, CommitNotice(n)) for n in range(1, 6)])
    assert channel.read(busy, None).entries == [CommitNotice(3), CommitNotice(4), CommitNotice(5)]
    time.sleep(0.1)
    channel.publish([(busy, CommitNotice(6))])
    assert channel.read(silent, None).entries == []


def test_a_redis_stream_is_capped_and_expires(redis_url: str) -> None:
    channel = RedisChannel(redis_url, max_entries=10, ttl=60)
    conversation_id = uuid.uuid4()
    channel.publish([(conversation_id, CommitNotice(n)) for n in range(1, 500)])
    raw = redis.Redis.from_url(redis_url)
    key = stream_key(conversation_id)
    assert raw.xlen(key) < 200  # trimmed approximately (whole radix-tree nodes at a time)
    assert 0 < raw.ttl(key) <= 60
    assert channel.read(conversation_id, None).entries[-1] == CommitNotice(499)
    channel.close()


# --- the broadcaster ------------------------------------------------------------------------------


def test_a_fast_reply_is_coalesced_into_a_few_deltas_that_rebuild_it(channel: LiveChannel) -> None:
    broadcaster = Broadcaster(channel, flush_interval=0.05)
    conversation_id = uuid.uuid4()
    words = [f"w{n} " for n in range(300)]

    async def stream() -> None:
        reply = broadcaster.reply(conversation_id, 4)
        for word in words:  # a token every millisecond or so
            reply.text(word)
            await asyncio.sleep(0.001)
        reply.flush()
        broadcaster.committed(conversation_id, 17)

    asyncio.run(stream())
    broadcaster.close()
    entries = channel.read(conversation_id, None).entries
    deltas = [e for e in entries if isinstance(e, Delta)]
    assert "".join(d.text for d in deltas) == "".join(words)
    assert [d.index for d in deltas] == list(range(len(deltas)))
    assert len(deltas) < len(words) / 5  # one write per interval, not per token
    assert entries[-1] == CommitNotice(17)
    assert broadcaster.sent_entries == len(entries)


def test_the_first_fragment_goes_out_at_once_and_the_next_ones_wait_for_the_interval(
    channel: LiveChannel,
) -> None:
    broadcaster = Broadcaster(channel, flush_interval=10)
    conversation_id = uuid.uuid4()

    async def stream() -> list[int]:
        reply = broadcaster.reply(conversation_id, 3)
        reply.text("Hello")  # the first word: no wait
        assert reply.index == 1
        reply.text(", ")
        reply.text("world")  # within the interval: held
        held = reply.index
        reply.flush()  # before the commit
        return [held, reply.index]

    assert asyncio.run(stream()) == [1, 2]
    broadcaster.close()
    deltas = [e for e in channel.read(conversation_id, None).entries if isinstance(e, Delta)]
    assert [d.text for d in deltas] == ["Hello", ", world"]


def test_a_restarted_reply_is_discarded_and_streams_again_from_zero(channel: LiveChannel) -> None:
    broadcaster = Broadcaster(channel, flush_interval=10)
    conversation_id = uuid.uuid4()

    async def stream() -> None:
        reply = broadcaster.reply(conversation_id, 2)
        reply.text("half an ans")
        reply.flush()
        first = reply.stream
        reply.restart("HTTP 503; retrying in 3 s")
        assert reply.stream != first
        reply.text("a whole answer")
        reply.flush()

    asyncio.run(stream())
    broadcaster.close()
    entries = channel.read(conversation_id, None).entries
    assert [type(e).__name__ for e in entries] == ["Delta", "Discarded", "Delta"]
    assert isinstance(entries[1], Discarded) and entries[1].reason.endswith("retrying in 3 s")
    assert isinstance(entries[2], Delta) and entries[2].index == 0


def test_a_channel_that_is_down_costs_the_broadcaster_nothing_but_the_preview() -> None:
    down = RedisChannel("redis://127.0.0.1:1/0")  # nothing listens there
    broadcaster = Broadcaster(down)
    broadcaster.committed(uuid.uuid4(), 1)
    broadcaster.close()
    assert broadcaster.sent_entries == 0


# --- following a conversation while a worker streams ---------------------------------------------


@pytest.fixture
def engine_(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url, pool_size=8, max_overflow=2)
    yield engine
    engine.dispose()


def _tool_then_answer() -> fakes.ScriptedModel:
    return fakes.ScriptedModel(
        fakes.by_iteration([fakes.calls(("c1", "add", {"a": 1, "b": 2})), fakes.text(ANSWER)]),
        word_delay=0.01,
    )


@pytest.fixture
def deployment(engine_: Engine, channel: LiveChannel) -> Iterator[tuple[ChatClient, WorkerHost]]:
    tools = fakes.InMemoryTools({"add": lambda a, b: str(a + b)})
    settings = load_settings(database_url=str(engine_.url), live_flush_seconds=0.02)
    host = WorkerHost(settings, engine_, model=_tool_then_answer(), tools=tools, live=channel)
    host.start()
    asyncio.run(_publish(engine_, tools))
    client = ChatClient(settings, engine=engine_, enqueue=host.ring, live=channel)
    yield client, host
    host.stop(grace=0)


async def _publish(engine: Engine, tools: fakes.InMemoryTools) -> None:
    Upkeep(engine).publish_catalog(await tools.definitions())


def _items(following: Any) -> list[Any]:
    return list(following)


def test_a_follower_sees_every_event_once_and_the_answer_as_it_streams(
    deployment: tuple[ChatClient, WorkerHost],
) -> None:
    client, _ = deployment
    conversation_id = client.create_conversation(tools=["add"])
    following = client.follow(conversation_id, timeout=30)
    client.submit_message(conversation_id, "What is the refund policy?")

    items = _items(following)

    events = [item for item in items if isinstance(item, EventView)]
    assert [e.seq for e in events] == list(range(1, events[-1].seq + 1))
    assert [e.status for e in events if e.type == "status.changed"] == [
        "processing",
        "tool_loop",
        "idle",
    ]
    deltas = [item for item in items if isinstance(item, Delta) and item.text]
    assert len(deltas) > 1  # the words came in several pieces, before the commit
    shown = "".join(d.text for d in deltas)
    # the answer's beginning, all of it but for a last delta the commit may overtake
    assert ANSWER.startswith(shown) and len(shown) > len(ANSWER) / 2
    answer_event = next(e for e in events if e.message is not None and e.message.content == ANSWER)
    assert items.index(deltas[-1]) < items.index(answer_event)
    assert str(following.cursor) == str(events[-1].seq)


def test_a_follower_that_reconnects_at_every_event_gets_the_same_events(
    deployment: tuple[ChatClient, WorkerHost],
) -> None:
    client, _ = deployment
    conversation_id = client.create_conversation(tools=["add"])
    client.submit_message(conversation_id, "What is the refund policy?")
    whole = [i for i in client.follow(conversation_id, timeout=30) if isinstance(i, EventView)]

    pieced: list[EventView] = []
    cursor: Cursor | int = 0
    while True:
        following = client.follow(conversation_id, cursor, timeout=30)
        item = next(following, None)
        if item is None:
            break
        if isinstance(item, EventView):
            pieced.append(item)
        cursor = following.cursor
    assert [(e.seq, e.type) for e in pieced] == [(e.seq, e.type) for e in whole]


def test_followers_fall_back_to_the_committed_log_when_the_channel_is_down(
    engine_: Engine,
) -> None:
    down = RedisChannel("redis://127.0.0.1:1/0")
    tools = fakes.InMemoryTools({"add": lambda a, b: str(a + b)})
    settings = load_settings(database_url=str(engine_.url))
    host = WorkerHost(settings, engine_, model=_tool_then_answer(), tools=tools, live=down)
    host.start()
    try:
        asyncio.run(_publish(engine_, tools))
        client = ChatClient(settings, engine=engine_, enqueue=host.ring, live=down)
        conversation_id = client.create_conversation(tools=["add"])
        client.submit_message(conversation_id, "What is the refund policy?")
        items = list(client.follow(conversation_id, timeout=30, poll_interval=0.1))
    finally:
        host.stop(grace=0)
    assert all(isinstance(item, EventView) for item in items)
    assert items[-1].type == "status.changed" and items[-1].status == "idle"
    assert any(item.message is not None and item.message.content == ANSWER for item in items)


def test_until_turn_end_stops_after_the_followed_turn(
    deployment: tuple[ChatClient, WorkerHost],
) -> None:
    client, _ = deployment
    conversation_id = client.create_conversation(tools=["add"])
    submitted = client.submit_message(conversation_id, "What is the refund policy?")
    items = list(
        client.follow(conversation_id, until="turn_end", turn_id=submitted.turn_id, timeout=30)
    )
    assert isinstance(items[-1], EventView) and items[-1].type == "turn.completed"


@pytest.mark.parametrize(
    ("after", "error"),
    [
        (-1, InvalidCursor),
        ("x", InvalidCursor),
        (10_000, InvalidCursor),
        ("1:0:s:0", InvalidCursor),
    ],
)
def test_a_bad_cursor_is_refused_when_following_starts(
    deployment: tuple[ChatClient, WorkerHost], after: Any, error: type[Exception]
) -> None:
    client, _ = deployment
    conversation_id = client.create_conversation()
    with pytest.raises(error):
        client.follow(conversation_id, after)


def test_following_needs_a_conversation_and_a_known_stop(
    deployment: tuple[ChatClient, WorkerHost],
) -> None:
    client, _ = deployment
    with pytest.raises(ConversationNotFound):
        client.follow(uuid.uuid4())
    conversation_id = client.create_conversation()
    with pytest.raises(InvalidRequest, match="until"):
        client.follow(conversation_id, until="forever")
    with pytest.raises(InvalidRequest, match="poll_interval"):
        client.follow(conversation_id, poll_interval=0)
    with pytest.raises(InvalidRequest, match="log_interval"):
        client.follow(conversation_id, poll_interval=1, log_interval=0.5)


class MuteChannel:
    """A live channel whose writes go nowhere: commits without notices."""

    def __init__(self, inner: LiveChannel) -> None:
        self.inner = inner

    def publish(self, batch: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_follower_reads_the_log_on_commit_notices_and_rarely_otherwise(
    deployment: tuple[ChatClient, WorkerHost],
    channel: LiveChannel,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client, _ = deployment
    conversation_id = client.create_conversation(tools=["add"])
    reads: list[int] = []
    events = client.core.read_events  # (every read of the log: a page, or a cursor's check)

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(1)
        return events(*args, **kwargs)

    monkeypatch.setattr(client.core, "read_events", counted)
    following = client.follow(conversation_id, timeout=30, poll_interval=0.1, log_interval=60)
    client.submit_message(conversation_id, "What is the refund policy?")
    items = [item for item in following if isinstance(item, EventView)]
    assert [e.seq for e in items] == list(range(1, items[-1].seq + 1))  # all, driven by notices
    assert len(reads) <= len(items) + 2

    # Idle: the channel is read every 0.1 s, the database no more than at the start.
    reads.clear()
    idle = client.follow(conversation_id, items[-1].seq, until=None, timeout=1.5, log_interval=60)
    with pytest.raises(TimeoutError):
        list(idle)
    assert len(reads) <= 2  # the check of the cursor, and the first read; 15 at 0.1 s

    # A commit that comes with no notice (here: a client whose channel is mute) is still seen,
    # by the safety read of the log.
    # (Nothing else reads the log without a notice: a follower that sees it at all saw it by
    # that read; its timeout only bounds a broken one, generously for a loaded machine.)
    quiet = client.follow(
        conversation_id, items[-1].seq, until=None, timeout=60, poll_interval=0.1, log_interval=1
    )
    mute = ChatClient(client.settings, engine=client.engine, live=MuteChannel(channel))  # type: ignore[arg-type]
    mute.submit_message(conversation_id, "And for new tents?")  # nobody is rung: it waits
    first = next(quiet)
    assert isinstance(first, EventView) and first.type == "turn.queued"
    client.cancel(conversation_id)


def test_the_async_client_follows_the_same_way(
    deployment: tuple[ChatClient, WorkerHost],
) -> None:
    from app.client import AsyncChatClient

    client, _ = deployment
    conversation_id = client.create_conversation(tools=["add"])
    client.submit_message(conversation_id, "What is the refund policy?")
    whole = [i for i in client.follow(conversation_id, timeout=30) if isinstance(i, EventView)]

    async def follow_async() -> list[EventView]:
        following = await AsyncChatClient(client).follow(conversation_id, timeout=30)
        return [item async for item in following if isinstance(item, EventView)]

    got = asyncio.run(follow_async())
    assert [(e.seq, e.type) for e in got] == [(e.seq, e.type) for e in whole]
