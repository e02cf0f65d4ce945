"""The API process's cache of API key owners: a key's owner asked once per its window, a refusal
asked every time, the window the stated revocation delay, the oldest keys dropped past the size."""

from __future__ import annotations

import pytest

from app.api.key_cache import KeyCache
from app.client.keys import KeyRefused


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Lookups:
    def __init__(self, owners: dict[str, str]) -> None:
        self.owners = owners
        self.asked: list[str] = []

    def __call__(self, presented: str) -> str:
        self.asked.append(presented)
        if presented not in self.owners:
            raise KeyRefused("the API key was revoked", "api_key_revoked")
        return self.owners[presented]


def test_a_key_s_owner_is_asked_once_per_window_and_again_after_it() -> None:
    clock, lookup = Clock(), Lookups({"cwk_a": "alice"})
    cache = KeyCache(5, clock=clock)
    assert [cache.owner("cwk_a", lookup) for _ in range(3)] == ["alice"] * 3
    assert lookup.asked == ["cwk_a"]
    # revoked now: still taken until the window ends (the stated delay), refused after it
    del lookup.owners["cwk_a"]
    clock.now += 4.9
    assert cache.owner("cwk_a", lookup) == "alice"
    clock.now += 0.2
    with pytest.raises(KeyRefused):
        cache.owner("cwk_a", lookup)


def test_a_refusal_is_never_kept_and_no_window_asks_every_time() -> None:
    lookup = Lookups({})
    cache = KeyCache(5, clock=Clock())
    for _ in range(2):
        with pytest.raises(KeyRefused):
            cache.owner("cwk_x", lookup)
    assert lookup.asked == ["cwk_x", "cwk_x"]
    off, lookup = KeyCache(0), Lookups({"cwk_a": "alice"})
    assert [off.owner("cwk_a", lookup) for _ in range(2)] == ["alice", "alice"]
    assert len(lookup.asked) == 2


def test_the_oldest_keys_go_past_the_size() -> None:
    lookup = Lookups({f"cwk_{n}": f"owner{n}" for n in range(3)})
    cache = KeyCache(60, clock=Clock(), size=2)
    for n in range(3):
        cache.owner(f"cwk_{n}", lookup)
    cache.owner("cwk_0", lookup)  # dropped: asked again
    cache.owner("cwk_2", lookup)  # kept
    assert lookup.asked == ["cwk_0", "cwk_1", "cwk_2", "cwk_0"]


def test_kept_answers_without_a_lookup_only_within_the_window() -> None:
    """What the API's event loop asks first: a kept owner costs no thread hop; anything else
    (unknown, expired, the cache off) is None, and the route looks the key up in a thread."""
    clock, lookup = Clock(), Lookups({"cwk_a": "alice"})
    cache = KeyCache(5, clock=clock)
    assert cache.kept("cwk_a") is None
    cache.owner("cwk_a", lookup)
    assert cache.kept("cwk_a") == "alice" and lookup.asked == ["cwk_a"]
    clock.now += 5.1
    assert cache.kept("cwk_a") is None
    assert KeyCache(0, clock=clock).kept("cwk_a") is None
