"""An operator's bulk retry with its API process SIGKILLed midway: every selected run is either
retried (with its audit entry) or untouched, and the same confirmation token, sent to another API
process, finishes the rest: each failed conversation retried exactly once."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter

import httpx

from app.client.runs import RunFilter
from tests.api.conftest import Deployment
from tests.api.private_services import boot
from tests.worker_process import FAKE_MODEL

RUNS = 50  # (at 50 a second: a second's work, killed in its first moments)


def test_a_bulk_retry_killed_midway_is_finished_by_its_token_each_run_once(
    deployment: Deployment,
) -> None:
    deployment.fake_llm.script([{"error": 400, "message": "bad request"}] * RUNS)
    boot(deployment)
    owner = "erin"
    with deployment.http(token=deployment.key(owner)) as erin:
        for n in range(RUNS):
            made = erin.post("/v1/conversations", json={"model": FAKE_MODEL}).json()["id"]
            erin.post(f"/v1/conversations/{made}/messages", json={"text": f"run {n}"})
    admin = deployment.client.admin
    deadline = time.monotonic() + 120
    while len(admin.list_runs(RunFilter(status="failed", owner=owner, limit=200))) < RUNS:
        assert time.monotonic() < deadline, "the runs never all failed"
        time.sleep(0.1)
    operator = admin.create_key("ana", operator=True)[1]
    body = {"action": "retry", "filter": {"owner": owner}}
    with deployment.http(token=operator) as ops:
        dry = ops.post("/v1/admin/turns/bulk", json=body).json()
    assert dry["selected"] == RUNS
    confirmed = {**body, "confirm": dry["confirm"], "batch": 1000}

    doomed = deployment.apis[0]

    def act() -> None:
        killed = contextlib.suppress(httpx.HTTPError)  # (its process killed under it)
        with httpx.Client(base_url=doomed.url, timeout=60) as http, killed:
            http.post(
                "/v1/admin/turns/bulk",
                json=confirmed,
                headers={"Authorization": f"Bearer {operator}"},
            )

    acting = threading.Thread(target=act)
    acting.start()
    deadline = time.monotonic() + 60
    while not admin.audit_log():  # (at 50 a second: killed well before the last)
        assert time.monotonic() < deadline, "the bulk retry never began"
        time.sleep(0.01)
    doomed.kill()
    acting.join(timeout=60)
    cut = len(admin.audit_log(500))
    assert 0 < cut < RUNS, cut

    other = deployment.start_api()
    with deployment.http(other, token=operator) as ops:
        finished = ops.post("/v1/admin/turns/bulk", json=confirmed).json()
        assert finished["done"] == RUNS - cut and finished["remaining"] == 0
        assert ops.post("/v1/admin/turns/bulk", json=confirmed).json()["selected"] == 0
    entries = admin.audit_log(500)
    assert len(entries) == RUNS and len({e.target for e in entries}) == RUNS
    turns = Counter(
        run.conversation_id for run in admin.list_runs(RunFilter(owner=owner, limit=200))
    )
    assert len(turns) == RUNS and set(turns.values()) == {2}  # each retried exactly once
