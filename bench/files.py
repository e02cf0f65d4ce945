"""What a message's file costs: an API process's CPU and memory for a submit carrying a 5 MB
image (base64 in the JSON body, checked from its bytes, hashed, stored once), beside a text-only
submit in the same run; and a worker process's memory while 100 such turns wait on the model
(each request holds its image as a data: URL), beside 100 text-only turns.

The API process is `chatworker serve` with API keys; the worker a real `chatworker worker`; the
model the fake LLM, holding every call for a while so the turns stay in flight.
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.error
import uuid
from pathlib import Path
from typing import Any

import httpx

from app.client import ChatClient
from app.config import load_settings
from app.db import make_engine
from app.queue import make_broker, ring
from app.testing.worker_process import FAKE_MODEL
from bench.api import OWNER, deployment
from bench.stats import Row, median, single
from bench.workers import cpu_seconds, dramatiq_child, rss_mb

IMAGE_BYTES = 5_000_000
KINDS = json.dumps({FAKE_MODEL: ["image"]})
FILE_ENV = {
    "CHATWORKER_MODEL_FILE_KINDS": KINDS,
    "CHATWORKER_MAX_FILE_BYTES": str(IMAGE_BYTES + 1_000),
    "CHATWORKER_MAX_MESSAGE_FILE_BYTES": str(IMAGE_BYTES + 1_000),
    "CHATWORKER_OWNER_STORAGE_BYTES": str(10**12),  # (hundreds of 5 MB images, one owner)
}
HOLD_SECONDS = 600  # the model holds every call: the turns stay in flight until stopped


def image(size: int = IMAGE_BYTES, seed: int = 0) -> bytes:
    """A PNG's signature and chunks' worth of bytes (what the server reads the type from),
    `size` long, different for each seed (each stored on its own)."""
    head = b"\x89PNG\r\n\x1a\n" + seed.to_bytes(8, "big")
    return head + os.urandom(size - len(head))


def hwm_mb(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for {pid}")


def measure_files(
    database_url: str, redis_url: str, workdir: Path, submits: int, in_flight: int
) -> tuple[list[Row], dict[str, Any]]:
    api_rows, api = _api(database_url, redis_url, workdir, submits)
    worker_rows, worker = _worker(database_url, redis_url, workdir, in_flight)
    return api_rows + worker_rows, {"api": api, "worker": worker, "image_bytes": IMAGE_BYTES}


def _api(
    database_url: str, redis_url: str, workdir: Path, submits: int
) -> tuple[list[Row], dict[str, Any]]:
    with deployment(
        database_url, redis_url, workdir, {"text": "ok"}, worker=False, extra_env=FILE_ENV
    ) as d:
        client = d.rig.client
        text_ids = [client.create_conversation(owner=OWNER) for _ in range(submits + 1)]
        image_ids = [client.create_conversation(owner=OWNER) for _ in range(submits + 1)]
        bodies = [
            {
                "text": "What is in this picture?",
                "files": [
                    {
                        "name": f"photo{n}.png",
                        "data": base64.b64encode(image(seed=n)).decode(),
                    }
                ],
            }
            for n in range(submits + 1)
        ]
        with httpx.Client(base_url=d.api.url, headers=d.headers, timeout=120) as http:

            def submit(conversation_id: uuid.UUID, body: dict[str, Any]) -> None:
                response = http.post(f"/v1/conversations/{conversation_id}/messages", json=body)
                assert response.status_code == 202, response.text

            # (one of each first: the first of a kind pays for its imports and caches)
            submit(text_ids[0], {"text": "What is in this picture?"})
            submit(image_ids[0], bodies[0])
            text_cpu, text_ms = _timed(
                d.pid,
                [lambda i=i: submit(i, {"text": "What is in this picture?"}) for i in text_ids[1:]],
            )
            rss_before, peak_before = rss_mb(d.pid), hwm_mb(d.pid)
            image_cpu, image_ms = _timed(
                d.pid,
                [
                    lambda i=i, b=b: submit(i, b)
                    for i, b in zip(image_ids[1:], bodies[1:], strict=True)
                ],
            )
            peak_after, rss_after = hwm_mb(d.pid), rss_mb(d.pid)
    body_mb = len(json.dumps(bodies[1])) / 1e6
    rows: list[Row] = [
        single("submit, text only: API CPU", text_cpu, "ms/req"),
        single(f"submit, a {IMAGE_BYTES / 1e6:g} MB image: API CPU", image_cpu, "ms/req"),
        single("submit, text only: latency", median(text_ms), "ms"),
        single(f"submit, a {IMAGE_BYTES / 1e6:g} MB image: latency", median(image_ms), "ms"),
        single(
            f"submit, a {IMAGE_BYTES / 1e6:g} MB image: API peak memory growth",
            peak_after - peak_before,
            "MB",
        ),
        single("API resident memory after the image submits", rss_after, "MB"),
    ]
    extra = {
        "submits": submits,
        "body_mb": body_mb,
        "text_cpu_ms": text_cpu,
        "image_cpu_ms": image_cpu,
        "cpu_ratio": image_cpu / text_cpu if text_cpu else None,
        "text_latency_ms": text_ms,
        "image_latency_ms": image_ms,
        "rss_before_mb": rss_before,
        "rss_after_mb": rss_after,
        "peak_growth_mb": peak_after - peak_before,
    }
    return rows, extra


def _timed(pid: int, calls: list[Any]) -> tuple[float, list[float]]:
    """The server's CPU per call (ms) and each call's latency (ms), calls one after another."""
    latencies = []
    before = cpu_seconds(pid)
    for call in calls:
        started = time.perf_counter()
        call()
        latencies.append((time.perf_counter() - started) * 1000)
    return (cpu_seconds(pid) - before) * 1000 / max(len(calls), 1), latencies


def _worker(
    database_url: str, redis_url: str, workdir: Path, in_flight: int
) -> tuple[list[Row], dict[str, Any]]:
    held = {"text": "ok", "delay": HOLD_SECONDS}
    with deployment(
        database_url, redis_url, workdir, held, worker=True, worker_env=FILE_ENV, extra_env=FILE_ENV
    ) as d:
        assert d.worker is not None
        child = dramatiq_child(d.worker)
        settings = load_settings(
            database_url=database_url,
            redis_url=redis_url,
            model=FAKE_MODEL,
            model_file_kinds={FAKE_MODEL: ["image"]},
            max_file_bytes=IMAGE_BYTES + 1_000,
            max_message_file_bytes=IMAGE_BYTES + 1_000,
            owner_storage_bytes=10**12,
        )
        engine = make_engine(database_url)
        broker = make_broker(settings)
        client = ChatClient(settings, engine=engine, enqueue=lambda cid: ring(cid, broker))
        try:
            idle = rss_mb(child)
            text = _in_flight(d, client, child, in_flight, with_image=False)
            images = _in_flight(d, client, child, in_flight, with_image=True)
        finally:
            engine.dispose()
    per_turn = (images - text) / in_flight
    rows: list[Row] = [
        single("worker RSS, idle", idle, "MB"),
        single(f"worker RSS, {in_flight} text turns in flight", text, "MB"),
        single(f"worker RSS, {in_flight} turns with a 5 MB image in flight", images, "MB"),
        single("worker memory per in-flight image turn (over a text turn)", per_turn, "MB"),
    ]
    return rows, {"in_flight": in_flight, "idle_mb": idle, "text_mb": text, "image_mb": images}


def _in_flight(d: Any, client: ChatClient, child: int, count: int, *, with_image: bool) -> float:
    """Submit `count` turns (each with its own image, or none) and wait until every one is
    waiting on the model; the worker's resident memory then."""
    asked = _count(d)
    ids = [client.create_conversation() for _ in range(count)]
    for n, conversation_id in enumerate(ids):
        files = [image(seed=10_000 + n + (count if with_image else 0))] if with_image else None
        client.submit_message(conversation_id, "What is in this picture?", files=files)
    deadline = time.monotonic() + 300
    while _count(d) - asked < count:
        assert time.monotonic() < deadline, "the turns never all reached the model"
        time.sleep(0.2)
    time.sleep(1)  # (every request sent, nothing more to read)
    found = rss_mb(child)
    for conversation_id in ids:
        client.cancel(conversation_id)
    return found


def _count(d: Any) -> int:
    """The fake model's requests so far; 0 while it is too busy reading megabytes to answer."""
    try:
        return d.rig.llm.request_count()
    except (OSError, urllib.error.URLError):
        return 0


__all__ = ["measure_files"]
