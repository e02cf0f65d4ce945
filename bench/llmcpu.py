"""Worker CPU per iteration on the real litellm path, and where it goes.

The durable loop runs in this process against the fake OpenAI-compatible server (a subprocess,
answering at once, so its CPU is not counted) through `LiteLLMClient`, exactly as a worker calls
it; the tool is in-process and instant. The same turns with the in-process instant model give the
durable bookkeeping alone, so the difference is the cost of one litellm call, measured for two
litellm providers of the same server. A cProfile run of the event-loop thread (thread CPU time)
then splits that thread's CPU by package.
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import time
import uuid
from collections import Counter
from typing import Any

from app.client import ChatClient
from app.config import load_settings
from app.db import make_engine
from app.testing import fakes
from app.testing.fake_llm import FakeLLMServer
from app.testing.worker_process import FAKE_KEY, FAKE_MODEL
from app.worker.lease_runner import Outcome, TurnRunner
from app.worker.llm import LiteLLMClient, prepare_litellm
from app.worker.ports import ModelClient
from app.worker.store import TurnStore, Upkeep
from bench.overhead import ITERATIONS_PER_TURN, _echo
from bench.overhead import _model as instant_reply
from bench.stats import Row, single

# The same OpenAI-compatible server through litellm's OpenAI provider (the openai SDK underneath)
# and through its hosted_vllm provider (litellm's own HTTP handler).
ROUTES = (FAKE_MODEL, "hosted_vllm/fake-model")

STEPS: list[dict[str, Any]] = [
    {"tool_calls": [{"id": f"c{n}", "name": "echo", "arguments": {"n": n}}]}
    for n in range(ITERATIONS_PER_TURN - 1)
] + [{"text": "done"}]

ECHO_READS = {"echo": fakes.READ_ONLY}  # a pure function: it may simply run again


def measure_llm_cpu(
    database_url: str, turns: int, warm_up: int = 3
) -> tuple[list[Row], dict[str, Any]]:
    prepare_litellm()
    engine = make_engine(database_url)
    store = TurnStore(engine)
    tools = fakes.InMemoryTools({"echo": _echo}, annotations=ECHO_READS)
    Upkeep(engine).publish_catalog(asyncio.run(tools.definitions()))
    client = ChatClient(
        load_settings(database_url=database_url), engine=engine, enqueue=lambda _: None
    )
    with FakeLLMServer() as llm:
        llm.script(STEPS, mode="by_iteration")
        real = LiteLLMClient(timeout=20, api_base=llm.api_base, api_key=FAKE_KEY)
        instant = fakes.ScriptedModel(instant_reply, record=False)
        for route in ROUTES:  # warm-up: lazy imports, connection pools
            _turns(store, real, tools, client, warm_up, route=route)
        _turns(store, instant, tools, client, warm_up, route=FAKE_MODEL)
        real_cpu = {r: _turns(store, real, tools, client, turns, route=r) for r in ROUTES}
        instant_cpu = _turns(store, instant, tools, client, turns, route=FAKE_MODEL)
        profile = cProfile.Profile(time.thread_time)  # CPU time of this thread, not wall time
        profile.enable()
        _turns(store, real, tools, client, max(warm_up, turns // 2), route=FAKE_MODEL)
        profile.disable()
    engine.dispose()
    shares = _shares(profile)
    rows: list[Row] = [single("CPU per iteration, instant in-process model", instant_cpu, "ms")]
    for route, cpu in real_cpu.items():
        rows += [
            single(f"CPU per iteration, litellm {route}", cpu, "ms"),
            single(f"CPU per litellm call, {route} (the difference)", cpu - instant_cpu, "ms"),
        ]
    rows += [
        single(f"  {FAKE_MODEL} event-loop CPU: {name}", share * 100, "%")
        for name, share in shares.most_common(6)
    ]
    extra = {"shares": dict(shares), "real_ms": real_cpu, "instant_ms": instant_cpu}
    return rows, extra


def _turns(
    store: TurnStore,
    model: ModelClient,
    tools: fakes.InMemoryTools,
    client: ChatClient,
    count: int,
    *,
    route: str,
) -> float:
    """Run `count` 10-iteration turns one after another; process CPU ms per iteration."""
    ids: list[uuid.UUID] = []
    for _ in range(count):
        conversation_id = client.create_conversation(model=route, tools=["echo"])
        client.submit_message(conversation_id, "go")
        ids.append(conversation_id)
    runner = TurnRunner(store, model=model, tools=tools, settings=load_settings(), owner="bench")

    async def run_all() -> None:
        for conversation_id in ids:
            outcome = await runner.run(conversation_id)
            assert outcome is Outcome.IDLE, outcome

    started = time.process_time()
    asyncio.run(run_all())
    return (time.process_time() - started) * 1000 / (count * ITERATIONS_PER_TURN)


def _shares(profile: cProfile.Profile) -> Counter[str]:
    """Each package's share of the profiled thread's own (tottime) CPU."""
    stats = pstats.Stats(profile)
    by_package: Counter[str] = Counter()
    total = 0.0
    for (filename, _line, _name), row in stats.stats.items():  # type: ignore[attr-defined]
        own = row[2]
        total += own
        by_package[_package(filename)] += own
    return Counter({name: spent / total for name, spent in by_package.items()})


def _package(filename: str) -> str:
    """The installed package, standard-library module or part of this project a file is in."""
    if filename.startswith(("~", "<")):
        return "C functions (json, sockets, ...)"
    if "site-packages/" in filename:
        return filename.split("site-packages/")[1].split("/", maxsplit=1)[0].removesuffix(".py")
    if "/app/" in filename:
        return "chatworker (app/)"
    if "/lib/python3" in filename:
        return "stdlib " + filename.split("/lib/python3")[1].split("/")[1].removesuffix(".py")
    return "other"
