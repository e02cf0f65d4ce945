"""What judging a structured answer costs the worker, bounded (`app/worker/checker.py`), beside
a floor measured in the same run: the judge as it was before it was bounded (Python's `re`, the
library's own `uniqueItems`, on the event loop, with nothing around it).

- an ordinary schema (a ticket: an enum, an integer range, required fields; a small answer):
  the event loop's CPU per check, the floor's and the worker's (judged on the loop first,
  `INLINE_SECONDS` at most); then the same check sent to a checker process (an answer over
  `INLINE_CHARS`, or one too costly for the loop, goes there), the worker's CPU and the wall time;
- the inputs that froze a worker: `^(a+)+$` against 24 `a`s and a `!` (the floor's backtracking,
  measured at 20 to keep the run short: each `a` more doubles it), and `uniqueItems` over 6,000
  objects with a duplicate at the end (the floor at 1,000: its work grows with the square);
  the bounded judge at the full sizes, wall time from the answer to the verdict.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from jsonschema import validators
from jsonschema.exceptions import best_match

from app.worker.checker import INLINE_CHARS, SchemaChecker
from app.worker.structured import _FENCED
from bench.stats import Row, median, p95

TICKET = {
    "name": "ticket",
    "schema": {
        "type": "object",
        "properties": {
            "kind": {"type": "string", "enum": ["bug", "question"]},
            "priority": {"type": "integer", "minimum": 1, "maximum": 3},
            "title": {"type": "string", "maxLength": 200},
        },
        "required": ["kind", "priority", "title"],
        "additionalProperties": False,
    },
}
GOOD = json.dumps({"kind": "bug", "priority": 2, "title": "The export button crashes"})
BACKTRACKS = {
    "name": "w",
    "schema": {"type": "object", "properties": {"w": {"pattern": "^(a+)+$"}}},
}
UNIQUE = {"name": "r", "schema": {"type": "object", "properties": {"r": {"uniqueItems": True}}}}


def measure_schema_checks(checks: int) -> tuple[list[Row], dict[str, Any]]:
    return asyncio.run(_measure(checks))


async def _measure(checks: int) -> tuple[list[Row], dict[str, Any]]:
    checker = SchemaChecker(seconds=60, memory_mb=512)
    try:
        floor = _cpu_per_call(lambda: _floor_judge(GOOD, TICKET), checks)
        inline = await _acpu_per_call(lambda: checker.judge(GOOD, TICKET), checks)
        # (the same answer padded past INLINE_CHARS with spaces: JSON still, judged in a child)
        padded = GOOD + " " * INLINE_CHARS
        await checker.judge(padded, TICKET)  # (the child starts)
        child = await _acpu_per_call(lambda: checker.judge(padded, TICKET), checks)
        walls = [await _wall(lambda: checker.judge(padded, TICKET)) for _ in range(checks)]
        rows: list[Row] = [
            ("schema: ordinary, floor (unbounded, on the loop): CPU per check", floor, floor, "ms"),
            ("schema: ordinary, bounded, on the loop: CPU per check", inline, inline, "ms"),
            ("schema: ordinary, in a checker process: worker CPU per check", child, child, "ms"),
            ("schema: ordinary, in a checker process: wall", median(walls), p95(walls), "ms"),
        ]
        backtracking = _seconds(lambda: _floor_judge(json.dumps({"w": "a" * 20 + "!"}), BACKTRACKS))
        bounded = await _wall(lambda: checker.judge(json.dumps({"w": "a" * 24 + "!"}), BACKTRACKS))
        objects = [{"id": n, "name": f"row {n}"} for n in range(6000)]
        pairs = _seconds(
            lambda: _floor_judge(json.dumps({"r": [*objects[:1000], objects[0]]}), UNIQUE)
        )
        hashed = await _wall(
            lambda: checker.judge(json.dumps({"r": [*objects, objects[0]]}), UNIQUE)
        )
        rows += [
            ("schema: ^(a+)+$, 20 a's, floor (Python re)", backtracking, backtracking, "s"),
            ("schema: ^(a+)+$, 24 a's, bounded (RE2): wall", bounded / 1e3, bounded / 1e3, "s"),
            ("schema: uniqueItems, 1,000 objects, floor (pairs)", pairs, pairs, "s"),
            (
                "schema: uniqueItems, 6,000 objects, bounded (hashing): wall",
                hashed / 1e3,
                hashed / 1e3,
                "s",
            ),
        ]
        figures = {
            "floor_ms": floor,
            "inline_ms": inline,
            "child_worker_ms": child,
            "child_wall_ms": median(walls),
            "inline_over_floor": inline / floor if floor else None,
        }
        return rows, {"schema": figures}
    finally:
        checker.close()


def _floor_judge(content: str, schema: Mapping[str, Any]) -> object:
    """The judge as it was before it was bounded (its code, on the calling thread)."""
    text = content.strip()
    fenced = _FENCED.match(text)
    if fenced is not None:
        text = fenced.group(1).strip()
    value = json.loads(text)
    validator = _floor_validator(json.dumps(schema["schema"], sort_keys=True))
    return best_match(validator.iter_errors(value))


@lru_cache(maxsize=256)
def _floor_validator(schema_json: str) -> Any:
    schema = json.loads(schema_json)
    return validators.validator_for(schema, default=validators.Draft202012Validator)(schema)


def _cpu_per_call(call: Callable[[], object], calls: int) -> float:
    for _ in range(max(3, calls // 10)):
        call()
    started = time.process_time()
    for _ in range(calls):
        call()
    return (time.process_time() - started) / calls * 1e3


async def _acpu_per_call(call: Callable[[], Any], calls: int) -> float:
    for _ in range(max(3, calls // 10)):
        await call()
    started = time.process_time()
    for _ in range(calls):
        await call()
    return (time.process_time() - started) / calls * 1e3


async def _wall(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    await call()
    return (time.perf_counter() - started) * 1e3


def _seconds(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started
