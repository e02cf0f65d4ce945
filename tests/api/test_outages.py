"""The HTTP API while its database or its Redis is down, through real API and worker processes
on a PostgreSQL cluster and a redis-server of the test's own (the machine's shared servers are
never stopped).

    outage                                         what the API does
    ---------------------------------------------  ---------------------------------------------
    PostgreSQL stopped (immediate shutdown: every  every request that needs it: 503
      backend killed) while a turn runs and a        `database_unavailable` with `Retry-After`,
      reader follows the stream                      never a 500; /v1/ready 503, /v1/health 200;
                                                     the open stream pauses, keeps its place
    PostgreSQL started again                       requests succeed again; a submit refused
                                                     during the outage, retried with its
                                                     Idempotency-Key, runs exactly once; every
                                                     message is there; the open stream delivered
                                                     every committed event once
    Redis SIGKILLed while the answer streams       the open stream still delivers every
                                                     committed event (it reads the log instead),
                                                     ends with the answer and `turn.completed`
    a message submitted while Redis is down        202 with `enqueued` false; the worker's
                                                     recovery sweep runs the turn; its stream ends
                                                     with the answer
    Redis started again                            the deltas are live again
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from app.migrate import upgrade
from app.testing.fake_llm import FakeLLMServer
from tests.api.conftest import JWT_SECRET, Deployment
from tests.api.private_services import (
    Item,
    PrivatePostgres,
    PrivateRedis,
    answer_of,
    assert_deltas_consistent,
    assert_each_event_once,
    boot,
    committed_of,
    deltas_of,
    private_postgres,
    read_sse,
    wait_until,
    without_turn,
)
from tests.invariants import violations
from tests.worker_process import worker_environment

ANSWER = "The ledger balances: every entry was written once, and none of them was lost."


def deployment_on(
    database_url: str, redis_url: str, fake_llm: FakeLLMServer, tmp: Path
) -> Deployment:
    """The deployment of tests/api/conftest.py, on these servers."""
    env = worker_environment(
        database_url,
        redis_url,
        fake_llm.api_base,
        tmp / "ledger.jsonl",
        tmp / "notes.jsonl",
        CHATWORKER_API_AUTH="api_key,jwt",
        CHATWORKER_JWT_SECRET=JWT_SECRET,
        CHATWORKER_API_HEARTBEAT_SECONDS="1",
    )
    return Deployment(database_url, redis_url, fake_llm, tmp, env)


def token_of(owner: str) -> str:
    claims = {"sub": owner, "exp": int(time.time()) + 3600}
    return jwt.encode(claims, JWT_SECRET, algorithm="HS256")


class Follower(threading.Thread):
    """Reads a conversation's stream from the start until told to stop."""

    def __init__(self, http: httpx.Client, conversation_id: str) -> None:
        super().__init__(daemon=True)
        self.http = http
        self.conversation_id = conversation_id
        self.items: list[Item] = []
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            read_sse(
                self.http,
                self.conversation_id,
                after="0",
                until="never",
                stop=lambda _items: self.stopping.is_set(),
                on_item=self.items.append,
            )
        except BaseException as exc:
            self.error = exc

    def seen(self, event: str, **fields: Any) -> bool:
        return any(
            item.event == event and all(item.data.get(k) == v for k, v in fields.items())
            for item in list(self.items)
        )

    def finish(self) -> list[Item]:
        self.stopping.set()  # honoured at the next item or ping (1 s)
        self.join(timeout=30)
        assert not self.is_alive() and self.error is None, self.error
        return self.items


# --- PostgreSQL ---------------------------------------------------------------------------------


@pytest.fixture
def postgres() -> Iterator[PrivatePostgres]:
    with private_postgres() as server:
        yield server


def assert_unavailable(response: httpx.Response) -> None:
    """A 503 `database_unavailable` problem with `Retry-After`."""
    request = f"{response.request.method} {response.request.url.path}"
    assert response.status_code == 503, (request, response.status_code, response.text)
    assert response.headers["content-type"] == "application/problem+json", request
    problem = response.json()
    assert problem["code"] == "database_unavailable", (request, problem)
    assert problem["status"] == 503
    assert int(response.headers["retry-after"]) > 0, request


