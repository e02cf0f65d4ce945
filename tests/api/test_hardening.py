"""Hardening over real HTTP. No input gets a 500: every operation of the OpenAPI
document (read at test time, so a new route is swept the day it exists) is sent, for each field
of its JSON body, a string with a NUL, a lone surrogate, `NaN`, `1e999` and an object holding
`NaN`; each string query parameter a NUL and bytes that are not UTF-8; and JWTs whose `sub`
holds a NUL or a lone surrogate. Each answer must be below 500 (a refusal names what was wrong;
a few are accepted as harmless).

The paths name the caller's own conversation, turn and webhook, so a body reaches the code that
stores it; streams are only opened (their status read) and closed. The webhook's URL is on
loopback with nothing listening: nothing leaves the machine. And every answer (the page, the
API, a stream, a problem) carries the security headers."""

from __future__ import annotations

import contextlib
import socket
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import jwt
import pytest

from tests.api.conftest import JWT_SECRET, Deployment, finished_turn, owner_name

pytestmark = pytest.mark.xdist_group("api-hardening")

HEADER_TIMEOUT_S = 2
BODY_TIMEOUT_S = 2
FAILURES = 10
API_ENV = {
    "CHATWORKER_API_HEADER_TIMEOUT_SECONDS": str(HEADER_TIMEOUT_S),
    "CHATWORKER_API_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT_S),
    "CHATWORKER_API_AUTH_FAILURE_LIMIT": f"{FAILURES}/minute",
}

NUL = '"a\\u0000b"'
SURROGATE = '"a\\ud800b"'
VALUES = {
    "a NUL": NUL,
    "a lone surrogate": SURROGATE,
    "NaN": "NaN",
    "1e999": "1e999",
    "an object holding NaN": '{"k": NaN}',
    "a list holding a NUL": f"[{NUL}]",
}
JSON = {"Content-Type": "application/json"}
QUERY_VALUES = {"a NUL": "%00", "bytes that are not UTF-8": "%ED%A0%80", "a NUL inside": "a%00b"}


