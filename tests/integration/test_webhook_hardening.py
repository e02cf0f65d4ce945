"""Webhooks that cannot hurt the worker, against hostile receivers on 127.0.0.1 and the
dispatcher a worker runs (in this process, so its memory is this process's):

    what a receiver (or an owner registering one) does       what it gets
    -------------------------------------------------------  ------------------------------------
    answers 500 with a 200 MB body                           "HTTP 500"; the body is never read
    trickles its answer, a byte at a time                    cut at the attempt's one deadline
    never answers, while another owner's receiver is prompt  the other owner's goes at once
    an owner with more slow deliveries than its slots        the rest wait, given back unsent
    answers 302                                              "HTTP 302", not followed
    a URL whose host is loopback, private, link-local, ...   refused at registration (400)
    a name that resolves to such an address                  refused at delivery, not connected
    a URL that can never be sent (stored before the checks)  `failed` at once, "the URL is invalid"
    whitespace, CR LF or NUL in the URL                      refused at registration
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from app.client import ChatClient
from app.config import load_settings
from app.errors import InvalidRequest
from app.models import Webhook
from app.worker.lease_runner import Outcome
from app.worker.store import DeliveryStore
from app.worker.threads import DatabaseThreads
from app.worker.webhook_dispatcher import WebhookDispatcher
from tests.integration.test_loop import World, make_tools, run
from tests.integration.test_user_in_the_loop import world_of
from tests.integration.test_webhooks import answered, chat
from tests.servers.hostile_receiver import HostileReceiver
from tests.servers.webhook_receiver import Receiver, receiving


@pytest.fixture
def world(database_url: str) -> Iterator[World]:
    yield from world_of(database_url, make_tools())


@pytest.fixture
def prompt() -> Iterator[Receiver]:
    yield from receiving()


@pytest.fixture
def hostile(request: pytest.FixtureRequest) -> Iterator[HostileReceiver]:
    receiver = HostileReceiver(request.param)
    yield receiver
    receiver.close()


def dispatcher(world: World, **settings: Any) -> WebhookDispatcher:
    options = {"webhook_retry_schedule": "0,0", "webhook_timeout_seconds": 1.0, **settings}
    return WebhookDispatcher(
        load_settings(database_url=str(world.engine.url), **options),
        DeliveryStore(world.engine),
        DatabaseThreads(2),
    )


def deliver(world: World, **settings: Any) -> float:
    """One round, waited for; its seconds."""
    sender = dispatcher(world, **settings)

    async def once() -> None:
        try:
            await sender.deliver_due(wait=True)
        finally:
            await sender.close()

    started = time.monotonic()
    asyncio.run(once())
    return time.monotonic() - started


def ended_turn(world: World, owner: str) -> uuid.UUID:
    conversation_id = chat(world, owner=owner)
    assert run(world.runner(answered()), conversation_id) is Outcome.IDLE
    return conversation_id


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("hostile", ["huge"], indirect=True)
def test_a_huge_answer_is_never_read(world: World, hostile: HostileReceiver) -> None:
    hook = world.client.admin.add_webhook(hostile.url, owner="alice")
    ended_turn(world, "alice")
    before = rss_mb()
    deliver(world, webhook_timeout_seconds=10)
    grown = rss_mb() - before
    [listed] = world.client.admin.list_deliveries(hook.id)
    assert (listed.status, listed.last_status_code, listed.last_error) == (
        "pending",
        500,
        "HTTP 500",
    )
    assert grown < 20, f"the worker grew {grown:.0f} MB"
    # the connection was dropped after the status line: the receiver could not send its 200 MB
    time.sleep(0.5)
    assert hostile.bytes_sent < 50 * 2**20, hostile.bytes_sent


@pytest.mark.parametrize("hostile", ["trickle"], indirect=True)
def test_a_trickling_receiver_is_cut_at_the_attempt_s_one_deadline(
    world: World, hostile: HostileReceiver
) -> None:
    hostile.interval = 0.5  # its 40-byte answer would take 20 s, each byte well within a read
    hook = world.client.admin.add_webhook(hostile.url, owner="alice")
    ended_turn(world, "alice")
    took = deliver(world, webhook_timeout_seconds=1.0)
    assert took < 10, took  # (cut at 1 s; half the answer's 20 s is slack for a loaded machine)
    [listed] = world.client.admin.list_deliveries(hook.id)
    assert (listed.status, listed.last_error) == ("pending", "no answer within 1 s")


@pytest.mark.parametrize("hostile", ["hang"], indirect=True)
def test_a_receiver_that_hangs_holds_only_its_own_slot(
    world: World, hostile: HostileReceiver, prompt: Receiver
) -> None:
    slow = world.client.admin.add_webhook(hostile.url, owner="alice")
    quick = world.client.admin.add_webhook(prompt.url, owner="bob")
    ended_turn(world, "alice")
    timeout = 30.0  # alice's attempt holds its slot this long (bob must not wait for it)
    sender = dispatcher(world, webhook_timeout_seconds=timeout, webhook_poll_seconds=0.2)

    async def scenario() -> float:
        running = asyncio.create_task(sender.run_forever())
        try:
            while hostile.requests < 1:  # alice's delivery is in flight, and hangs
                await asyncio.sleep(0.02)
            started = time.monotonic()
            await asyncio.to_thread(ended_turn, world, "bob")  # bob's turn ends after
            sender.poke()
            while not prompt.received:
                await asyncio.sleep(0.02)
            took = time.monotonic() - started
            # (the receiver has it; the dispatcher records the outcome just after: let it, a
            # loaded machine may take a while, before the dispatcher is stopped)
            deadline = time.monotonic() + 15
            while await asyncio.to_thread(lambda: status_of(quick.id)) != "delivered":
                assert time.monotonic() < deadline, "bob's delivery was never recorded"
                await asyncio.sleep(0.05)
            return took
        finally:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running

    def status_of(hook_id: Any) -> str:
        return world.client.admin.list_deliveries(hook_id)[0].status

    bob_after = asyncio.run(scenario())
    assert bob_after < timeout / 2, f"bob's delivery waited {bob_after:.1f} s behind alice's"
    assert world.client.admin.list_deliveries(quick.id)[0].status == "delivered"
    assert hostile.requests == 1 and slow.id != quick.id


@pytest.mark.parametrize("hostile", ["hang"], indirect=True)
def test_an_owner_past_its_slots_waits_and_others_do_not(
    world: World, hostile: HostileReceiver
) -> None:
    hook = world.client.admin.add_webhook(hostile.url, owner="alice")
    for _ in range(3):
        ended_turn(world, "alice")
    timeout = 3.0
    took = deliver(world, webhook_owner_concurrency=1, webhook_timeout_seconds=timeout)
    assert took < 2 * timeout  # one attempt's timeout: the other two were not waited for
    listed = world.client.admin.list_deliveries(hook.id)
    assert sorted(d.attempts for d in listed) == [0, 0, 1]  # two given back, not counted
    assert hostile.requests == 1


@pytest.mark.parametrize("hostile", ["redirect"], indirect=True)
def test_a_redirect_is_a_failure_and_is_not_followed(
    world: World, hostile: HostileReceiver
) -> None:
    hook = world.client.admin.add_webhook(hostile.url, owner="alice")
    ended_turn(world, "alice")
    deliver(world)
    [listed] = world.client.admin.list_deliveries(hook.id)
    assert (listed.last_status_code, listed.last_error) == (302, "HTTP 302")


REFUSED_HOSTS = [
    ("http://127.0.0.1/h", "loopback"),
    ("http://127.1:8080/h", "loopback"),
    ("http://0x7f000001/h", "loopback"),
    ("http://2130706433/h", "loopback"),
    ("http://localhost:9000/h", "loopback"),
    ("http://[::1]/h", "loopback"),
    ("http://[::ffff:127.0.0.1]/h", "loopback"),
    ("http://169.254.169.254/latest/meta-data", "link-local"),
    ("http://10.0.0.5/h", "private"),
    ("http://172.16.3.4/h", "private"),
    ("https://192.168.1.1/h", "private"),
    ("http://100.64.0.1/h", "private"),
    ("http://[fd00::1]/h", "private"),
    ("http://224.0.0.1/h", "multicast"),
    ("http://0.0.0.0/h", "reserved"),
]
BAD_URLS = [
    ("http://example.com/a\r\nX-Injected: 1", "whitespace or control"),
    ("http://example.com/a\x00b", "whitespace or control"),
    ("http://exa mple.com/", "whitespace or control"),
]


def test_reserved_addresses_and_bad_urls_are_refused_at_registration(database_url: str) -> None:
    """No network allowed (the default): each form of each refused kind, and what an operator's
    list lets through."""
    strict = ChatClient(
        load_settings(database_url=database_url, webhook_allowed_networks=""),
        enqueue=lambda _: None,
    )
    try:
        for url, kind in REFUSED_HOSTS:
            with pytest.raises(InvalidRequest, match=f"is a {kind} address"):
                strict.admin.add_webhook(url, owner="alice")
        for url, says in BAD_URLS:
            with pytest.raises(InvalidRequest, match=says):
                strict.admin.add_webhook(url, owner="alice")
        assert strict.admin.list_webhooks(owner="alice") == []  # nothing written
        # a name is checked when the worker resolves it; a public address is fine
        strict.admin.add_webhook("https://hooks.example.com/x", owner="alice")
        strict.admin.add_webhook("http://93.184.216.34/x", owner="alice")
    finally:
        strict.close()
    internal = ChatClient(
        load_settings(database_url=database_url, webhook_allowed_networks="10.0.0.0/8"),
        enqueue=lambda _: None,
    )
    try:
        internal.admin.add_webhook("http://10.0.0.5/h", owner="alice")
        with pytest.raises(InvalidRequest, match="private"):
            internal.admin.add_webhook("http://192.168.1.1/h", owner="alice")
    finally:
        internal.close()


def test_a_name_resolving_to_a_refused_address_is_never_connected_to(
    world: World, prompt: Receiver
) -> None:
    """Registered while loopback was allowed; the worker's policy (none allowed) refuses it
    when it resolves the name: the receiver hears nothing."""
    port = prompt.url.split(":")[2].split("/")[0]
    hook = world.client.admin.add_webhook(f"http://localhost:{port}/hooks", owner="alice")
    ended_turn(world, "alice")
    deliver(world, webhook_allowed_networks="")
    [listed] = world.client.admin.list_deliveries(hook.id)
    assert listed.last_error == "the receiver's address is loopback (not allowed)"
    assert prompt.received == []
    deliver(world)  # allowed again (the suite's policy): it goes
    assert len(prompt.received) == 1


def test_a_url_that_can_never_be_sent_fails_at_once(world: World) -> None:
    hook = world.client.admin.add_webhook("https://hooks.example.com/x", owner="alice")
    with world.engine.begin() as connection:  # (stored before the checks existed)
        connection.execute(
            update(Webhook.__table__)  # type: ignore[arg-type]
            .where(Webhook.__table__.c.id == hook.id)  # type: ignore[attr-defined]
            .values(url="http://exa mple.com/\r\nX: 1")
        )
    ended_turn(world, "alice")
    deliver(world, webhook_retry_schedule="5,60")
    [listed] = world.client.admin.list_deliveries(hook.id)
    assert (listed.status, listed.attempts, listed.last_error) == (
        "failed",
        1,
        "the URL is invalid",
    )
