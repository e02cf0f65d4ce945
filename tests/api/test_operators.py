"""Operators apart from owners, against a real API process and worker: an operator's key (`cwo_`)
or JWT (`"chatworker_role": "operator"`) reads and acts on every owner's runs through `/v1/admin`
and is refused by every owner route; an owner's credential finds no `/v1/admin` route at all;
every action is in the audit log with who took it, and reading is not.

    who                                  gets
    -----------------------------------  ----------------------------------------------------
    an owner's key or JWT on /v1/admin   404 not_found, as a route that does not exist
    an operator's key on an owner route  403 operator_credential, nothing written
    an owner's key given the cwo_ prefix 401 invalid_api_key (a key is not made more than it is)
    an operator acting                   the action, and its audit entry, in one transaction
    an action refused (409)              no audit entry
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

import httpx
import jwt
import pytest

from app.testing.fake_llm import FakeLLMServer
from tests.api.conftest import JWT_SECRET, Deployment, assert_problem, owner_name
from tests.worker_process import FAKE_MODEL

pytestmark = pytest.mark.xdist_group("api-operators")


def token(subject: str, **claims: Any) -> str:
    body = {"sub": subject, "exp": int(time.time()) + 600, **claims}
    return jwt.encode(body, JWT_SECRET, algorithm="HS256")


def operator_key(shared_api: Deployment, name: str) -> str:
    key, text = shared_api.client.admin.create_key(name, "on call", operator=True)
    assert key.operator and text.startswith("cwo_")
    return text


def audit(shared_api: Deployment, operator: str) -> list[Any]:
    return [e for e in shared_api.client.admin.audit_log(500) if e.operator == operator]


def created_owner(http: httpx.Client, turn_id: str) -> str:
    """The owner of a turn, as the runs list shows it."""
    for run in http.get("/v1/admin/turns", params={"limit": 200}).json()["data"]:
        if run["turn_id"] == turn_id:
            return str(run["owner"])
    raise AssertionError(f"turn {turn_id} is not listed")


def wait_for(http: httpx.Client, turn_id: str, *statuses: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        turn = http.get(f"/v1/admin/turns/{turn_id}").json()
        if turn["status"] in statuses:
            return dict(turn)
        assert time.monotonic() < deadline, turn
        time.sleep(0.05)


def test_an_operator_cancels_and_retries_any_owner_s_runs_and_each_is_audited(
    shared_api: Deployment, fake_llm: FakeLLMServer
) -> None:
    name = owner_name("ops")
    hang, fail = uuid.uuid4().hex, uuid.uuid4().hex
    fake_llm.script([{"hang": 60}], match=hang)
    fake_llm.script([{"error": 400, "message": "bad request"}], match=fail)
    with shared_api.http(token=shared_api.key(owner_name("alice"))) as alice:
        created = alice.post("/v1/conversations", json={"model": FAKE_MODEL}).json()
        failing = alice.post(f"/v1/conversations/{created['id']}/messages", json={"text": fail})
        assert failing.status_code == 202, failing.text
        hanging = alice.post("/v1/conversations", json={"model": FAKE_MODEL}).json()
        turn = alice.post(f"/v1/conversations/{hanging['id']}/messages", json={"text": hang})
        turn_id = turn.json()["turn"]["id"]

    with shared_api.http(token=operator_key(shared_api, name)) as ops:
        assert ops.get(f"/v1/admin/turns/{turn_id}").json()["status"] in ("queued", "running")
        assert audit(shared_api, name) == []  # reading is not logged
        cancelled = ops.post(f"/v1/admin/turns/{turn_id}/cancel")
        assert cancelled.status_code in (200, 202), cancelled.text
        assert wait_for(ops, turn_id, "cancelled")["status"] == "cancelled"

        failed_turn = failing.json()["turn"]["id"]
        wait_for(ops, failed_turn, "failed")
        retried = ops.post(f"/v1/admin/conversations/{created['id']}/retry")
        assert retried.status_code == 202, retried.text
        assert retried.headers["Location"].startswith("/v1/admin/turns/")
        # a conversation that has not failed: refused, and nothing is logged
        refused = ops.post(f"/v1/admin/conversations/{hanging['id']}/retry")
        assert_problem(refused, 409, "not_retryable")
        unknown = ops.post(f"/v1/admin/turns/{uuid.uuid4()}/cancel")
        assert_problem(unknown, 404, "turn_not_found")

        entries = audit(shared_api, name)
        assert [(e.action, e.target, e.selected) for e in entries] == [
            ("conversation.retry", created["id"], 1),
            ("turn.cancel", turn_id, 1),
        ]
        page = ops.get("/v1/admin/audit", params={"limit": 1}).json()
        assert len(page["data"]) == 1 and page["next_before"] == page["data"][0]["id"]
        older = ops.get("/v1/admin/audit", params={"limit": 1, "before": page["next_before"]})
        assert older.json()["data"][0]["id"] < page["next_before"]
        assert_problem(ops.get("/v1/admin/audit", params={"limit": 0}), 422, "validation_failed")

        reads(ops, failed_turn, turn_id, created["id"])


def reads(ops: httpx.Client, failed_turn: str, turn_id: str, conversation_id: str) -> None:
    """The operator's reads: a turn's timeline, the fleet, the runs list and its filters."""
    # a turn's timeline: the failed one, step by step
    steps = ops.get(f"/v1/admin/turns/{failed_turn}/timeline").json()
    assert steps["turn"]["status"] == "failed" and steps["conversation_id"] == conversation_id
    kinds = [step["kind"] for step in steps["steps"]]
    assert kinds[0] == "queued" and kinds[-1] == "ended" and "claimed" in kinds
    assert "bad request" in steps["steps"][-1]["detail"]["error"]
    assert all(step["duration_ms"] >= 0 for step in steps["steps"])

    # the fleet: the module's worker, what it did
    fleet = ops.get("/v1/admin/fleet").json()
    assert len(fleet["workers"]) >= 1 and fleet["running"] >= 0 and fleet["queued"] >= 0
    assert all(worker["name"].count(":") >= 2 for worker in fleet["workers"])  # host:pid:..
    assert fleet["outcomes_last_hour"].get("failed", 0) >= 1
    assert any("HTTP 400" in kind for kind, _ in fleet["failures_last_day"])

    # the runs across owners, filtered
    runs = ops.get("/v1/admin/turns", params={"status": "failed", "limit": 200}).json()
    assert failed_turn in [run["turn_id"] for run in runs["data"]]
    assert all(run["status"] == "failed" for run in runs["data"])
    mine = ops.get("/v1/admin/turns", params={"owner": created_owner(ops, failed_turn)})
    assert {run["turn_id"] for run in mine.json()["data"]} >= {failed_turn, turn_id}
    refused = ops.get("/v1/admin/turns", params={"status": "exploded"})
    assert "status must be one of" in assert_problem(refused, 400, "invalid_request")["detail"]
    naive = ops.get("/v1/admin/turns", params={"since": "2026-01-01T00:00:00"})
    assert "time zone" in assert_problem(naive, 400, "invalid_request")["detail"]


def test_owners_find_no_operator_route_and_operators_no_owner_route(
    shared_api: Deployment,
) -> None:
    owner = owner_name("bob")
    owner_key = shared_api.key(owner)
    ops_name = owner_name("ops")
    ops_key = operator_key(shared_api, ops_name)
    some_turn = str(uuid.uuid4())
    for credential in (owner_key, token(owner)):
        with shared_api.http(token=credential) as http:
            for method, path in (
                ("GET", "/v1/admin/audit"),
                ("GET", f"/v1/admin/turns/{some_turn}"),
                ("POST", f"/v1/admin/turns/{some_turn}/cancel"),
                ("POST", f"/v1/admin/conversations/{some_turn}/retry"),
            ):
                answer = http.request(method, path)
                problem = assert_problem(answer, 404, "not_found")
                assert problem["detail"] == f"no route {method} {path}"
    for credential in (ops_key, token("night-shift", chatworker_role="operator")):
        with shared_api.http(token=credential) as http:
            assert http.get("/v1/admin/audit").status_code == 200
            for method, path in (("GET", "/v1/conversations"), ("POST", "/v1/conversations")):
                assert_problem(http.request(method, path, json={}), 403, "operator_credential")
    assert shared_api.client.list_conversations(owner=ops_name).conversations == []

    # An owner's key can not be made an operator's by its prefix.
    forged = "cwo_" + owner_key.removeprefix("cwk_")
    with shared_api.http(token=forged) as http:
        assert_problem(http.get("/v1/admin/audit"), 401, "invalid_api_key")
    # and an operator's key can not pass as an owner's
    with shared_api.http(token="cwk_" + ops_key.removeprefix("cwo_")) as http:
        assert_problem(http.get("/v1/conversations"), 401, "invalid_api_key")


def test_a_bulk_retry_is_a_dry_run_then_batches_each_run_once_and_audited(
    shared_api: Deployment, fake_llm: FakeLLMServer
) -> None:
    owner, name = owner_name("carl"), owner_name("ops")
    token_text = uuid.uuid4().hex
    broken = [{"error": 400, "message": "bad request"}] * 3
    fake_llm.script([*broken, *[{"text": "Recovered."}] * 3], match=token_text)
    with shared_api.http(token=shared_api.key(owner)) as carl:
        failed = []
        for n in range(3):
            made = carl.post("/v1/conversations", json={"model": FAKE_MODEL}).json()["id"]
            turn = carl.post(
                f"/v1/conversations/{made}/messages", json={"text": f"{n} {token_text}"}
            )
            failed.append(turn.json()["turn"]["id"])
    with shared_api.http(token=operator_key(shared_api, name)) as ops:
        for turn_id in failed:
            wait_for(ops, turn_id, "failed")
        body = {"action": "retry", "filter": {"owner": owner}}
        dry = ops.post("/v1/admin/turns/bulk", json=body).json()
        assert dry["selected"] == 3 and dry["done"] == 0 and audit(shared_api, name) == []
        confirmed = {**body, "confirm": dry["confirm"], "batch": 2}
        first = ops.post("/v1/admin/turns/bulk", json=confirmed).json()
        assert (first["done"], first["remaining"]) == (2, 1)
        second = ops.post("/v1/admin/turns/bulk", json=confirmed).json()
        assert (second["selected"], second["done"], second["remaining"]) == (1, 1, 0)
        again = ops.post("/v1/admin/turns/bulk", json=confirmed).json()
        assert (again["selected"], again["done"]) == (0, 0)  # each run once
        runs = ops.get("/v1/admin/turns", params={"owner": owner}).json()["data"]
        per_conversation = Counter(run["conversation_id"] for run in runs)
        assert len(per_conversation) == 3 and set(per_conversation.values()) == {2}
        entries = audit(shared_api, name)
        assert sorted(e.target for e in entries) == sorted(failed)
        assert {e.action for e in entries} == {"bulk.retry"}
        assert {e.detail["token"] for e in entries} == {dry["confirm"][:16]}
        # refusals, each writing nothing
        assert_problem(
            ops.post("/v1/admin/turns/bulk", json={**body, "confirm": "not-a-token"}),
            400,
            "invalid_request",
        )
        cancel = {"action": "cancel", "filter": {"owner": owner}, "confirm": dry["confirm"]}
        assert_problem(ops.post("/v1/admin/turns/bulk", json=cancel), 400, "invalid_request")
        assert_problem(
            ops.post("/v1/admin/turns/bulk", json={"action": "explode"}), 400, "invalid_request"
        )
        assert_problem(
            ops.post("/v1/admin/turns/bulk", json={**body, "filter": {"status": "failed"}}),
            422,
            "validation_failed",
        )
        assert len(audit(shared_api, name)) == 3
