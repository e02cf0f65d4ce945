"""Our durable loop beside its peers (`python -m bench --peers`): the conversation of
bench/overhead.py, turns of 10 iterations (9 tool rounds and a final answer) with an instant
in-process model and tool, run through

- DBOS: a `@DBOS.workflow()` per turn whose model and tool calls are `@DBOS.step()`s, its system
  database on PostgreSQL. Each step's output is a row of `dbos.operation_outputs`, committed
  before the workflow goes on; the turn is a `dbos.workflow_status` row (inserted with its input
  at the start, its result written at the end).
- LangGraph: a model node and a tool node looping until the model answers, compiled with
  `PostgresSaver`, a thread per turn. After each node (a super-step) its writes
  (`checkpoint_writes`) and a checkpoint of the state (`checkpoints`, the changed channels in
  `checkpoint_blobs`) are written: with `durability="sync"` before the next node runs, as our loop
  commits each step; with `durability="async"` (LangGraph's default) while it runs.

beside our loop (the real TurnRunner) and the raw psycopg floors of bench/overhead.py, all in the
same run and the same PostgreSQL server (each peer in its own throwaway database). The set runs
twice, the second time in the reverse order (ABBA), and each figure pools both halves' turns.

The peers' packages are the `peers` extra (pyproject.toml); `python -m bench` installs nothing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import operator
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

from sqlalchemy import Engine, event

from app.testing import services
from bench.overhead import (
    ITERATIONS_PER_TURN,
    LOOP,
    TRACED_TURNS,
    Floor,
    Result,
    measure_floor,
    measure_loops,
)
from bench.roundtrips import Tracer, traced_connection
from bench.stats import Row, single

# module to import -> the distribution that provides it
PACKAGES = {
    "dbos": "dbos",
    "langgraph": "langgraph",
    "langgraph.checkpoint.postgres": "langgraph-checkpoint-postgres",
    "psycopg_pool": "psycopg-pool",
}
INSTALL = ".venv/bin/uv pip install -e '.[dev,peers]'  (or: .venv/bin/pip install -e '.[peers]')"

WITH_DBOS = "DBOS (workflow, steps)"
LANGGRAPH_SYNC = "LangGraph + PostgresSaver, sync"
LANGGRAPH_ASYNC = "LangGraph + PostgresSaver, async"  # durability="async": its default
PEERS = (WITH_DBOS, LANGGRAPH_SYNC, LANGGRAPH_ASYNC)

Message = dict[str, Any]
TurnFn = Callable[[], None]


@dataclass
class Peer:
    turn: TurnFn  # one turn, to its end
    traced: Callable[[], contextlib.AbstractContextManager[Tracer]]  # libpq traces its round trips


def missing_packages() -> list[str]:
    """The peers' distributions that are not importable here."""
    missing = []
    for module, distribution in PACKAGES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:  # (a parent package missing)
            found = False
        if not found:
            missing.append(distribution)
    return missing


# --- the conversation: the same in every peer --------------------------------------------------


def model(messages: list[Message]) -> Message:
    """The instant model of bench/overhead.py: a tool call per round, then the answer."""
    rounds = sum(1 for m in messages if m["role"] == "assistant")
    if rounds < ITERATIONS_PER_TURN - 1:
        call = {"id": f"c{rounds}", "name": "echo", "arguments": {"n": rounds}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"role": "assistant", "content": "done"}


def tool(call: Message) -> Message:
    """The instant `echo` tool: its result as the tool message."""
    content = str(call["arguments"]["n"])
    return {"role": "tool", "tool_call_id": call["id"], "name": call["name"], "content": content}


def _check(messages: list[Message]) -> None:
    """A finished turn: the user's message, 9 rounds of call + result, the answer."""
    assert len(messages) == 2 * ITERATIONS_PER_TURN, len(messages)
    assert messages[-1] == {"role": "assistant", "content": "done"}, messages[-1]


def _timed(peer: Peer, warm_up: int, turns: int) -> Result:
    """ms per iteration of each timed turn, after `warm_up` untimed ones; then round trips per
    iteration over TRACED_TURNS more."""
    for _ in range(warm_up):
        peer.turn()
    samples = []
    for _ in range(turns):
        started = time.perf_counter()
        peer.turn()
        samples.append((time.perf_counter() - started) * 1000 / ITERATIONS_PER_TURN)
    with peer.traced() as tracer:
        for _ in range(TRACED_TURNS):
            peer.turn()
        trips = tracer.round_trips() / (TRACED_TURNS * ITERATIONS_PER_TURN)
    return Result("", samples, trips)


