"""`chatworker serve` with nothing configured: the API, the chat page and a worker in one process,
on the SQLite file, the offline demo model and the demo tools, auth `none` on 127.0.0.1."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
from httpx_sse import connect_sse

from app.testing.api_process import ApiProcess
from tests.worker_process import REPO

QUESTION = "What does the Northwind refund policy say about used tents?"


def nothing_configured(home: Path) -> dict[str, str]:
    return {"HOME": str(home), "PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", "")}


def test_serve_with_nothing_configured_streams_a_tool_turn(tmp_path: Path) -> None:
    with ApiProcess(nothing_configured(tmp_path), tmp_path / "serve.log", cwd=tmp_path) as api:
        assert "auth none; embedded worker" in api.log()
        with httpx.Client(base_url=api.url, timeout=60) as http:
            page = http.get("/")
            assert page.status_code == 200 and "text/html" in page.headers["content-type"]
            assert http.get("/v1/ready").json() == {"status": "ok", "database": "ok", "live": "ok"}
            tools = [tool["name"] for tool in http.get("/v1/tools").json()["data"]]
            assert "search_docs" in tools
            conversation = http.post("/v1/conversations", json={"tools": tools}).json()
            path = f"/v1/conversations/{conversation['id']}"
            assert http.post(f"{path}/messages", json={"text": QUESTION}).status_code == 202
            with connect_sse(http, "GET", f"{path}/stream?until=turn_end") as source:
                seen = list(source.iter_sse())
    names = [sse.event for sse in seen]
    assert names[-2:] == ["turn.completed", "stream.end"]
    committed = [sse.json()["message"] for sse in seen if sse.event == "message.committed"]
    assert [m["role"] for m in committed] == ["user", "assistant", "tool", "assistant"]
    assert committed[1]["tool_calls"][0]["name"] == "search_docs"
    assert "northwind-refund-policy.md" in committed[2]["content"]
    # The answer streamed word by word before its commit, and the pieces are the answer.
    deltas = [sse.json() for sse in seen if sse.event == "message.delta"]
    answer = committed[3]
    streamed = "".join(d["text"] for d in deltas if d["message_seq"] == answer["seq"])
    assert len([d for d in deltas if d["message_seq"] == answer["seq"]]) >= 3
    assert streamed == answer["content"]
    assert (tmp_path / "chatworker.db").exists()


def test_serve_refuses_several_processes_without_redis(tmp_path: Path) -> None:
    api = ApiProcess(nothing_configured(tmp_path), tmp_path / "serve.log", cwd=tmp_path)
    api.workers = 2
    try:
        api.start(timeout=30)
    except RuntimeError as exc:
        assert "--workers > 1 needs REDIS_URL" in str(exc)
    else:  # pragma: no cover
        api.stop()
        raise AssertionError("serve --workers 2 started without REDIS_URL")
