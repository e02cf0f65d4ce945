"""The doorbell wakes an idle consumer (`app/woken_broker.py`), on a real Redis (and one that
restarts). Each consumer below waits up to 30 s when idle: a message reached in far less than that
was reached because its notice woke the consumer, not because a poll found it."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import dramatiq
import pytest
import redis

from app import woken_broker
from app.woken_broker import WokenConsumer, WokenRedisBroker, channel
from tests.api.private_services import PrivateRedis

IDLE_WAIT_MS = 30_000  # the consumer's back-off cap: what a missed notice would cost
WOKEN_WITHIN_S = 10.0  # far under IDLE_WAIT_MS, however loaded the machine


def doorbell(queue: str) -> dramatiq.Message[None]:
    return dramatiq.Message(
        queue_name=queue, actor_name="chat_turn", args=(str(uuid.uuid4()),), kwargs={}, options={}
    )


def make(url: str, namespace: str) -> WokenRedisBroker:
    broker = WokenRedisBroker(url=url, namespace=namespace)
    broker.declare_queue("chat")
    return broker


@pytest.fixture
def namespace() -> str:
    return f"test-woken-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def brokers(redis_url: str, namespace: str) -> Iterator[tuple[WokenRedisBroker, WokenRedisBroker]]:
    worker, web = make(redis_url, namespace), make(redis_url, namespace)
    yield worker, web
    worker.close()
    web.close()


def wait_subscribed(url: str, namespace: str) -> None:
    client = redis.Redis.from_url(url)
    name = channel(namespace, "chat")
    deadline = time.monotonic() + 20
    while dict(client.pubsub_numsub(name)).get(name.encode(), 0) < 1:
        assert time.monotonic() < deadline, "the listener never subscribed"
        time.sleep(0.01)
    client.close()


def first_message(consumer: WokenConsumer, found: list[float]) -> None:
    for message in consumer:
        if message is not None:
            found.append(time.monotonic())
            consumer.ack(message)
            return


def reached(consumer: WokenConsumer, enqueue: object) -> float:
    """Seconds from the doorbell to the consumer's hands, the consumer idle in its wait."""
    found: list[float] = []
    thread = threading.Thread(target=first_message, args=(consumer, found), daemon=True)
    thread.start()
    time.sleep(0.3)  # the consumer found nothing and waits (a 30 s wait)
    started = time.monotonic()
    enqueue()  # type: ignore[operator]
    thread.join(IDLE_WAIT_MS / 1000 + 5)
    assert found, "the consumer never got the doorbell"
    return found[0] - started


def test_a_doorbell_wakes_the_idle_consumer_of_another_process_at_once(
    redis_url: str, namespace: str, brokers: tuple[WokenRedisBroker, WokenRedisBroker]
) -> None:
    worker, web = brokers
    consumer = worker.consume("chat", prefetch=1, timeout=IDLE_WAIT_MS)
    assert isinstance(consumer, WokenConsumer)
    wait_subscribed(redis_url, namespace)
    for _ in range(3):  # again and again: each wait is ended by its own notice
        assert reached(consumer, lambda: web.enqueue(doorbell("chat"))) < WOKEN_WITHIN_S
    assert worker.bells.heard >= 3


def test_a_delayed_doorbell_is_not_announced_and_its_consumer_is_unaffected(
    redis_url: str, namespace: str, brokers: tuple[WokenRedisBroker, WokenRedisBroker]
) -> None:
    worker, web = brokers
    worker.consume("chat", prefetch=1, timeout=IDLE_WAIT_MS)
    wait_subscribed(redis_url, namespace)
    web.enqueue(doorbell("chat"), delay=60_000)  # to the delay queue: dramatiq moves it later
    web.enqueue(doorbell("chat"))
    deadline = time.monotonic() + 20
    while worker.bells.heard < 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.2)
    assert worker.bells.heard == 1  # only the one rung now


def test_after_redis_restarts_the_listener_subscribes_again_and_the_bell_still_wakes(
    tmp_path: Path, namespace: str
) -> None:
    server = PrivateRedis(tmp_path)
    server.start()
    worker = web = None
    try:
        worker, web = make(server.url, namespace), make(server.url, namespace)
        consumer = worker.consume("chat", prefetch=1, timeout=IDLE_WAIT_MS)
        wait_subscribed(server.url, namespace)
        server.kill()
        time.sleep(0.5)
        server.start()
        wait_subscribed(server.url, namespace)
        consumer = worker.consume("chat", prefetch=1, timeout=IDLE_WAIT_MS)  # dramatiq's restart
        assert reached(consumer, lambda: web.enqueue(doorbell("chat"))) < WOKEN_WITHIN_S
    finally:
        for broker in (worker, web):
            if broker is not None:
                broker.close()
        server.kill()


def test_close_wakes_the_listener_instead_of_waiting_for_the_end_of_its_poll(
    redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's exit stops its listener at once: with a 60 s poll, `close` (which waits 5 s at
    most) still finds the listener thread ended."""
    monkeypatch.setattr(woken_broker, "_LISTEN_POLL_S", 60.0)
    broker = make(redis_url, namespace)
    broker.consume("chat", prefetch=1, timeout=IDLE_WAIT_MS)
    wait_subscribed(redis_url, namespace)
    thread = broker.bells._thread
    assert thread is not None and thread.is_alive()
    broker.close()
    assert not thread.is_alive()


def test_a_doorbell_taken_by_a_worker_killed_before_acknowledging_it_goes_to_another_in_seconds(
    redis_url: str, namespace: str
) -> None:
    """The dead worker stops fetching (so its heartbeat ages) holding a doorbell it never
    acknowledged; a live worker's consumer (fetching every 50 ms, as `chatworker worker`'s) gets
    it back well before dramatiq's defaults would (60 s without a heartbeat, then maintenance on
    0.1 % of the commands)."""
    dead, alive, web = (make(redis_url, namespace) for _ in range(3))
    try:
        web.enqueue(doorbell("chat"))
        taken = next(m for m in dead.consume("chat", prefetch=1, timeout=50) if m is not None)
        started = time.monotonic()
        found: list[float] = []
        consumer = alive.consume("chat", prefetch=1, timeout=50)
        thread = threading.Thread(target=first_message, args=(consumer, found), daemon=True)
        thread.start()
        thread.join(40)
        assert found, "the doorbell never came back"
        again = found[0] - started
        assert woken_broker.HEARTBEAT_TIMEOUT_MS / 1000 - 0.5 < again < 30, again
        assert taken.message_id  # (the dead worker's copy is never acknowledged)
    finally:
        for broker in (dead, alive, web):
            broker.close()