@contextlib.contextmanager
def _traced_pool(engine: Engine) -> Iterator[Tracer]:
    """Trace each connection `engine` hands out from now on (pooled ones too)."""
    with tempfile.TemporaryDirectory() as directory:
        tracer, seen = Tracer(Path(directory)), set()

        def on_checkout(dbapi_connection: Any, _record: object, _proxy: object) -> None:
            if id(dbapi_connection) not in seen:
                seen.add(id(dbapi_connection))
                tracer.trace(dbapi_connection)

        event.listen(engine, "checkout", on_checkout)
        try:
            yield tracer
        finally:
            event.remove(engine, "checkout", on_checkout)
            tracer.close()


# --- DBOS ---------------------------------------------------------------------------------------

_dbos_turn: Callable[[str], list[Message]] | None = None


def _dbos_workflow() -> Callable[[str], list[Message]]:
    """The turn as a DBOS workflow, registered once per process (DBOS keeps a global registry
    that outlives `DBOS.destroy()`)."""
    global _dbos_turn  # noqa: PLW0603
    if _dbos_turn is not None:
        return _dbos_turn
    from dbos import DBOS

    @DBOS.step(name="bench_peers_model")
    def model_step(messages: list[Message]) -> Message:
        return model(messages)

    @DBOS.step(name="bench_peers_tool")
    def tool_step(call: Message) -> Message:
        return tool(call)

    @DBOS.workflow(name="bench_peers_turn")
    def turn(text: str) -> list[Message]:
        messages: list[Message] = [{"role": "user", "content": text}]
        while True:
            reply = model_step(messages)
            messages.append(reply)
            if not reply.get("tool_calls"):
                return messages
            for call in reply["tool_calls"]:
                messages.append(tool_step(call))

    _dbos_turn = turn
    return turn


@contextlib.contextmanager
def dbos_turns(database_url: str) -> Iterator[Peer]:
    """DBOS launched on `database_url` (its system database, default durable settings) for the
    duration: a turn is one workflow run to its end."""
    from dbos import DBOS

    workflow = _dbos_workflow()
    dbos = DBOS(
        config={"name": "bench-peers", "system_database_url": database_url, "log_level": "ERROR"}
    )
    try:
        DBOS.launch()

        def one() -> None:
            _check(workflow("go"))

        # (its system database's engine: not public API)
        yield Peer(one, lambda: _traced_pool(dbos._sys_db.engine))
    finally:
        DBOS.destroy()


# --- LangGraph ----------------------------------------------------------------------------------


class State(TypedDict):
    messages: Annotated[list[Message], operator.add]


def _model_node(state: State) -> dict[str, list[Message]]:
    return {"messages": [model(state["messages"])]}


def _tool_node(state: State) -> dict[str, list[Message]]:
    return {"messages": [tool(call) for call in state["messages"][-1]["tool_calls"]]}


def _route(state: State) -> str:
    return "tool" if state["messages"][-1].get("tool_calls") else "__end__"


