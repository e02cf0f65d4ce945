"""The problems no other test provokes (a stream past the process's maximum, a bug), and a check
that every code of the table at the top of `app/api/problems.py` is asserted by some test."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from httpx_sse import connect_sse

from app.api import create_app
from app.api.state import ApiState, get_state
from app.config import load_settings
from app.migrate import upgrade
from tests.api.conftest import Deployment, assert_problem

TESTS = Path(__file__).resolve().parents[1]
PROBLEMS = TESTS.parent / "app" / "api" / "problems.py"


def test_every_problem_code_of_the_table_is_provoked_by_some_test() -> None:
    header = PROBLEMS.read_text().split('"""')[1]
    codes = re.findall(r"^\s+\d{3}\s+([a-z_]+)\s", header, flags=re.MULTILINE)
    assert len(codes) > 30, "the table at the top of app/api/problems.py was not found"
    sources = "\n".join(path.read_text() for path in TESTS.rglob("test_*.py"))
    assert [code for code in codes if f'"{code}"' not in sources] == []


def test_a_stream_past_the_process_s_maximum_is_503_too_many_streams(
    deployment: Deployment,
) -> None:
    api = deployment.start_api(CHATWORKER_API_MAX_STREAMS="1")
    with deployment.http(api, deployment.key("streamer")) as http:
        conversation = http.post("/v1/conversations", json={}).json()["id"]
        path = f"/v1/conversations/{conversation}/stream"
        with connect_sse(http, "GET", path) as held:  # counted in before its headers are sent
            assert held.response.status_code == 200
            refused = http.get(path, params={"until": "rest"})
            assert_problem(refused, 503, "too_many_streams")
            assert refused.headers["Retry-After"] == "5"
        # Once the first is gone (the server notices the closed connection), a stream is served.
        deadline = time.monotonic() + 60
        while (again := http.get(path, params={"until": "rest"})).status_code == 503:
            assert time.monotonic() < deadline, "the closed stream was never counted out"
            time.sleep(0.1)
        assert again.status_code == 200 and "stream.end" in again.text


@pytest.fixture
def buggy(sqlite_url: str) -> Iterator[TestClient]:
    """An API whose context dependency fails as a bug would (FastAPI's own override seam)."""
    upgrade(sqlite_url)
    app = create_app(load_settings(database_url=sqlite_url, api_auth="none"))

    def broken() -> ApiState:
        raise RuntimeError("secret detail of a bug")

    app.dependency_overrides[get_state] = broken
    with TestClient(app, raise_server_exceptions=False) as http:
        yield http


def test_a_bug_is_500_internal_error_logged_with_its_traceback_and_never_shown(
    buggy: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        answer = buggy.get("/v1/conversations")
    body = assert_problem(answer, 500, "internal_error")
    assert "secret detail" not in answer.text and "RuntimeError" not in answer.text
    assert body["detail"] == "an unexpected error; it was logged"
    [record] = [
        r for r in caplog.records if "unhandled error on GET /v1/conversations" in r.message
    ]
    assert record.exc_info is not None and "secret detail of a bug" in str(record.exc_info[1])
