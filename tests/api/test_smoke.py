"""A tool turn through a real API process and a real worker, over HTTP."""

from __future__ import annotations

from httpx_sse import connect_sse

from tests.api.conftest import Deployment


def test_a_tool_turn_over_http_streams_its_events_and_answers(api: Deployment) -> None:
    api.fake_llm.script(
        [
            {"tool_calls": [{"id": "call_add", "name": "add", "arguments": {"a": 2, "b": 3}}]},
            {"text": "2 + 3 = 5", "stream": True, "chunks": 3},
        ],
        mode="by_iteration",
    )
    with api.http(token=api.key("alice")) as http:
        created = http.post("/v1/conversations", json={"tools": ["add"]})
        assert created.status_code == 201, created.text
        conversation = created.json()
        submitted = http.post(
            f"/v1/conversations/{conversation['id']}/messages", json={"text": "add 2 and 3"}
        )
        assert submitted.status_code == 202, submitted.text
        turn_id = submitted.json()["turn"]["id"]
        assert submitted.headers["location"] == f"/v1/turns/{turn_id}"
        with connect_sse(
            http, "GET", f"/v1/conversations/{conversation['id']}/stream?until=turn_end"
        ) as source:
            assert source.response.headers["cache-control"] == "no-cache"
            seen = [(sse.event, sse.id) for sse in source.iter_sse()]
        names = [event for event, _ in seen]
        turn = http.get(f"/v1/turns/{turn_id}").json()
        assert turn["error"] is None, turn["error"]
        assert names[-2:] == ["turn.completed", "stream.end"]
        assert names.count("message.committed") == 4
        turn = http.get(f"/v1/turns/{turn_id}").json()
        assert turn["status"] == "completed"