@contextlib.contextmanager
def langgraph_turns(database_url: str, durability: Literal["sync", "async"]) -> Iterator[Peer]:
    """The graph compiled with a PostgresSaver on `database_url` (one connection, as
    `from_conn_string` gives it): a turn is one `invoke` on a new thread."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(State)
    graph.add_node("model", _model_node)
    graph.add_node("tool", _tool_node)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", _route, ["tool", END])
    graph.add_edge("tool", "model")
    with PostgresSaver.from_conn_string(services.libpq_dsn(database_url)) as saver:
        saver.setup()
        app = graph.compile(checkpointer=saver)

        def one() -> None:
            config: Any = {"configurable": {"thread_id": str(uuid.uuid4())}, "recursion_limit": 100}
            state = app.invoke(
                State(messages=[{"role": "user", "content": "go"}]), config, durability=durability
            )
            _check(state["messages"])

        yield Peer(one, lambda: traced_connection(saver.conn))  # type: ignore[arg-type]


# --- the set, ABBA ------------------------------------------------------------------------------


@contextlib.contextmanager
def blank_database(server: str) -> Iterator[str]:
    """A throwaway empty database of the server (each peer makes its own tables)."""
    name = services.unique_name("bench_peer")
    url = services.create_database(server, name)
    try:
        yield url
    finally:
        services.drop_database(server, name)


def measure_peers(
    ours_url: str, server: str, turns: int, warm_up: int
) -> tuple[list[Row], dict[str, Any]]:
    """Floors, our loop, DBOS and LangGraph, `turns` timed turns each per half, the halves in
    ABBA order; rows of ms per iteration and the ratios to the fastest floor."""
    samples: dict[str, list[float]] = {}
    trips: dict[str, list[float]] = {}
    with blank_database(server) as dbos_url, blank_database(server) as graph_url:

        def floors() -> None:
            for floor in Floor:
                result = measure_floor(ours_url, turns, floor)
                samples.setdefault(result.name, []).extend(result.per_iteration_ms)
                trips.setdefault(result.name, []).append(result.round_trips_per_iteration)

        def ours() -> None:
            (result,) = measure_loops(ours_url, turns, {LOOP: {}})
            samples.setdefault(LOOP, []).extend(result.per_iteration_ms)
            trips.setdefault(LOOP, []).append(result.round_trips_per_iteration)

        def peer(name: str, start: Callable[[], contextlib.AbstractContextManager[Peer]]) -> None:
            with start() as running:
                result = _timed(running, warm_up, turns)
            samples.setdefault(name, []).extend(result.per_iteration_ms)
            trips.setdefault(name, []).append(result.round_trips_per_iteration)

        parts: list[Callable[[], None]] = [
            floors,
            ours,
            lambda: peer(WITH_DBOS, lambda: dbos_turns(dbos_url)),
            lambda: peer(LANGGRAPH_SYNC, lambda: langgraph_turns(graph_url, "sync")),
            lambda: peer(LANGGRAPH_ASYNC, lambda: langgraph_turns(graph_url, "async")),
        ]
        for part in [*parts, *reversed(parts)]:
            part()

    results = {
        name: Result(name, values, sum(trips[name]) / len(trips[name]))
        for name, values in samples.items()
    }
    floor_results = [results[f"floor: {floor.value}"] for floor in Floor]
    best = min(floor_results, key=lambda r: r.median)
    shown = [best, results[LOOP], *(results[name] for name in PEERS)]
    rows: list[Row] = [(f"peers: {r.name}", r.median, r.p95, "ms/iteration") for r in shown]
    rows += [
        single(f"peers: {r.name}: round trips", r.round_trips_per_iteration, "trips/iteration")
        for r in shown
    ]
    extra = {
        "turns_per_half": turns,
        "warm_up_turns": warm_up,
        "iterations_per_turn": ITERATIONS_PER_TURN,
        "best_floor": best.name,
        "floors_ms": {r.name: r.median for r in floor_results},
        "ms_per_iteration": {r.name: {"median": r.median, "p95": r.p95} for r in shown},
        "ratio_to_best_floor": {r.name: r.median / best.median for r in shown[1:]},
        "ratio_to_ours": {name: results[name].median / results[LOOP].median for name in PEERS},
        "round_trips_per_iteration": {r.name: r.round_trips_per_iteration for r in shown},
    }
    return rows, extra


def peers_notes(extras: dict[str, Any]) -> list[str]:
    """The lines under the table: each one's ratio to the fastest floor and to our loop."""
    if "peers" not in extras:
        return []
    p = extras["peers"]
    lines = [
        f"peers (medians over {2 * p['turns_per_half']} turns each, 2 halves in ABBA order; "
        f"LangGraph's durability sync = each node's checkpoint written before the next, async = its"
        f" default) / fastest floor ({p['best_floor']}, "
        f"{p['ms_per_iteration'][p['best_floor']]['median']:.3f} ms/iteration):"
    ]
    for name, ratio in p["ratio_to_best_floor"].items():
        versus = p["ratio_to_ours"].get(name)
        also = f"; {versus:.2f}x ours" if versus is not None else ""
        lines.append(f"    {name}: {ratio:.2f}x the floor{also}")
    return lines
