"""Request bodies are bounded before the work they could cause, over real HTTP against a real
`chatworker serve` process whose memory is read from /proc: the caller is known before a byte of
the body is read (401 unread), each route has its own limit (only the routes files go to take a
message's files: 413 `request_too_large` at once from its Content-Length, or as a chunked body
streams in past it), and the JSON a known caller sends is refused before it is built when it holds
more values than any request needs.

The bodies are 27.3 MB of `[{},{},...]` (9.1 million objects): within the largest limit, the
files', and ~700 MB of Python objects once parsed. The API's peak memory (VmHWM, reset before
each test) must stay far below one such body's cost, and `/v1/health` must answer throughout.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import Deployment, assert_problem, owner_name

pytestmark = pytest.mark.xdist_group("api-request_bodies")

OBJECTS = 9_100_000
BODY = b"[" + b"{}," * (OBJECTS - 1) + b"{}]"  # 27.3 MB
MB = 2**20
#: What the API may grow by while it refuses every body of a test: a fraction of one body.
UNREAD_BOUND_MB = 64
CHUNK = 256 * 1024


def memory_kb(pid: int, field: str) -> int:
    """`VmHWM` (the peak since the last reset) or `VmRSS` of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def reset_peak(pid: int) -> int:
    """Reset the process's VmHWM to its resident size now (Linux's clear_refs `5`); that size."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return memory_kb(pid, "VmHWM")


def chunked(body: bytes) -> Iterator[bytes]:
    """`body` sent without a Content-Length, in 256 KiB chunks."""
    for start in range(0, len(body), CHUNK):
        yield body[start : start + CHUNK]


@pytest.fixture(scope="module")
def owner(shared_api: Deployment) -> dict[str, str]:
    name = owner_name("bodies")
    key = shared_api.key(name)
    with shared_api.http(token=key) as http:
        created = http.post("/v1/conversations", json={})
        assert created.status_code == 201, created.text
    return {"key": key, "conversation": created.json()["id"]}


def in_parallel(sends: list[Callable[[], httpx.Response]], url: str) -> list[httpx.Response]:
    """Each send on a thread of its own, all at once; `/v1/health` asked meanwhile, each
    answer required (not timed)."""
    answers: list[Any] = [None] * len(sends)

    def run(index: int) -> None:
        try:
            answers[index] = sends[index]()
        except Exception as exc:  # (kept: the test shows it)
            answers[index] = exc

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(sends))]
    for thread in threads:
        thread.start()
    with httpx.Client(base_url=url, timeout=120) as health:
        while any(thread.is_alive() for thread in threads):
            assert health.get("/v1/health").status_code == 200
    for thread in threads:
        thread.join()
    failed = [answer for answer in answers if not isinstance(answer, httpx.Response)]
    assert not failed, failed
    return answers


def post(url: str, path: str, content: Any, key: str | None = None) -> httpx.Response:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    with httpx.Client(base_url=url, timeout=120) as http:
        return http.post(path, content=content, headers=headers)


def test_bodies_without_credentials_or_over_a_small_limit_are_refused_unread(
    shared_api: Deployment, owner: dict[str, str]
) -> None:
    api = shared_api.apis[0]
    assert api.process is not None
    pid = api.process.pid
    messages = f"/v1/conversations/{owner['conversation']}/messages"
    # (the first answers of their kinds warm the process: its baseline is measured after them)
    post(api.url, "/v1/conversations", b"{}")
    post(api.url, "/v1/conversations", b"{" * 2 * MB, owner["key"])
    baseline = reset_peak(pid)

    def anonymous(path: str, content: Any) -> Callable[[], httpx.Response]:
        return lambda: post(api.url, path, content)

    def keyed(path: str, content: Any) -> Callable[[], httpx.Response]:
        return lambda: post(api.url, path, content, owner["key"])

    answers = in_parallel(
        [
            anonymous("/v1/conversations", BODY),
            anonymous("/v1/conversations", BODY),
            anonymous(messages, BODY),  # a route that takes files: still unread
            anonymous(messages, chunked(BODY)),
            anonymous("/v1/responses", BODY),
            anonymous("/v1/ai-sdk/chat", chunked(BODY)),
            keyed("/v1/conversations", BODY),  # a route that takes no files: its small limit
            keyed("/v1/conversations", chunked(BODY)),
            keyed(f"/v1/conversations/{owner['conversation']}/fork", BODY),
        ],
        api.url,
    )
    grew = (memory_kb(pid, "VmHWM") - baseline) / 1024
    assert grew < UNREAD_BOUND_MB, f"the API grew by {grew:.0f} MB refusing unread bodies"
    for answer in answers[:6]:
        body = answer.json()
        assert answer.status_code == 401, (answer.status_code, answer.text[:300])
        assert body.get("code", body.get("error", {}).get("code")) == "unauthenticated", body
    for answer in answers[6:]:
        assert_problem(answer, 413, "request_too_large")
    with shared_api.http() as http:
        assert http.get("/v1/health").status_code == 200


def test_json_of_more_values_than_any_request_needs_is_refused_before_it_is_built(
    shared_api: Deployment, owner: dict[str, str]
) -> None:
    api = shared_api.apis[0]
    assert api.process is not None
    pid = api.process.pid
    messages = f"/v1/conversations/{owner['conversation']}/messages"
    baseline = reset_peak(pid)
    answers = [post(api.url, messages, BODY, owner["key"]) for _ in range(2)]  # one at a time
    # Each body is read (its route takes files; joined from its chunks) and decoded, and the
    # values before the bound are built: ~3.4 times its size, where parsing it whole cost 25.
    grew = (memory_kb(pid, "VmHWM") - baseline) / 1024
    assert grew < 5 * len(BODY) / MB, f"the API grew by {grew:.0f} MB refusing {len(BODY)} bytes"
    for answer in answers:
        assert "250,000 values" in assert_problem(answer, 413, "request_too_large")["detail"]
    with shared_api.http(token=owner["key"]) as http:
        assert http.get(f"/v1/conversations/{owner['conversation']}").status_code == 200
        assert http.get("/v1/health").status_code == 200