def test_postgres_restarted_under_requests_answers_503_and_loses_nothing(
    postgres: PrivatePostgres, redis_url: str, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    database_url = postgres.create_database("chatworker")
    upgrade(database_url)
    deployment = deployment_on(database_url, redis_url, fake_llm, tmp_path)
    try:
        run_postgres_outage(deployment, postgres)
    finally:
        deployment.close()
    assert violations(database_url, at_rest=True) == []


def run_postgres_outage(deployment: Deployment, postgres: PrivatePostgres) -> None:
    fake_llm = deployment.fake_llm
    # (the first script that matches serves a request: the later turn's first, since its
    # transcript holds the earlier turn's words too; by iteration: a re-sent request is answered
    # the same)
    fake_llm.script([{"text": "two"}], match="second question", mode="by_iteration")
    fake_llm.script([{"text": "one", "delay": 4}], match="first question", mode="by_iteration")
    boot(deployment)
    key = deployment.key("dana")
    with (
        deployment.http(token=key) as http,
        deployment.http(token=token_of("dana")) as with_jwt,
        deployment.http(token=key) as following,
    ):
        conversation_id = http.post("/v1/conversations", json={}).json()["id"]
        base = f"/v1/conversations/{conversation_id}"
        first = http.post(f"{base}/messages", json={"text": "first question"})
        assert first.status_code == 202, first.text
        first_turn = first.json()["turn"]["id"]
        follower = Follower(following, conversation_id)
        follower.start()
        # the worker has claimed the turn and waits on the model (4 s) when the database goes
        wait_until(lambda: follower.seen("turn.started"), 60, "the turn started")

        postgres.stop("immediate")
        outage_started = time.monotonic()
        second = {"text": "second question", "on_busy": "enqueue"}
        second_key = {"Idempotency-Key": f"second-{uuid.uuid4()}"}
        submits = [
            (client, "POST", f"{base}/messages", {"json": second, "headers": second_key})
            for client in (http, with_jwt)
        ]
        for _round in range(2):  # the first finds the pool's dead connections, the second none
            for client, method, path, options in [*submits, *requests(http, with_jwt, base)]:
                assert_unavailable(client.request(method, path, **options))
        ready = http.get("/v1/ready")
        assert ready.status_code == 503 and ready.json()["database"] != "ok", ready.text
        assert "retry-after" in ready.headers
        assert http.get("/v1/health").status_code == 200
        time.sleep(max(0.0, 5 - (time.monotonic() - outage_started)))  # past the model's answer

        postgres.start()
        wait_until_answering(http, base)
        retried = http.post(f"{base}/messages", json=second, headers=second_key)
        assert retried.status_code == 202, retried.text
        assert retried.json()["repeated"] is False
        second_turn = retried.json()["turn"]["id"]
        again = with_jwt.post(f"{base}/messages", json=second, headers=second_key)
        assert again.status_code == 202 and again.json()["repeated"] is True, again.text
        assert again.json()["turn"]["id"] == second_turn

        def finished(turn_id: str) -> bool:
            return http.get(f"/v1/turns/{turn_id}").json()["status"] in ("completed", "failed")

        wait_until(lambda: finished(first_turn) and finished(second_turn), 90, "both turns ended")
        wait_until(lambda: follower.seen("turn.completed", turn_id=second_turn), 30, "follower")
        items = follower.finish()

        turns = [http.get(f"/v1/turns/{t}").json() for t in (first_turn, second_turn)]
        assert [t["status"] for t in turns] == ["completed", "completed"], turns
        conversation = http.get(base).json()
        replay = read_sse(http, conversation_id, after="0")
    assert conversation["status"] == "idle" and conversation["turn_number"] == 2
    transcript = [(m["role"], m["content"]) for m in conversation["messages"]]
    assert transcript == [
        ("user", "first question"),
        ("assistant", "one"),
        ("user", "second question"),
        ("assistant", "two"),
    ]
    asked = fake_llm.requests(match="second question")
    assert len(asked) == 1, asked  # the retried submit ran once
    # the stream stayed open through the outage: every event once, as the log has them
    assert_each_event_once(items)
    assert without_turn(items) == without_turn(replay)
    assert answer_of(items) == "two"


def requests(
    http: httpx.Client, with_jwt: httpx.Client, base: str
) -> list[tuple[httpx.Client, str, str, dict[str, Any]]]:
    """Every route that needs the database (the conversation's turn, another conversation)."""
    conversation = base.rsplit("/", 1)[-1]
    return [
        (http, "GET", base, {}),
        (with_jwt, "GET", base, {}),  # a token needs no database to authenticate: the read does
        (http, "GET", "/v1/conversations", {}),
        (http, "POST", "/v1/conversations", {"json": {}}),
        (http, "POST", "/v1/conversations", {"json": {"id": conversation}}),
        (http, "GET", f"{base}/events", {}),
        (http, "GET", f"{base}/events?wait=2", {}),
        (http, "GET", f"{base}/stream?until=rest", {}),
        (http, "GET", f"{base}/stream?after=1", {"headers": {"Last-Event-ID": "2"}}),
        (http, "POST", f"{base}/cancel", {}),
        (http, "POST", f"{base}/retry", {}),
        (http, "DELETE", base, {}),
        (http, "GET", f"/v1/turns/{uuid.uuid4()}", {}),
        (http, "POST", f"/v1/turns/{uuid.uuid4()}/cancel", {}),
        (http, "GET", "/v1/tools", {}),
    ]


def wait_until_answering(http: httpx.Client, path: str) -> None:
    """Until the database answers again: each answer meanwhile a 503 problem, never a 500."""

    def back() -> bool:
        response = http.get(path)
        if response.status_code != 200:
            assert_unavailable(response)
        return response.status_code == 200

    wait_until(back, 60, "the API answering again")


# --- Redis --------------------------------------------------------------------------------------


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.kill()


def test_redis_killed_mid_answer_the_stream_still_delivers_every_event(
    database_url: str, own_redis: PrivateRedis, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    deployment = deployment_on(database_url, own_redis.url, fake_llm, tmp_path)
    try:
        run_redis_outage(deployment, own_redis)
    finally:
        deployment.close()


def run_redis_outage(deployment: Deployment, own_redis: PrivateRedis) -> None:
    fake_llm = deployment.fake_llm
    # (the first script that matches serves a request: the later turns' first, since their
    # transcripts hold the earlier turns' words too)
    fake_llm.script(
        [{"text": ANSWER, "stream": True, "chunks": 20, "chunk_delay": 0.1}], match="live again"
    )
    fake_llm.script([{"text": ANSWER, "stream": True, "chunks": 10}], match="once more")
    fake_llm.script(
        [
            {"tool_calls": [{"id": "call_add", "name": "add", "arguments": {"a": 2, "b": 3}}]},
            {"text": ANSWER, "stream": True, "chunks": 20, "chunk_delay": 0.15},
        ],
        match="add 2 and 3",
        mode="by_iteration",
    )
    boot(deployment)
    http = deployment.http(token=deployment.key("erin"))
    conversation_id = http.post("/v1/conversations", json={"tools": ["add"]}).json()["id"]
    base = f"/v1/conversations/{conversation_id}"

    # Redis dies while the answer streams (the turn was picked up through the queue)
    submitted = http.post(f"{base}/messages", json={"text": "add 2 and 3"})
    assert submitted.status_code == 202 and submitted.json()["enqueued"] is True

    def kill_at_the_third_delta(item: Item) -> None:
        if item.event == "message.delta" and item.data["index"] == 2:
            own_redis.kill()

    items = read_sse(
        http, conversation_id, after="0", until="turn_end", on_item=kill_at_the_third_delta
    )
    assert own_redis.process is None, "the answer streamed"
    assert [i.event for i in items[-2:]] == ["turn.completed", "stream.end"], items
    assert_each_event_once(items)
    assert_deltas_consistent(items)
    assert answer_of(items) == ANSWER
    shown = "".join(i.data["text"] for i in deltas_of(items))
    assert ANSWER.startswith(shown)
    wait_until(lambda: http.get(base).json()["status"] == "idle", 30, "the conversation idle")
    replay = read_sse(http, conversation_id, after="0")  # the log alone: Redis is down
    assert [i.event for i in replay][-3:] == ["turn.completed", "status.changed", "stream.end"]
    assert without_turn(items) == without_turn(replay)[: len(committed_of(items))]
    assert http.get("/v1/ready").json()["live"] != "ok"

    # a message while Redis is down: no doorbell, the recovery sweep runs it
    after = replay[-2].id
    submitted = http.post(f"{base}/messages", json={"text": "once more"})
    assert submitted.status_code == 202, submitted.text
    assert submitted.json()["enqueued"] is False, submitted.json()
    items = read_sse(http, conversation_id, after=after, until="turn_end")
    assert [i.event for i in items[-2:]] == ["turn.completed", "stream.end"], items
    assert answer_of(items) == ANSWER
    assert deltas_of(items) == []  # nowhere to stream them

    # Redis back: the worker's queue and the API's live channel reconnect by themselves
    own_redis.start()
    wait_until(lambda: http.get(base).json()["status"] == "idle", 30, "the conversation idle")
    after = read_sse(http, conversation_id, after="0")[-2].id
    submitted = http.post(f"{base}/messages", json={"text": "live again"})
    assert submitted.status_code == 202, submitted.text
    items = read_sse(http, conversation_id, after=after, until="turn_end")
    assert [i.event for i in items[-2:]] == ["turn.completed", "stream.end"], items
    assert_deltas_consistent(items)
    assert len(deltas_of(items)) > 3, "the answer's deltas are live again"
    assert answer_of(items) == ANSWER
    assert http.get("/v1/ready").json()["live"] == "ok"
    http.close()