def resolved(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        schema = spec["components"]["schemas"][name]
    return schema


def body_fields(spec: dict[str, Any], operation: dict[str, Any]) -> list[str]:
    content = operation.get("requestBody", {}).get("content", {})
    schema = content.get("application/json", {}).get("schema")
    if schema is None:
        return []
    schema = resolved(spec, schema)
    fields = list(schema.get("properties", {}))
    return fields or ["model", "input", "id", "messages", "text", "url"]  # a free-form body


@pytest.fixture(scope="module")
def mine(shared_api: Deployment) -> Iterator[dict[str, str]]:
    owner = owner_name("no-500")
    key = shared_api.key(owner)
    with shared_api.http(token=key) as http:
        conversation = http.post("/v1/conversations", json={}).json()["id"]
        note = {"name": "note.txt", "data": "aGk="}  # (a text file: any model takes it)
        submitted = http.post(
            f"/v1/conversations/{conversation}/messages", json={"text": "hi", "files": [note]}
        )
        turn = submitted.json()["turn"]["id"]
        (file,) = http.get(f"/v1/conversations/{conversation}").json()["messages"][0]["files"]
        assert finished_turn(http, turn)["status"] == "completed"
        webhook = http.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/hooks"}).json()["id"]
    yield {
        "owner": owner,
        "key": key,
        "conversation_id": conversation,
        "turn_id": turn,
        "webhook_id": webhook,
        "delivery_id": "1",
        "response_id": "resp_" + uuid.UUID(turn).hex,
        "chat_id": conversation,
        "seq": "1",
        "file_id": file["id"],
    }


def answered(http: httpx.Client, method: str, url: str, **options: Any) -> int:
    """The status (a stream's, from its head: it is closed at once)."""
    with http.stream(method, url, timeout=15, **options) as response:
        return response.status_code


def test_no_field_of_any_body_and_no_query_value_gets_a_500(
    shared_api: Deployment, mine: dict[str, str]
) -> None:
    failures: list[str] = []
    checked = 0
    with shared_api.http(token=mine["key"]) as http:
        spec = http.get("/openapi.json").json()
        for path, item in spec["paths"].items():
            for method, operation in item.items():
                if method not in ("get", "post", "put", "patch", "delete"):
                    continue
                url = path.format(**mine)
                for field in body_fields(spec, operation):
                    for what, value in VALUES.items():
                        raw = f'{{"{field}": {value}}}'.encode()
                        status = answered(
                            http,
                            method.upper(),
                            url,
                            content=raw,
                            headers={"content-type": "application/json"},
                        )
                        checked += 1
                        if status >= 500:
                            failures.append(f"{method.upper()} {path} {field}={what}: {status}")
                for parameter in operation.get("parameters", []):
                    if parameter["in"] != "query":
                        continue
                    for what, value in QUERY_VALUES.items():
                        status = answered(
                            http, method.upper(), f"{url}?{parameter['name']}={value}"
                        )
                        checked += 1
                        if status >= 500:
                            name = parameter["name"]
                            failures.append(f"{method.upper()} {path} ?{name}={what}: {status}")
    assert failures == [], "\n".join(failures)
    assert checked > 200


@pytest.mark.parametrize("sub", ["a\x00b", "a\ud800b"], ids=["a NUL", "a lone surrogate"])
def test_a_signed_jwt_whose_subject_cannot_be_an_owner_is_refused(
    shared_api: Deployment, sub: str
) -> None:
    claims = {"sub": sub, "exp": int(time.time()) + 600}
    signed = jwt.encode(claims, JWT_SECRET, algorithm="HS256")
    with shared_api.http(token=signed) as http:
        refused = http.get("/v1/conversations")
    assert refused.status_code == 401, refused.text
    assert refused.json()["code"] == "invalid_token"


def test_every_answer_carries_the_security_headers(
    shared_api: Deployment, mine: dict[str, str]
) -> None:
    with shared_api.http(token=mine["key"]) as http:
        answers = [
            http.get("/"),
            http.get("/v1/health"),
            http.get("/v1/conversations/not-an-id"),
            http.get(f"/v1/conversations/{mine['conversation_id']}/events"),
        ]
        with http.stream(
            "GET", f"/v1/conversations/{mine['conversation_id']}/stream", params={"until": "rest"}
        ) as stream:
            answers.append(stream)  # type: ignore[arg-type]
    for answer in answers:
        headers = answer.headers
        assert "frame-ancestors 'none'" in headers["content-security-policy"], answer.url
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["x-frame-options"] == "DENY"
        assert headers["referrer-policy"] == "no-referrer"


# --- the server's own limits on a connection ----------------------------------------------------


def health_latencies(http: httpx.Client, count: int = 20) -> list[float]:
    found = []
    for _ in range(count):
        started = time.perf_counter()
        assert http.get("/v1/health").status_code == 200
        found.append(time.perf_counter() - started)
    return found


def slow_head(host: str, port: int, answers: list[bytes]) -> None:
    """A request head sent a byte every 0.2 s (it would take minutes): what the server answers."""
    with socket.create_connection((host, port), timeout=30) as sock:
        head = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 2000
        try:
            for byte in head:
                sock.sendall(bytes([byte]))
                time.sleep(0.2)
        except OSError:
            pass  # the server closed it
        answers.append(_read_all(sock))


def huge_head(host: str, port: int, answers: list[bytes]) -> None:
    """A 96 MB header, as fast as the server takes it."""
    with socket.create_connection((host, port), timeout=30) as sock:
        try:
            sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Huge: ")
            chunk = b"a" * 2**20
            for _ in range(96):
                sock.sendall(chunk)
        except OSError:
            pass  # the server closed it
        answers.append(_read_all(sock))


def _read_all(sock: socket.socket) -> bytes:
    found = b""
    with contextlib.suppress(OSError):
        while piece := sock.recv(65536):
            found += piece
    return found


def test_slow_and_huge_request_heads_are_cut_off_and_others_are_served(
    shared_api: Deployment,
) -> None:
    url = httpx.URL(shared_api.apis[0].url)
    host, port = url.host, url.port or 80
    with shared_api.http() as http:
        floor = statistics.median(health_latencies(http))
        slow: list[bytes] = []
        huge: list[bytes] = []
        attackers = [
            *(threading.Thread(target=slow_head, args=(host, port, slow)) for _ in range(20)),
            *(threading.Thread(target=huge_head, args=(host, port, huge)) for _ in range(2)),
        ]
        started = time.monotonic()
        for thread in attackers:
            thread.start()
        time.sleep(0.5)
        during = statistics.median(health_latencies(http))
        for thread in attackers:
            thread.join(timeout=60)
        took = time.monotonic() - started
    assert len(slow) == 20 and all(a.startswith(b"HTTP/1.1 408") for a in slow), slow[:2]
    assert took < HEADER_TIMEOUT_S + 10, took  # cut off at the deadline, not minutes later
    assert len(huge) == 2 and all(a.startswith(b"HTTP/1.1 431") for a in huge), huge
    # /v1/health while they ran, against its own floor measured just before
    assert during < max(10 * floor, floor + 0.25), (floor, during)


def test_a_body_sent_slowly_is_cut_off_and_a_long_stream_is_not(
    shared_api: Deployment, mine: dict[str, str]
) -> None:
    url = httpx.URL(shared_api.apis[0].url)
    with socket.create_connection((url.host, url.port or 80), timeout=30) as sock:
        head = (
            "POST /v1/conversations HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {mine['key']}\r\ncontent-type: application/json\r\n"
            "content-length: 400\r\n\r\n"
        )
        sock.sendall(head.encode())
        started = time.monotonic()
        with contextlib.suppress(OSError):
            for _ in range(400):
                sock.sendall(b" ")
                time.sleep(0.1)
                if time.monotonic() - started > BODY_TIMEOUT_S + 5:
                    break
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"request_timeout" in answer
    # a stream outlives the body's deadline (its wait for the client's disconnect is free)
    with shared_api.http(token=mine["key"]) as http:
        stream_url = f"/v1/conversations/{mine['conversation_id']}/stream"
        with http.stream("GET", stream_url, params={"until": "never"}) as stream:
            opened = time.monotonic()
            lines = stream.iter_lines()
            while time.monotonic() - opened < BODY_TIMEOUT_S + 1.5:
                next(lines)  # events, then the heartbeat's comments (every second)
            assert not stream.is_closed


def test_the_rest_of_a_body_answered_unread_is_dropped_within_the_body_s_deadline(
    shared_api: Deployment, mine: dict[str, str]
) -> None:
    url = httpx.URL(shared_api.apis[0].url)
    head = (
        "POST /v1/conversations HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {mine['key']}\r\ncontent-type: application/json\r\n"
        "content-length: 10000000\r\n\r\n"  # over the route's limit: answered at once
    ).encode()
    with socket.create_connection((url.host, url.port or 80), timeout=30) as sock:
        sock.sendall(head)
        answer = b""
        while b"request_too_large" not in answer:
            piece = sock.recv(65536)
            assert piece, answer
            answer += piece
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        started = time.monotonic()
        with contextlib.suppress(OSError):
            while time.monotonic() - started < BODY_TIMEOUT_S + 10:
                sock.sendall(b" " * 1000)  # the rest trickles in, dropped as it comes
                time.sleep(0.1)
        took = time.monotonic() - started
        assert _read_all(sock) == b""  # closed, nothing more said
    assert took < BODY_TIMEOUT_S + 10, f"still open {took:.1f} s after the answer"
    # One that arrives in full in time is dropped: its client goes on.
    with shared_api.http(token=mine["key"]) as http:
        refused = http.post("/v1/conversations", content=b"[" * 2_000_000, headers=JSON)
        assert refused.status_code == 413
        assert http.get(f"/v1/conversations/{mine['conversation_id']}").status_code == 200
        assert http.get("/v1/tools").status_code == 200


def test_failed_authentications_from_an_address_are_limited_and_good_ones_are_not(
    shared_api: Deployment, mine: dict[str, str]
) -> None:
    statuses = []
    with shared_api.http(token="cwk_" + "0" * 32 + "_bad") as bad:
        for _ in range(FAILURES + 5):
            refused = bad.get("/v1/conversations")
            statuses.append(refused.status_code)
            if refused.status_code == 429:
                break
    assert statuses[-1] == 429, statuses
    assert refused.json()["code"] == "rate_limited" and int(refused.headers["retry-after"]) >= 1
    # the other tests of the module fail at most two authentications before this one
    assert FAILURES - 2 <= statuses.count(401) <= FAILURES, statuses
    with shared_api.http(token=mine["key"]) as good:
        assert good.get("/v1/conversations").status_code == 200  # good credentials still work
