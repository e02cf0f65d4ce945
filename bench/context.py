"""The context budget's costs:

- the CPU of deciding what to send, per model call, at 10, 1,000 and 10,000 committed messages:
  the entry appended (its estimate), the estimate, the compaction check (`Transcript.size`,
  `context.decide`); beside it, a floor measured in the same run: building the request's message
  list (`provider_messages`), which every call does anyway;
- the cost of planning a compaction when one is due (over the trigger), at the same sizes;
- the prompt sent per call at turn 200 of a long conversation (a 12,000-character output a turn,
  a 6,000-token window), with compaction and without (the fake model then takes any size): bytes
  of the request's messages, and their tokens by a real tokenizer.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from app.client import ChatClient
from app.config import load_settings
from app.db import make_engine
from app.testing import fakes
from app.testing.fake_llm.tokens import count_prompt
from app.worker import context, summary
from app.worker.context import Policy
from app.worker.lease_runner import Outcome, TurnRunner
from app.worker.plan import Entry, ToolCall
from app.worker.ports import ModelReply, ModelRequest
from app.worker.store import TurnStore, Upkeep
from app.worker.transcript import Transcript
from bench.stats import Row, median, p95

SIZES = (10, 1_000, 10_000)
GOAL_MS = 0.2
OUTPUT = json.dumps(
    [{"invoice": f"INV-{n:05d}", "amount": round(n * 13.37 % 900, 2)} for n in range(400)]
)[:12_000]
WINDOW = 6_000


def _history(size: int) -> list[Entry]:
    """Complete earlier turns (user, a call, its 2,000-character result, the answer)."""
    entries: list[Entry] = []
    result = OUTPUT[:2_000]
    for seq in range(1, size + 1):
        kind = (seq - 1) % 4
        if kind == 0:
            entries.append(Entry(seq, "user", f"Question {seq}: what about invoice {seq}?"))
        elif kind == 1:
            entries.append(Entry(seq, "assistant", None, (ToolCall(f"c{seq}", "fetch", "{}"),)))
        elif kind == 2:
            entries.append(
                Entry(seq, "tool", result, tool_call_id=f"c{seq - 1}", tool_name="fetch")
            )
        else:
            entries.append(Entry(seq, "assistant", f"Invoice {seq} is paid."))
    return entries


def measure_context_cpu(calls: int) -> tuple[list[Row], dict[str, Any]]:
    rows: list[Row] = []
    decide_ms: dict[int, float] = {}
    for size in SIZES:
        history = _history(size)
        transcript = Transcript("You are careful.", history, unkept={"agent_clarify"})
        roomy = Policy(window=100_000_000)
        tight = Policy(window=4_000)
        deciding, building, planning = [], [], []
        seq = size
        for _ in range(calls):
            seq += 1
            entry = Entry(seq, "user" if seq % 2 else "assistant", f"message {seq}")
            started = time.perf_counter()
            transcript.append(entry)
            size_now = transcript.size(roomy)
            context.decide(size_now, roomy, transcript.compacted)
            middle = time.perf_counter()
            transcript.provider_messages()
            built = time.perf_counter()
            over = transcript.size(tight)
            context.decide(over, tight, transcript.compacted)
            done = time.perf_counter()
            deciding.append((middle - started) * 1000)
            building.append((built - middle) * 1000)
            planning.append((done - built) * 1000)
        decide_ms[size] = median(deciding)
        rows += [
            (
                f"context {size:>6} msgs: decide (append, estimate, check)",
                *_spread(deciding),
                "ms/call",
            ),
            (f"context {size:>6} msgs: floor, the message list", *_spread(building), "ms/call"),
            (f"context {size:>6} msgs: plan a compaction (over)", *_spread(planning), "ms/call"),
        ]
    extra = {"decide_ms": decide_ms, "goal_ms": GOAL_MS, "sizes": list(SIZES)}
    return rows, extra


def _spread(samples: list[float]) -> tuple[float, float]:
    return median(samples), p95(samples)


def _answer(request: ModelRequest) -> ModelReply:
    if summary.MARKER in str(request.messages):
        return fakes.text("The user fetched invoices, one page a turn.")
    last = request.messages[-1]
    if last["role"] == "user":
        return fakes.calls(("call_fetch", "fetch", {"page": 1}))
    return fakes.text("Here is the page.")


def measure_prompt_bytes(database_url: str, turns: int) -> tuple[list[Row], dict[str, Any]]:
    """The last request of turn `turns`, with compaction (a 6,000-token window) and without."""
    engine = make_engine(database_url)
    tools = fakes.InMemoryTools(
        {"fetch": lambda page=1: OUTPUT}, annotations={"fetch": fakes.READ_ONLY}
    )
    Upkeep(engine).publish_catalog(asyncio.run(tools.definitions()))
    settings = load_settings(database_url=database_url)
    client = ChatClient(settings, engine=engine, enqueue=lambda _: None)
    figures: dict[str, dict[str, int]] = {}
    for label, policy in (
        ("with compaction", {"window": WINDOW}),
        ("without compaction", {"compaction": False}),
    ):
        model = fakes.ScriptedModel(_answer)
        runner = TurnRunner(
            TurnStore(engine), model=model, tools=tools, settings=settings, owner="bench"
        )
        conversation_id = client.create_conversation(tools=["fetch"], context_policy=policy)
        for n in range(turns):
            client.submit_message(conversation_id, f"Fetch page {n}.")
            assert asyncio.run(runner.run(conversation_id)) is Outcome.IDLE
        last = model.requests[-1]
        body = {"messages": last.messages, "tools": last.tools}
        figures[label] = {
            "bytes": len(json.dumps(last.messages)),
            "tokens": count_prompt(body),
            "requests": len(model.requests),
        }
    engine.dispose()
    rows: list[Row] = [
        (f"prompt at turn {turns}, {label}: bytes", float(f["bytes"]), float(f["bytes"]), "bytes")
        for label, f in figures.items()
    ] + [
        (
            f"prompt at turn {turns}, {label}: tokens",
            float(f["tokens"]),
            float(f["tokens"]),
            "tokens",
        )
        for label, f in figures.items()
    ]
    return rows, {"turns": turns, "window": WINDOW, **figures}


def context_notes(extras: dict[str, Any]) -> list[str]:
    """The line under the table: the decision's CPU against its goal, the prompt's size."""
    if "context" not in extras:
        return []
    c = extras["context"]
    largest = max(c["sizes"])
    decided = c["decide_ms"][largest]
    met = "met" if decided <= c["goal_ms"] else "MISSED"
    prompt = c["prompt"]
    with_, without = prompt["with compaction"], prompt["without compaction"]
    return [
        f"context: deciding what to send at {largest:,} messages {decided:.4f} ms/call (goal "
        f"<= {c['goal_ms']} ms: {met}); the prompt at turn {prompt['turns']}: "
        f"{with_['tokens']:,} tokens compacted ({prompt['window']:,}-token window), "
        f"{without['tokens']:,} without ({without['tokens'] / max(1, with_['tokens']):.0f}x)"
    ]


__all__ = ["context_notes", "measure_context_cpu", "measure_prompt_bytes"]
