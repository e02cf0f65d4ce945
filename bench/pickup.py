"""Enqueue-to-first-LLM-request latency with a real worker process on Redis: idle, and busy with
conversations waiting on a slow model.

t0 is taken as `submit_message`, its transaction committed, sends the doorbell to the queue (the
client's enqueue, stamped just before the broker's); t1 is when the fake LLM server received the
worker's request for that conversation. Both clocks are this machine's wall clock. (t0 taken after
`submit_message` returned came after t1 once the doorbell woke the worker at once.)
"""

from __future__ import annotations

import time
from pathlib import Path

from bench.workers import Rig, rig

SLOW_MARKER = "slow-background"
BACKGROUND_DELAY = 30.0  # the busy worker's conversations wait this long on the model


def measure_pickup(
    database_url: str, redis_url: str, workdir: Path, trials: int, busy_with: int
) -> tuple[list[float], list[float]]:
    """Milliseconds from enqueue to the first model request: (idle samples, busy samples)."""
    with rig(database_url, redis_url, workdir, {"text": "ok"}) as bench:
        bench.llm.script([], match=SLOW_MARKER, default={"delay": BACKGROUND_DELAY, "text": "ok"})
        worker = bench.worker().start()
        try:
            _probe(bench, "[probe warm-up]")  # the first turn of a process pays one-time set-up
            idle = [_probe(bench, f"[probe idle {n:03d}]") for n in range(trials)]
            background = bench.submit(busy_with, text=f"{SLOW_MARKER} please")
            deadline = time.monotonic() + 30
            while len(bench.llm.requests(SLOW_MARKER)) < busy_with:
                if time.monotonic() > deadline:
                    raise TimeoutError("the background conversations never reached the model")
                time.sleep(0.05)
            busy = [_probe(bench, f"[probe busy {n:03d}]") for n in range(trials)]
            in_flight = sum(bench.client.get_conversation(c).is_running for c in background)
            if in_flight < busy_with:
                raise RuntimeError(f"only {in_flight} of {busy_with} still waiting: not busy")
        finally:
            worker.stop(timeout=5)  # the background turns resume nowhere: the database is dropped
    return idle, busy


def _probe(bench: Rig, text: str) -> float:
    time.sleep(0.3)  # let the consumer go idle again (its poll back-off grows when idle)
    conversation_id = bench.client.create_conversation()
    bench.client.submit_message(conversation_id, text)
    enqueued = bench.rung[conversation_id]
    # One request that the fake server answers when the model request arrives: a probe that
    # polled every 5 ms loaded the two cores the pickup it measures runs on.
    requests = bench.llm.requests(text, wait=10)
    if not requests:
        raise TimeoutError(f"no model request for {text!r}")
    while bench.client.get_conversation(conversation_id).is_running:
        time.sleep(0.01)
    return (requests[0]["received_at"] - enqueued) * 1000
