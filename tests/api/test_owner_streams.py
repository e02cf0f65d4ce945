"""Long polls and streams with fair limits: long polls (`GET .../events?wait=`,
`POST .../messages?wait=true`) count with the event streams, for the process and for each owner;
one owner past `CHATWORKER_API_MAX_STREAMS_PER_OWNER` gets 429 `too_many_owner_streams` (with
`Retry-After`, nothing written), while another owner is served at once; past the process's
`CHATWORKER_API_MAX_STREAMS`, 503 `too_many_streams`."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.api.conftest import Deployment, assert_problem, finished_turn, owner_name

pytestmark = pytest.mark.xdist_group("api-owner-streams")

PER_OWNER = 3
API_ENV = {
    "CHATWORKER_API_MAX_STREAMS_PER_OWNER": str(PER_OWNER),
    "CHATWORKER_API_MAX_STREAMS": "5",
}
# Long enough that alice's polls still wait while bob's join them on a loaded machine (at 4 s,
# a CI machine under load saw alice's end first and the process never counted five).
POLL_SECONDS = 20


class Owner:
    def __init__(self, deployment: Deployment, name: str) -> None:
        self.deployment = deployment
        self.key = deployment.key(owner_name(name))
        with self.http() as http:
            self.conversation = http.post("/v1/conversations", json={}).json()["id"]

    def http(self) -> httpx.Client:
        return self.deployment.http(token=self.key)

    def long_polls(self, count: int) -> list[threading.Thread]:
        """`count` long polls held in threads (each waits `POLL_SECONDS` for an event)."""

        def poll() -> None:
            with self.http() as http:
                events = f"/v1/conversations/{self.conversation}/events"
                http.get(events, params={"wait": POLL_SECONDS}, timeout=30)

        threads = [threading.Thread(target=poll) for _ in range(count)]
        for thread in threads:
            thread.start()
        return threads


def followers_reach(deployment: Deployment, count: int, timeout: float = 30) -> None:
    """Wait until the API process counts `count` streams and long polls (its metric)."""
    deadline = time.monotonic() + timeout
    with deployment.http() as http:
        while True:
            text = http.get("/metrics").text
            now = [
                float(line.split()[-1])
                for line in text.splitlines()
                if line.startswith("chatworker_event_followers")
            ]
            if now and now[0] >= count:
                return
            assert time.monotonic() < deadline, f"{now} of {count} followers"
            time.sleep(0.05)


@pytest.fixture
def owners(shared_api: Deployment) -> Iterator[tuple[Owner, Owner, Owner]]:
    yield Owner(shared_api, "alice"), Owner(shared_api, "bob"), Owner(shared_api, "carol")


def test_an_owner_past_its_streams_waits_and_others_are_served(
    owners: tuple[Owner, Owner, Owner], shared_api: Deployment
) -> None:
    alice, bob, carol = owners
    held = alice.long_polls(PER_OWNER)
    followers_reach(shared_api, PER_OWNER)  # they are in
    with alice.http() as http:
        events = f"/v1/conversations/{alice.conversation}/events"
        refused = http.get(events, params={"wait": 1})
        problem = assert_problem(refused, 429, "too_many_owner_streams")
        assert refused.headers["retry-after"] == "5"
        assert f"CHATWORKER_API_MAX_STREAMS_PER_OWNER={PER_OWNER}" in problem["detail"]
        stream = http.get(f"/v1/conversations/{alice.conversation}/stream")
        assert_problem(stream, 429, "too_many_owner_streams")
        # a long poll of a message is refused before the message is written
        before = http.get(events).json()["data"]
        waiting = http.post(
            f"/v1/conversations/{alice.conversation}/messages",
            params={"wait": "true"},
            json={"text": "hello"},
        )
        assert_problem(waiting, 429, "too_many_owner_streams")
        assert http.get(events).json()["data"] == before  # nothing written
        assert http.get(events).status_code == 200  # a plain read is not a long poll
    with bob.http() as http:
        started = time.monotonic()
        read = http.get(f"/v1/conversations/{bob.conversation}/events")
        # served, not held like a long poll (which would wait POLL_SECONDS)
        assert read.status_code == 200 and time.monotonic() - started < POLL_SECONDS / 2
    # the process's own cap: bob's two long polls fill it, carol gets 503
    bobs = bob.long_polls(2)
    followers_reach(shared_api, PER_OWNER + 2)
    with carol.http() as http:
        full = http.get(f"/v1/conversations/{carol.conversation}/events", params={"wait": 1})
        assert_problem(full, 503, "too_many_streams")
    # A message in each conversation ends its long polls now, not after POLL_SECONDS.
    for owner in (alice, bob):
        with owner.http() as http:
            woken = http.post(
                f"/v1/conversations/{owner.conversation}/messages", json={"text": "wake"}
            )
            assert woken.status_code == 202, woken.text
            finished_turn(http, woken.json()["turn"]["id"])
    for thread in [*held, *bobs]:
        thread.join(timeout=30)
        assert not thread.is_alive(), "a long poll outlived the event it waited for"
    with alice.http() as http:  # the polls ended: alice's slots are free again
        again = http.get(f"/v1/conversations/{alice.conversation}/events", params={"wait": 0.1})
        assert again.status_code == 200, again.text
