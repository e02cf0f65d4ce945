"""A conversation as a tree costs what its active path costs: the claim's history read and the
loop's per-iteration cost on a conversation of 1,000 messages over 50 branches, beside a single
path of the same active length (200 messages), interleaved in one run (the goal: within 1.1x).

The tree is laid out as it grows in use: each of 50 rounds adds a turn to the active path (4
messages) and a 16-message version that hangs off that turn's answer and was left (an edit of
the next message, answered over 4 turns, then switched away from), so the branches' seqs are
interleaved with the path's. Every claim here reads the whole active path (no transcript kept
between turns), the read the tree changes. Also measured: what a fork's copy stores per message.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg

from app.client import ChatClient
from bench.history import _run, _spread, echo_bench
from bench.overhead import ITERATIONS_PER_TURN
from bench.stats import Row, median

ROUNDS = 50  # turns on the active path, and versions left beside it
BRANCH = 16  # messages of each version left
GOAL_RATIO = 1.1
QUAD = ("user", "assistant", "tool", "assistant")


def _rows(conversation_id: uuid.UUID, tree: bool) -> list[tuple[Any, ...]]:
    """(conversation, seq, parent, role, content, tool_calls, call id, tool, active) rows."""
    rows: list[tuple[Any, ...]] = []
    leaf: int | None = None
    for round_ in range(ROUNDS):
        answer = _quads(conversation_id, rows, leaf, f"p{round_}", 1, active=True)
        if tree:  # a version beside the path's next message, left
            _quads(conversation_id, rows, answer, f"b{round_}", BRANCH // 4, active=False)
        leaf = answer
    return rows


def _quads(
    conversation_id: uuid.UUID,
    rows: list[tuple[Any, ...]],
    parent: int | None,
    tag: str,
    count: int,
    *,
    active: bool,
) -> int:
    """`count` complete turns below `parent`; the seq of the last answer."""
    for quad in range(count):
        for position, role in enumerate(QUAD):
            seq = len(rows) + 1
            call = f"{tag}q{quad}" if position in (1, 2) else None
            calls = (
                [{"id": call, "name": "echo", "arguments": '{"n": 1}'}] if position == 1 else None
            )
            content = None if position == 1 else f"{role} {tag} {quad}"
            rows.append(
                (
                    conversation_id,
                    seq,
                    parent,
                    role,
                    content,
                    None if calls is None else psycopg.types.json.Jsonb(calls),
                    call if position == 2 else None,
                    "echo" if position == 2 else None,
                    active,
                )
            )
            parent = seq
    assert parent is not None
    return parent


INSERT = (
    "INSERT INTO messages (conversation_id, seq, parent_seq, role, content, tool_calls, "
    "tool_call_id, tool_name, active) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)


def _prepare(client: ChatClient, dsn: str, tree: bool, count: int) -> list[uuid.UUID]:
    ids = [client.create_conversation(tools=["echo"]) for _ in range(count)]
    with psycopg.connect(dsn) as conn:
        for conversation_id in ids:
            with conn.cursor() as cursor:
                cursor.executemany(INSERT, _rows(conversation_id, tree))
        conn.execute("ANALYZE messages")
    return ids


def measure_tree(
    database_url: str, conversations: int, turns: int
) -> tuple[list[Row], dict[str, Any]]:
    # no kept transcripts: every claim reads the whole path
    engine, store, client, runner, dsn = echo_bench(database_url, None)
    shapes = {"tree": True, "path": False}
    prepared = {name: _prepare(client, dsn, tree, conversations) for name, tree in shapes.items()}
    sizes = {
        name: (
            len(client.get_conversation(ids[0], all_versions=True).messages),
            len(client.get_conversation(ids[0]).messages),
        )
        for name, ids in prepared.items()
    }
    # Interleaved (tree, path, tree, ...), so a noisy neighbour slows both alike.
    order = [(name, prepared[name][i]) for i in range(conversations) for name in shapes]
    whole: dict[str, list[float]] = {name: [] for name in shapes}
    claims: dict[str, list[float]] = {name: [] for name in shapes}
    steps: dict[str, list[float]] = {name: [] for name in shapes}
    for turn in range(turns):
        for _, conversation_id in order:
            client.submit_message(conversation_id, f"turn {turn}")
        store.claims = []
        ran = asyncio.run(_run(runner, [conversation_id for _, conversation_id in order]))
        for (name, _), took, claim in zip(order, ran, store.claims, strict=True):
            if turn == 0:
                continue  # (a warm-up turn: the prepared statements, the pages read)
            whole[name].append(took / ITERATIONS_PER_TURN)
            claims[name].append(claim)
            steps[name].append((took - claim) / ITERATIONS_PER_TURN)
    fork = _fork_bytes(client, dsn, prepared["path"][0])
    engine.dispose()
    rows: list[Row] = []
    for name in shapes:
        total, active = sizes[name]
        label = f"{name} ({total:,} msgs, {active} on the path)"
        rows += [
            (f"{label}: claim, whole path read", *_spread(claims[name]), "ms/turn"),
            (f"{label}: steps after the claim", *_spread(steps[name]), "ms/iteration"),
            (f"{label}: durable loop", *_spread(whole[name]), "ms/iteration"),
        ]
    rows.append(("fork: stored per copied message", fork["per_message"], fork["per_message"], "B"))
    extra = {
        "claim_ratio": median(claims["tree"]) / median(claims["path"]),
        "steps_ratio": median(steps["tree"]) / median(steps["path"]),
        "loop_ratio": median(whole["tree"]) / median(whole["path"]),
        "goal_ratio": GOAL_RATIO,
        "sizes": sizes,
        "fork": fork,
    }
    return rows, extra


def _fork_bytes(client: ChatClient, dsn: str, conversation_id: uuid.UUID) -> dict[str, float]:
    """A fork of the whole path: the bytes its copied rows take (tuples, as stored)."""
    fork = client.fork_conversation(conversation_id)
    with psycopg.connect(dsn) as conn:
        found = conn.execute(
            "SELECT count(*), sum(pg_column_size(m.*)) FROM messages m WHERE conversation_id = %s",
            (fork.id,),
        ).fetchone()
    assert found is not None
    count, size = int(found[0]), int(found[1] or 0)
    return {"messages": count, "bytes": size, "per_message": size / max(1, count)}


def tree_notes(extras: dict[str, Any]) -> list[str]:
    """The line under the table: the ratios against the goal, a fork's storage."""
    if "tree" not in extras:
        return []
    t = extras["tree"]
    worst = max(t["claim_ratio"], t["steps_ratio"], t["loop_ratio"])
    met = "met" if worst <= t["goal_ratio"] else "MISSED"
    fork = t["fork"]
    return [
        f"tree / single path of the same active length: claim {t['claim_ratio']:.2f}x, steps "
        f"{t['steps_ratio']:.2f}x, loop {t['loop_ratio']:.2f}x (goal <= {t['goal_ratio']}: "
        f"{met}); a fork stores {fork['per_message']:.0f} B per copied message "
        f"({fork['messages']} messages, {fork['bytes']:,} B)"
    ]


__all__ = ["measure_tree", "tree_notes"]
