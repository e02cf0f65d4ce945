"""End-to-end throughput: turns per second with 1 and then 2 real worker processes over Redis.

Every turn is the product's main job: the fake LLM (answering at once) asks for the demo MCP
server's `add` tool, the worker runs it on that real MCP server, the model answers. Two LLM calls,
one MCP call, three step commits. A burst of N conversations is submitted at once and timed until
the last one is idle. The machine's 2 cores also run PostgreSQL, Redis, the fake LLM and the MCP
servers, so the second process shows how far the rest of the stack lets it scale here.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench.stats import Row, single
from bench.workers import Rig, cpu_seconds, dramatiq_child, rig

TOOL_TURN = [
    {"tool_calls": [{"id": "call_add", "name": "add", "arguments": {"a": 2, "b": 3}}]},
    {"text": "2 + 3 = 5"},
]


def measure_throughput(
    database_url: str, redis_url: str, workdir: Path, conversations: int
) -> tuple[list[Row], dict[str, Any]]:
    rows: list[Row] = []
    extra: dict[str, Any] = {}
    with rig(database_url, redis_url, workdir, {"text": "ok"}) as bench:
        bench.llm.script(TOOL_TURN, mode="by_iteration")
        workers = []
        try:
            for count in (1, 2):
                workers.append(bench.worker(f"worker{count}").start())
                _burst(bench, max(10, conversations // 10))  # warm-up: imports, MCP, pools
                children = [dramatiq_child(w) for w in workers]
                cpu_before = sum(cpu_seconds(pid) for pid in children)
                rate = _burst(bench, conversations)
                cpu = sum(cpu_seconds(pid) for pid in children) - cpu_before
                rows += [
                    single(f"throughput: turns/s, {count} worker process(es)", rate, "turns/s"),
                    single(
                        f"throughput: worker CPU per tool turn, {count} process(es)",
                        cpu * 1000 / conversations,
                        "ms",
                    ),
                ]
                extra[f"turns_per_second_{count}"] = rate
        finally:
            for worker in workers:
                worker.stop()
    extra["conversations"] = conversations
    extra["scaling_2_over_1"] = extra["turns_per_second_2"] / extra["turns_per_second_1"]
    return rows, extra


def _burst(bench: Rig, count: int) -> float:
    """Submit `count` tool turns at once; turns per second until the last one is idle."""
    ids = [bench.client.create_conversation(tools=["add"]) for _ in range(count)]
    started = time.time()
    for conversation_id in ids:
        bench.client.submit_message(conversation_id, "what is 2 + 3?")
    finished = bench.wait_idle(ids, timeout=60 + count)
    failed = [c for c in ids if bench.client.get_conversation(c).status != "idle"]
    if failed:
        raise RuntimeError(f"{len(failed)} of {count} turns did not end idle")
    return count / (finished - started)
