"""Limits over HTTP (the app in process on SQLite, Redis from the test's services):

| request                                             | answer                                  |
|-----------------------------------------------------|-----------------------------------------|
| a key's requests past `CHATWORKER_API_RATE_LIMIT`    | 429 rate_limited, `Retry-After`         |
| any request of a limited key                         | `RateLimit-Limit/-Remaining/-Reset`     |
| another key, another JWT subject                     | its own rate                            |
| a message past the owner's running turns (`reject`)  | 429 too_many_running_turns, Retry-After |

The Redis limiter is shared by every API process (two limiters here, one limit), and lets a
request through when Redis cannot be reached.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import jwt
import pytest
import redis
from fastapi.testclient import TestClient

from app.api import create_app
from app.api.rate import PREFIX, RedisRateLimiter
from app.client import ChatClient
from app.config import load_settings
from app.migrate import upgrade
from tests.api.conftest import JWT_SECRET, assert_problem


@pytest.fixture
def limited(sqlite_url: str, redis_url: str) -> Iterator[tuple[TestClient, ChatClient]]:
    upgrade(sqlite_url)
    settings = load_settings(
        database_url=sqlite_url,
        redis_url=redis_url,
        api_auth="api_key,jwt",
        jwt_secret=JWT_SECRET,
        api_rate_limit="3/minute",
        owner_max_running_turns=1,
        owner_limit_policy="reject",
    )
    client = ChatClient(settings, enqueue=lambda _cid: None)
    with TestClient(create_app(settings)) as http:
        yield http, client
    client.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_each_key_has_its_rate_and_is_told_where_it_stands(
    limited: tuple[TestClient, ChatClient],
) -> None:
    http, client = limited
    alice = bearer(client.admin.create_key("alice")[1])
    bob = bearer(client.admin.create_key("bob")[1])
    answers = [http.get("/v1/conversations", headers=alice) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert [a.headers["RateLimit-Remaining"] for a in answers] == ["2", "1", "0", "0"]
    assert answers[0].headers["RateLimit-Limit"] == "3"
    problem = assert_problem(answers[3], 429, "rate_limited")
    assert "3/minute" in problem["detail"]
    assert 15 <= int(answers[3].headers["Retry-After"]) <= 20  # one request per 20 s
    assert http.get("/v1/conversations", headers=bob).status_code == 200
    token = jwt.encode({"sub": "alice", "exp": int(time.time()) + 60}, JWT_SECRET, "HS256")
    assert http.get("/v1/conversations", headers=bearer(token)).status_code == 200  # its own
    assert http.get("/v1/health").status_code == 200  # not a caller's route


def test_a_message_past_the_owner_s_running_turns_is_429_with_retry_after(
    limited: tuple[TestClient, ChatClient],
) -> None:
    http, client = limited
    alice = bearer(client.admin.create_key("carol")[1])
    first = http.post("/v1/conversations", json={}, headers=alice).json()["id"]
    second = http.post("/v1/conversations", json={}, headers=alice).json()["id"]
    assert (
        http.post(f"/v1/conversations/{first}/messages", json={"text": "a"}, headers=alice)
    ).status_code == 202
    # (the rate: 3 a minute; a fresh key for the last request)
    again = bearer(client.admin.create_key("carol")[1])
    refused = http.post(f"/v1/conversations/{second}/messages", json={"text": "b"}, headers=again)
    problem = assert_problem(refused, 429, "too_many_running_turns")
    assert refused.headers["Retry-After"] == "5"
    assert "already runs 1 turns" in problem["detail"]
    assert client.get_conversation(second).messages == []


def test_the_redis_limit_is_shared_by_every_api_process(redis_url: str) -> None:
    """4 an hour: one per 15 minutes, so a loaded machine's pauses cannot end the interval;
    Redis's clock is moved on by moving the caller's TAT back by one interval."""
    one, other = RedisRateLimiter("4/hour", redis_url), RedisRateLimiter("4/hour", redis_url)
    verdicts = [limiter.check("key:shared") for limiter in (one, other, one, other, one)]
    assert [v.allowed for v in verdicts] == [True, True, True, True, False]
    assert [v.remaining for v in verdicts[:4]] == [3, 2, 1, 0]
    assert 900 - 60 < verdicts[4].retry_after <= 900
    store = redis.Redis.from_url(redis_url)
    try:
        store.decrby(PREFIX + "key:shared", 900 * 1_000_000)
    finally:
        store.close()
    assert other.check("key:shared").allowed
    assert not one.check("key:shared").allowed


def test_without_redis_a_request_is_let_through() -> None:
    down = RedisRateLimiter("1/hour", "redis://127.0.0.1:1/0")
    assert all(down.check("key:x").allowed for _ in range(3))


@pytest.mark.parametrize("window", [0.0, 3.0])
def test_a_revoked_key_is_refused_once_the_key_cache_s_window_has_passed(
    sqlite_url: str, window: float
) -> None:
    """The stated revocation delay (`CHATWORKER_API_KEY_CACHE_SECONDS`): a key a process saw is
    taken for up to that long after its revocation, then refused; 0: refused at once."""
    upgrade(sqlite_url)
    settings = load_settings(database_url=sqlite_url, api_key_cache_seconds=window)
    client = ChatClient(settings, enqueue=lambda _cid: None)
    with TestClient(create_app(settings)) as http:
        view, key = client.admin.create_key("alice")
        assert http.get("/v1/conversations", headers=bearer(key)).status_code == 200
        client.admin.revoke_key(view.id)
        revoked_at = time.monotonic()
        answer = http.get("/v1/conversations", headers=bearer(key))
        if window:
            assert answer.status_code == 200  # still within the window
            time.sleep(max(0.0, window + 0.1 - (time.monotonic() - revoked_at)))
            answer = http.get("/v1/conversations", headers=bearer(key))
        assert_problem(answer, 401, "api_key_revoked")
    client.close()
