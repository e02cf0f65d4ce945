"""Worker CPU per model call on the route the worker takes, streamed and not, at 10 and 100
history messages, beside the raw HTTP floor of the same requests; and the cost of streaming
itself: CPU per streamed token and the live channel's Redis commands per second.

Calls go one after another from this process to the fake OpenAI-compatible server (a subprocess:
its CPU is not counted) through `LiteLLMClient`, exactly as a worker calls it. A streamed answer
comes in 50 chunks (about a token each, as providers send them). CPU is this process's (every
thread: litellm does part of its work in an executor), per call, after a warm-up.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from statistics import median
from typing import Any

import httpx

from app.live.redis_channel import RedisChannel
from app.testing.fake_llm import FakeLLMServer
from app.testing.worker_process import FAKE_KEY, FAKE_MODEL
from app.worker.broadcast import Broadcaster
from app.worker.llm import LiteLLMClient, prepare_litellm
from app.worker.ports import NO_SINK, ModelRequest, ReplySink
from bench.stats import Row, single

ANSWER = " ".join(f"word{n}" for n in range(50))
CHUNKS = 50
HISTORIES = (10, 100)
LONG_ANSWER_TOKENS = 600


def measure_call_cpu(
    calls: int, redis_url: str, warmups: int = 3
) -> tuple[list[Row], dict[str, Any]]:
    prepare_litellm()
    rows: list[Row] = []
    figures: dict[str, float] = {}
    with FakeLLMServer() as llm:
        llm.script([], default={"text": ANSWER, "chunks": CHUNKS})
        for size in HISTORIES:
            messages = _history(size)
            for name, run in (
                ("streamed", lambda m: _litellm(llm, m, stream=True)),
                ("not streamed", lambda m: _litellm(llm, m, stream=False)),
                ("raw HTTP floor, streamed", lambda m: _raw(llm, m, stream=True)),
                ("raw HTTP floor, not streamed", lambda m: _raw(llm, m, stream=False)),
            ):
                cpu = _cpu_per_call(run, messages, calls, warmups)
                figures[f"{name} {size}"] = cpu
                rows.append(single(f"CPU per model call, {name}, {size} msgs", cpu, "ms"))
        rows += _streaming_cost(llm, redis_url, max(warmups, calls // 4), warmups, figures)
    return rows, {"ms": figures}


def _history(size: int) -> list[dict[str, Any]]:
    """A realistic history: a system prompt, then user / assistant-with-call / tool turns."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You answer from the docs."}]
    while len(messages) < size - 1:
        n = len(messages)
        messages.append({"role": "user", "content": f"Question {n}: what does section {n} say?"})
        call = {
            "id": f"c{n}",
            "type": "function",
            "function": {"name": "search", "arguments": '{"q": "x"}'},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": "A paragraph. " * 20})
    messages = messages[: size - 1]
    if messages[-1]["role"] == "assistant":  # an assistant's calls are always answered
        messages.pop()
    messages.append({"role": "user", "content": "And the refund policy?"})
    return messages


def _cpu_per_call(run: Any, messages: list[dict[str, Any]], calls: int, warmups: int) -> float:
    async def loop() -> float:
        for _ in range(warmups):  # warm-up: lazy imports, the connection pool
            await run(messages)
        samples = []
        for _ in range(calls):
            started = time.process_time()
            await run(messages)
            samples.append((time.process_time() - started) * 1000)
        return float(median(samples))

    return asyncio.run(loop())


async def _litellm(
    llm: FakeLLMServer, messages: list[dict[str, Any]], *, stream: bool, sink: ReplySink = NO_SINK
) -> None:
    client = LiteLLMClient(timeout=20, api_base=llm.api_base, api_key=FAKE_KEY, stream=stream)
    await client.complete(ModelRequest(FAKE_MODEL, messages), sink)


_raw_clients: dict[int, httpx.AsyncClient] = {}


async def _raw(llm: FakeLLMServer, messages: list[dict[str, Any]], *, stream: bool) -> None:
    """The same request with httpx alone: build the JSON, send it, read the answer."""
    loop = id(asyncio.get_running_loop())
    client = _raw_clients.get(loop)
    if client is None:
        client = _raw_clients[loop] = httpx.AsyncClient(timeout=20)
    body = {"model": "fake-model", "messages": messages, "stream": stream}
    url = f"{llm.api_base}/chat/completions"
    headers = {"Authorization": f"Bearer {FAKE_KEY}"}
    if not stream:
        response = await client.post(url, json=body, headers=headers)
        json.loads(response.content)
        return
    async with client.stream("POST", url, json=body, headers=headers) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                json.loads(line[6:])


def _streaming_cost(
    llm: FakeLLMServer, redis_url: str, calls: int, warmups: int, figures: dict[str, float]
) -> list[Row]:
    """A long answer (600 chunks) streamed to a real Redis through the broadcaster, against the
    same answer not streamed: the CPU each streamed token adds, and the Redis commands it costs."""
    text = " ".join(f"t{n}" for n in range(LONG_ANSWER_TOKENS))
    # ~200 tokens a second, a fast model: the flush interval, not the model, sets the writes
    step = {"text": text, "chunks": LONG_ANSWER_TOKENS, "chunk_delay": 0.005}
    llm.script([], match="[long]", default=step)
    messages = _history(10)
    messages[-1] = {"role": "user", "content": "[long] tell me everything"}
    channel = RedisChannel(redis_url)
    broadcaster = Broadcaster(channel)

    async def streamed(m: list[dict[str, Any]]) -> None:
        sink = broadcaster.reply(uuid.uuid4(), 2)
        await _litellm(llm, m, stream=True, sink=sink)
        sink.flush()

    whole = _cpu_per_call(lambda m: _litellm(llm, m, stream=False), messages, calls, warmups)
    floor_whole = _cpu_per_call(lambda m: _raw(llm, m, stream=False), messages, calls, warmups)
    floor_streamed = _cpu_per_call(lambda m: _raw(llm, m, stream=True), messages, calls, warmups)
    sent_before, batches_before = broadcaster.sent_entries, broadcaster.sent_batches
    started = time.monotonic()
    live = _cpu_per_call(streamed, messages, calls, warmups)
    wall = time.monotonic() - started
    broadcaster.close()
    channel.close()
    entries = broadcaster.sent_entries - sent_before
    batches = broadcaster.sent_batches - batches_before
    per_call_entries = entries / (calls + warmups)
    # each write: an XADD per entry, an EXPIRE per conversation in the batch
    commands = entries + batches
    per_token_us = (live - whole) * 1000 / LONG_ANSWER_TOKENS
    floor_us = (floor_streamed - floor_whole) * 1000 / LONG_ANSWER_TOKENS
    figures.update(
        long_streamed=live, long_whole=whole, per_token_us=per_token_us,
        floor_per_token_us=floor_us, deltas_per_answer=per_call_entries,
        redis_commands_per_s=commands / wall,
    )  # fmt: skip
    tokens = LONG_ANSWER_TOKENS
    return [
        single(f"answer of {tokens} tokens at 200/s, streamed live to Redis", live, "ms CPU"),
        single("the same answer not streamed", whole, "ms CPU"),
        single("CPU per streamed token (litellm + assembly + live)", per_token_us, "us"),
        single("CPU per streamed token, raw HTTP floor (httpx)", floor_us, "us"),
        single(f"live deltas per {tokens}-token answer (coalesced)", per_call_entries, "deltas"),
        single("Redis commands per second of streaming (one reply)", commands / wall, "cmd/s"),
    ]
