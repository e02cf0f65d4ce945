"""Follower latency: from an event's commit to a follower holding it, with 1 and with many
followers of different conversations, while a real worker process runs their turns.

Each follower is `ChatClient.follow` in a thread of this process (its own blocking Redis read);
the worker's statements stamp each event with the worker's clock just before the commit
(`events.created_at`), and the follower notes the wall clock when the event reaches it. Same
machine, same clock: the difference is commit -> live notice -> log read -> follower.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

from app.client import ChatClient, EventView
from app.models import TERMINAL_EVENTS
from bench.stats import Row, median, p95
from bench.workers import rig

ANSWER = {"text": "ok"}
TURNS_ALONE = 20


def measure_followers(
    database_url: str, redis_url: str, workdir: Path, many: int
) -> tuple[list[Row], dict[str, Any]]:
    with rig(database_url, redis_url, workdir, ANSWER) as bench:
        worker = bench.worker().start()
        try:
            alone = _follow(bench.client, 1, turns=TURNS_ALONE)
            crowd = _follow(bench.client, many, turns=1)
        finally:
            worker.stop(timeout=10)
    rows: list[Row] = [
        ("follower latency, 1 follower: commit -> event", median(alone), p95(alone), "ms"),
        (
            f"follower latency, {many} followers: commit -> event",
            median(crowd),
            p95(crowd),
            "ms",
        ),
    ]
    return rows, {"one_ms": alone, "many_ms": crowd, "many": many}


def _follow(client: ChatClient, followers: int, *, turns: int) -> list[float]:
    """Every event's latency, for `followers` conversations each followed by its own thread
    while `turns` turns run one after another in each."""
    ids = [client.create_conversation() for _ in range(followers)]
    latencies: list[float] = []
    lock = threading.Lock()
    ready = threading.Barrier(followers + 1)
    done = [threading.Event() for _ in ids]
    errors: list[BaseException] = []

    def follow(index: int, conversation_id: uuid.UUID) -> None:
        try:
            following = client.follow(conversation_id, until=None, poll_interval=2.0)
        finally:
            ready.wait()
        ended = 0
        try:
            for item in following:
                arrived = time.time()
                if not isinstance(item, EventView):
                    continue
                with lock:
                    latencies.append((arrived - item.created_at.timestamp()) * 1000)
                if item.type in TERMINAL_EVENTS:  # a failed turn ends too (a loaded machine)
                    ended += 1
                    if ended == turns:
                        return
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            done[index].set()

    threads = [
        threading.Thread(target=follow, args=(n, cid), daemon=True) for n, cid in enumerate(ids)
    ]
    for thread in threads:
        thread.start()
    ready.wait()
    for turn in range(turns):
        for conversation_id in ids:
            client.submit_message(conversation_id, f"turn {turn}", on_busy="enqueue")
        if followers == 1:
            time.sleep(0.2)  # one at a time: the latency of a quiet system
    for event in done:
        if not event.wait(180):
            raise TimeoutError("a follower never saw its turns end")
    if errors:
        raise RuntimeError(f"{len(errors)} follower(s) failed") from errors[0]
    return latencies
