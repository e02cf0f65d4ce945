"""The invariants of the product, checked by one function after every test and every soak.

`violations(database_url, at_rest=...)` returns a readable list (empty when all hold):

- seq is gap-free (1..n) in every conversation;
- tool call ids are unique per conversation, every result answers an earlier call, and every call
  has exactly one result (a failed turn may leave the calls of its last assistant message open,
  whether or not a later turn followed);
- at most one final answer per user turn, and it ends the turn (an answer its turn's JSON Schema
  refused, `output_error`, is none: the model was asked again);
- an idle conversation's active path ends with an answer, unless its last turn was cancelled or
  the path was switched at rest since (a switch may show any version, one left unanswered too);
- a conversation at rest has a released lease; a failed one says why;
- the event log: seq is gap-free (1..event_seq); every message has exactly one
  `message.committed` event; every finished turn exactly one terminal event (of its status), an
  unfinished turn none; the last `status.changed` equals the conversation's status (idle when
  there is none); a conversation at rest has no running turn, and no turn still waiting behind
  its last (a queued message would be forgotten) unless that one waits for the user;
- a `requires_action` turn is the current turn of an idle, unleased conversation, with its
  `action.required` event, and its unanswered actions (an approved one is answered) are open
  calls of the last assistant message, whose open calls are all actions;
- every kept tool output (the session tool cache) answers its own tool message, which holds it
  whole or its start and a marker;
- compactions: numbered 1..n per conversation, each with exactly one `context.compacted` event
  naming its range; each names a range of committed messages; what is elided and summarised
  only grows along a path (a compaction is compared with the latest one before it whose anchor,
  its deepest message, is on its own path); a summary never splits a call from its result (no
  result after its range answers a call inside it) and a compaction's turn is of its
  conversation;
- the webhook outbox: every terminal event (and `action.required`) of a conversation a webhook
  hears of, appended after the webhook was made, has exactly its one delivery, of its type; and
  every delivery tells of such an event (while the conversation is there);
- with `at_rest`: every conversation is `idle` or `failed` (a running one must have a live
  heartbeat otherwise);
- no session of the database is left "idle in transaction";
- no MCP test server process of the run is left orphaned (given a marker to recognise them).
"""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from app.testing.services import libpq_dsn

MCP_SERVER_MARK = "tests.servers.mcp_server"


def violations(
    database_url: str,
    *,
    at_rest: bool = True,
    live_within: float = 60.0,
    mcp_marker: str | None = None,
) -> list[str]:
    """Every broken invariant of the database at `database_url`, as sentences."""
    with psycopg.connect(libpq_dsn(database_url), autocommit=True) as conn:
        return violations_seen_by(
            conn, at_rest=at_rest, live_within=live_within, mcp_marker=mcp_marker
        )


def violations_seen_by(
    conn: psycopg.Connection[Any],
    *,
    at_rest: bool = True,
    live_within: float = 60.0,
    mcp_marker: str | None = None,
) -> list[str]:
    """`violations` of the database as `conn` sees it (its own transaction's writes too)."""
    problems: list[str] = []
    conversations = conn.execute(
        "SELECT c.id, c.status, c.error, c.lease_owner, c.heartbeat_at, t.status,"
        " c.lease_token, (SELECT coalesce(max(e.seq), 0) FROM events e"
        "  WHERE e.conversation_id = c.id AND e.type = 'branch.switched'"
        "  AND e.turn_id IS NULL) > (SELECT coalesce(max(e.seq), 0) FROM events e"
        "  WHERE e.conversation_id = c.id AND e.type IN"
        "  ('turn.completed', 'turn.failed', 'turn.cancelled'))"
        " FROM conversations c LEFT JOIN turns t"
        " ON t.conversation_id = c.id AND t.number = c.turn_number"
    ).fetchall()
    problems += event_log_violations(conn)
    problems += tool_cache_violations(conn)
    problems += compaction_violations(conn)
    problems += outbox_violations(conn)
    rows = conn.execute(
        # (an answer refused by its turn's schema is no final answer: its role reads so)
        "SELECT conversation_id, seq, CASE WHEN output_error IS NULL THEN role ELSE"
        f" '{REFUSED}' END, content, tool_calls, tool_call_id, parent_seq, active"
        " FROM messages ORDER BY conversation_id, seq"
    ).fetchall()
    problems += _idle_in_transaction(conn, conn.info.dbname)
    transcripts: dict[Any, list[tuple[Any, ...]]] = defaultdict(list)
    for row in rows:
        transcripts[row[0]].append(row[1:])
    now = datetime.now(UTC)
    for row in conversations:
        conversation_id, status, error, lease_owner, heartbeat_at, turn, token, switched = row
        where = f"conversation {conversation_id} ({status})"
        tree = transcripts.get(conversation_id, [])
        checked = tree_violations(tree)
        active_path = [m[:5] for m in tree if m[6]]
        checked += transcript_violations(
            active_path,
            status,
            # (a turn that waits for the user rests with its calls open: checked above; a
            # fork that ran no turn yet may end on a user message; a switch at rest since the
            # last turn ended shows a version as it was left, an unanswered one too)
            complete=at_rest and turn not in ("requires_action", None) and not switched,
            cancelled=turn == "cancelled",
            numbered=False,
        )
        for leaf, path in inactive_paths(tree):  # (each version once valid, maybe unfinished)
            found = transcript_violations(path, "failed", complete=False, numbered=False)
            checked += [f"the version ending at {leaf}: {p}" for p in found]
        problems += [f"{where}: {p}" for p in checked]
        if status in ("idle", "failed") and lease_owner is not None:
            problems.append(f"{where}: at rest but still leased to {lease_owner}")
        if token is not None and lease_owner is None:  # (a release clears both)
            problems.append(f"{where}: a liveness token ({token}) on no lease")
        if status == "failed" and not (error or "").strip():
            problems.append(f"{where}: failed without an error")
        if status in ("processing", "tool_loop") and at_rest:
            problems.append(f"{where}: still running at the end")
        running = status in ("processing", "tool_loop") and lease_owner is not None
        if running and heartbeat_at < now - timedelta(seconds=live_within):
            problems.append(f"{where}: leased without a live heartbeat ({heartbeat_at})")
    if mcp_marker is not None:
        problems += orphaned_mcp_servers(mcp_marker)
    return problems


def violations_after_test(database_url: str, *, mcp_marker: str | None = None) -> list[str]:
    """The check after a test: the strong one (`at_rest`) when the test left no conversation
    running, else the weak one with a day's heartbeat window (a test may stop mid-turn on
    purpose: a killed worker, a paused claim)."""
    with psycopg.connect(libpq_dsn(database_url), autocommit=True) as conn:
        running = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM conversations"
            " WHERE status IN ('processing', 'tool_loop'))"
        ).fetchone()
    if running is not None and not running[0]:
        return violations(database_url, mcp_marker=mcp_marker)
    return violations(database_url, at_rest=False, live_within=24 * 3600, mcp_marker=mcp_marker)


def tool_cache_violations(conn: psycopg.Connection[Any]) -> list[str]:
    """Every kept tool output answers its own tool message (the foreign key says one exists):
    the same tool, the same error flag, the same turn's conversation; the message holds the
    output, or its start and the marker; `chars` is the output's length."""
    problems: list[str] = []
    for cid, call_id, why in conn.execute(
        "SELECT o.conversation_id, o.call_id, CASE"
        "  WHEN m.tool_name IS DISTINCT FROM o.tool THEN 'another tool'"
        "  WHEN m.is_error <> o.is_error THEN 'another error flag'"
        "  WHEN m.seq <> o.seq THEN 'another seq'"
        "  WHEN t.conversation_id <> o.conversation_id THEN 'another conversation''s turn'"
        "  WHEN o.turn_id IS NOT NULL AND t.id IS NULL THEN 'a missing turn'"
        "  WHEN o.chars <> length(o.content) THEN 'a wrong length'"
        "  WHEN m.content <> o.content AND NOT starts_with(m.content, left(o.content, 100))"
        "   THEN 'another text' END"
        " FROM tool_outputs o JOIN messages m"
        " ON m.conversation_id = o.conversation_id AND m.tool_call_id = o.call_id"
        " LEFT JOIN turns t ON t.id = o.turn_id"  # (a fork's copies have none)
    ):
        if why is not None:
            problems.append(f"conversation {cid}: kept output of {call_id} has {why}")
    return problems


def compaction_violations(conn: psycopg.Connection[Any]) -> list[str]:
    """Every compaction names a committed range, is logged once, grows what it compacts, and
    never splits a call from its result (see the module's list)."""
    problems: list[str] = []
    rows = conn.execute(
        "SELECT k.conversation_id, k.number, k.from_seq, k.through_seq, k.elided_through,"
        " k.summarized_through, (SELECT max(seq) FROM messages m"
        "  WHERE m.conversation_id = k.conversation_id),"
        " (SELECT count(*) FROM events e WHERE e.conversation_id = k.conversation_id"
        "  AND e.type = 'context.compacted' AND (e.data ->> 'number')::int = k.number"
        "  AND e.message_seq = k.through_seq),"
        " (SELECT t.conversation_id FROM turns t WHERE t.id = k.turn_id)"
        " FROM compactions k ORDER BY k.conversation_id, k.number"
    ).fetchall()
    parents: dict[Any, dict[int, int | None]] = defaultdict(dict)
    for cid, seq, parent in conn.execute(
        "SELECT conversation_id, seq, parent_seq FROM messages WHERE conversation_id IN"
        " (SELECT conversation_id FROM compactions)"
    ):
        parents[cid][seq] = parent
    previous: dict[Any, int] = {}
    # what each compaction left, by its anchor (its deepest message): the one before on its path
    chains: dict[Any, list[tuple[int, int, int]]] = defaultdict(list)
    for cid, number, first, through, elided, summarized, last, logged, turn_of in rows:
        where = f"conversation {cid}: compaction {number}"
        if number != previous.get(cid, 0) + 1:
            problems.append(f"{where} follows compaction {previous.get(cid, 0)}")
        if not 1 <= first <= through <= (last or 0):
            problems.append(f"{where} names messages {first}..{through} of {last or 0}")
        anchor = max(elided, summarized)
        ancestry = _ancestors(parents[cid], anchor)
        # (an anchor of 0 compacts nothing: every earlier compaction is before it)
        before = [kept for kept in chains[cid] if anchor == 0 or kept[0] in ancestry]
        if before and (elided < before[-1][1] or summarized < before[-1][2]):
            problems.append(f"{where} compacts less than the one before")
        if logged != 1:
            problems.append(f"{where} has {logged} context.compacted events naming it")
        if turn_of != cid:
            problems.append(f"{where} names a turn of another conversation")
        previous[cid] = number
        chains[cid].append((anchor, elided, summarized))
    for cid, number, call_id in conn.execute(
        "SELECT k.conversation_id, k.number, r.tool_call_id FROM compactions k"
        " JOIN messages r ON r.conversation_id = k.conversation_id AND r.role = 'tool'"
        "  AND r.seq > k.summarized_through"
        " JOIN messages a ON a.conversation_id = k.conversation_id AND a.role = 'assistant'"
        "  AND a.seq <= k.summarized_through AND a.tool_calls IS NOT NULL"
        "  AND jsonb_path_exists(a.tool_calls, '$[*] ? (@.id == $id)',"
        "   jsonb_build_object('id', r.tool_call_id))"
        " WHERE k.summarized_through > 0"
    ):
        problems.append(
            f"conversation {cid}: compaction {number} summarises the call {call_id} "
            "but not its result"
        )
    return problems


def _ancestors(parents: dict[int, int | None], seq: int) -> set[int]:
    """`seq` and every message above it in the tree."""
    found: set[int] = set()
    at: int | None = seq
    while at is not None and at not in found:
        found.add(at)
        at = parents.get(at)
    return found


TOLD = "('turn.completed', 'turn.failed', 'turn.cancelled', 'action.required')"


def outbox_violations(conn: psycopg.Connection[Any]) -> list[str]:
    """The trigger's work, checked from the other side: events that should have a delivery and
    have none, and deliveries that name no such event (a webhook made within a second of an
    event is left out: which came first is a matter of clocks)."""
    problems: list[str] = []
    for webhook, cid, seq in conn.execute(
        "SELECT w.id, e.conversation_id, e.seq FROM events e"
        " JOIN conversations c ON c.id = e.conversation_id"
        " JOIN webhooks w ON (w.conversation_id = c.id OR (w.conversation_id IS NULL"
        "  AND w.owner IS NOT DISTINCT FROM c.owner))"
        f" WHERE e.type IN {TOLD} AND e.created_at > w.created_at + interval '1 second'"
        "  AND w.event_types LIKE '% ' || CASE e.type WHEN 'action.required'"
        "   THEN 'turn.requires_action' ELSE e.type END || ' %'"
        "  AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.webhook_id = w.id"
        "   AND d.conversation_id = e.conversation_id AND d.event_seq = e.seq)"
    ):
        problems.append(f"conversation {cid}: event {seq} has no delivery to webhook {webhook}")
    for delivery, cid, seq in conn.execute(
        "SELECT d.id, d.conversation_id, d.event_seq FROM webhook_deliveries d"
        " JOIN conversations c ON c.id = d.conversation_id"
        " LEFT JOIN events e ON e.conversation_id = d.conversation_id AND e.seq = d.event_seq"
        " WHERE e.seq IS NULL OR e.type NOT IN " + TOLD + " OR e.turn_id IS DISTINCT FROM d.turn_id"
        "  OR d.type <> CASE e.type WHEN 'action.required'"
        "   THEN 'turn.requires_action' ELSE e.type END"
    ):
        problems.append(f"conversation {cid}: delivery {delivery} names event {seq} wrongly")
    return problems


def event_log_violations(conn: psycopg.Connection[Any]) -> list[str]:
    """The event log's invariants, as sentences (see the module docstring)."""
    problems: list[str] = []
    for cid, seqs, last in conn.execute(
        "SELECT c.id, coalesce(array_agg(e.seq ORDER BY e.seq) FILTER (WHERE e.seq IS NOT NULL),"
        " '{}'), c.event_seq FROM conversations c LEFT JOIN events e ON e.conversation_id = c.id"
        " GROUP BY c.id, c.event_seq"
    ):
        if list(seqs) != list(range(1, last + 1)):
            problems.append(f"conversation {cid}: event seqs {list(seqs)} are not 1..{last}")
    for cid, seq, count in conn.execute(
        "SELECT m.conversation_id, m.seq, count(e.seq) FROM messages m LEFT JOIN events e"
        " ON e.conversation_id = m.conversation_id AND e.message_seq = m.seq"
        " AND e.type = 'message.committed' GROUP BY m.conversation_id, m.seq"
        " HAVING count(e.seq) <> 1"
    ):
        problems.append(f"conversation {cid}: message {seq} has {count} message.committed events")
    for cid, seq in conn.execute(
        "SELECT e.conversation_id, e.message_seq FROM events e LEFT JOIN messages m"
        " ON m.conversation_id = e.conversation_id AND m.seq = e.message_seq"
        " WHERE e.type = 'message.committed' AND m.seq IS NULL"
    ):
        problems.append(f"conversation {cid}: message.committed for a missing message {seq}")
    for tid, status, terminals in conn.execute(
        "SELECT t.id, t.status, array_agg(e.type) FILTER (WHERE e.type IS NOT NULL) FROM turns t"
        " LEFT JOIN events e ON e.turn_id = t.id AND e.type IN"
        " ('turn.completed', 'turn.failed', 'turn.cancelled') GROUP BY t.id, t.status"
    ):
        expected = [] if status in ("queued", "running", "requires_action") else [f"turn.{status}"]
        if list(terminals or []) != expected:
            problems.append(f"turn {tid} ({status}): terminal events {terminals}")
    for cid, status, logged in conn.execute(
        "SELECT c.id, c.status, (SELECT e.status FROM events e WHERE e.conversation_id = c.id"
        " AND e.type = 'status.changed' ORDER BY e.seq DESC LIMIT 1) FROM conversations c"
    ):
        if (logged or "idle") != status:
            problems.append(f"conversation {cid} ({status}): last status event says {logged}")
    for cid, status, turn_status in conn.execute(
        "SELECT c.id, c.status, t.status FROM conversations c JOIN turns t"
        " ON t.conversation_id = c.id AND t.number = c.turn_number"
        " WHERE c.status IN ('idle', 'failed') AND t.status IN ('queued', 'running')"
    ):
        problems.append(f"conversation {cid} ({status}): its current turn is {turn_status}")
    for cid, status, number in conn.execute(
        "SELECT c.id, c.status, t.number FROM conversations c JOIN turns t"
        " ON t.conversation_id = c.id AND t.number > c.turn_number"
        " WHERE c.status IN ('idle', 'failed') AND t.status = 'queued' AND NOT EXISTS ("
        "  SELECT 1 FROM turns w WHERE w.conversation_id = c.id AND w.number = c.turn_number"
        "  AND w.status = 'requires_action')"  # (they wait behind the one that waits for the user)
    ):
        problems.append(f"conversation {cid} ({status}): turn {number} still waits, forgotten")
    problems += _waiting_turn_violations(conn)
    return problems


def _waiting_turn_violations(conn: psycopg.Connection[Any]) -> list[str]:
    """A `requires_action` turn is the current one of a resting (`idle`), unleased conversation,
    with an `action.required` event, and its unanswered actions are exactly the open calls of
    the transcript's last assistant message."""
    problems: list[str] = []
    for tid, cid, actions, status, current, lease_owner, required in conn.execute(
        "SELECT t.id, t.conversation_id, t.actions, c.status, t.number = c.turn_number,"
        " c.lease_owner, (SELECT count(*) FROM events e WHERE e.turn_id = t.id"
        "  AND e.type = 'action.required')"
        " FROM turns t JOIN conversations c ON c.id = t.conversation_id"
        " WHERE t.status = 'requires_action'"
    ):
        where = f"turn {tid} (requires_action)"
        if not current or status != "idle" or lease_owner is not None:
            problems.append(f"{where}: current={current}, conversation {status}, {lease_owner=}")
        if not required:
            problems.append(f"{where}: no action.required event")
        last_calls = conn.execute(
            "SELECT tool_calls FROM messages WHERE conversation_id = %s AND role = 'assistant'"
            " ORDER BY seq DESC LIMIT 1",
            (cid,),
        ).fetchone()
        results = {
            row[0]
            for row in conn.execute(
                "SELECT tool_call_id FROM messages WHERE conversation_id = %s AND role = 'tool'",
                (cid,),
            )
        }
        open_calls = {c["id"] for c in (last_calls[0] if last_calls else None) or ()} - results
        asked = {a["call_id"] for a in actions or ()}
        approved = {a["call_id"] for a in actions or () if a.get("decision") == "approved"}
        pending = asked - results - approved
        # (an approved call is open until the turn goes on and runs it)
        if not pending or not pending <= open_calls or not open_calls <= asked:
            problems.append(f"{where}: pending actions {pending} but open calls {open_calls}")
    return problems


REFUSED = "refused"  # the role the checks read for an answer refused by its schema


def tree_violations(messages: list[tuple[Any, ...]]) -> list[str]:
    """The tree of (seq, role, content, tool_calls, tool_call_id, parent_seq, active) rows, in
    seq order: seq gap-free over every branch; each parent an older message of the conversation;
    the active messages exactly one path, from a root to the newest of them (the leaf)."""
    problems = []
    seqs = [m[0] for m in messages]
    if seqs != list(range(1, len(seqs) + 1)):
        problems.append(f"seq is not gap-free: {seqs}")
    known = set(seqs)
    for seq, *_rest, parent, _active in messages:
        if parent is not None and (parent not in known or parent >= seq):
            problems.append(f"message {seq} names the parent {parent}, not an older message")
    active = [(m[0], m[5]) for m in messages if m[6]]
    for index, (seq, parent) in enumerate(active):
        expected = active[index - 1][0] if index else None
        if parent != expected:
            problems.append(
                f"the active messages are not one path: {seq} follows {parent}, not {expected}"
            )
            break
    return problems


def inactive_paths(messages: list[tuple[Any, ...]]) -> list[tuple[int, list[tuple[Any, ...]]]]:
    """Each inactive leaf (a message no other follows, off the active path) and its path from
    a root, as transcript rows."""
    by_seq = {m[0]: m for m in messages}
    parents = {m[5] for m in messages}
    found = []
    for seq, *_rest, _parent, active in messages:
        if active or seq in parents:
            continue
        path, at = [], seq
        while at is not None and at in by_seq:
            path.append(by_seq[at][:5])
            at = by_seq[at][5]
        found.append((seq, path[::-1]))
    return found


def transcript_violations(
    messages: list[tuple[Any, ...]],
    status: str,
    complete: bool = True,
    cancelled: bool = False,
    *,
    numbered: bool = True,
) -> list[str]:
    """Violations within one transcript of (seq, role, content, tool_calls, tool_call_id) rows.

    `complete`: the conversation is at rest, so every call but a failed turn's last is answered
    and an idle transcript ends with an answer, unless its last turn was `cancelled` (its calls
    are all answered, but there may be no answer). `numbered`: the seqs are 1..n (a path of a
    tree is not: `tree_violations` checks the numbering of the whole).
    """
    problems = []
    seqs = [m[0] for m in messages]
    if numbered and seqs != list(range(1, len(seqs) + 1)):
        problems.append(f"seq is not gap-free: {seqs}")
    asked, answered, last_calls, abandoned = _calls_and_results(messages, problems)
    if len(asked) != len(set(asked)):
        problems.append("tool call ids are not unique")
    may_be_open = set(abandoned) | (set(last_calls) if status != "idle" or not complete else set())
    for call_id in asked:
        if answered[call_id] > 1:
            problems.append(f"tool call {call_id} has {answered[call_id]} results")
        elif answered[call_id] == 0 and call_id not in may_be_open:
            problems.append(f"tool call {call_id} has no result")
    ends_open = bool(messages) and (messages[-1][1] != "assistant" or bool(messages[-1][3]))
    if complete and status == "idle" and ends_open and not cancelled:
        problems.append("idle, but the transcript does not end with an answer")
    return problems


def _calls_and_results(
    messages: list[tuple[Any, ...]], problems: list[str]
) -> tuple[list[str], dict[str, int], list[str], list[str]]:
    """Walk the transcript: calls asked, results per call, the last message's calls, and the
    calls a turn ended on (a user message came next with no answer between: the turn failed);
    note results that answer nothing and turns with more than one final answer."""
    asked: list[str] = []
    answered: dict[str, int] = defaultdict(int)
    last_calls: list[str] = []
    turn_calls: list[str] = []
    abandoned: list[str] = []
    finals_in_turn = 0
    for index, (seq, role, _content, tool_calls, tool_call_id) in enumerate(messages):
        if role == "user":
            finals_in_turn = 0
            abandoned += turn_calls
            turn_calls = []
        elif role == "assistant" and tool_calls:
            last_calls = turn_calls = [call["id"] for call in tool_calls]
            asked += last_calls
        elif role == "assistant":
            finals_in_turn += 1
            turn_calls = []
            following = messages[index + 1] if index + 1 < len(messages) else None
            if finals_in_turn > 1:
                problems.append(f"more than one final answer in one turn (seq {seq})")
            if following is not None and following[1] != "user":
                problems.append(f"the final answer at seq {seq} is followed by a {following[1]}")
        elif role == REFUSED:  # the model was asked again: no final answer, no call
            turn_calls = []
        elif role == "tool":
            if tool_call_id not in asked:
                problems.append(f"result at seq {seq} answers no earlier call ({tool_call_id})")
            answered[tool_call_id] += 1
    return asked, answered, last_calls, abandoned


def _idle_in_transaction(
    conn: psycopg.Connection[Any], database: str, stuck_after: float = 2.0
) -> list[str]:
    """Sessions idle in a transaction for `stuck_after` seconds. A live worker is idle in one for
    a moment between a statement and its COMMIT (longer when the machine is loaded), so a
    session that is idle in a young transaction is looked at again once it would be stuck."""
    query = (
        "SELECT pid, application_name, state_change, "
        "       extract(epoch FROM clock_timestamp() - state_change) "
        "FROM pg_stat_activity "
        "WHERE datname = %s AND state LIKE 'idle in transaction%%' AND pid <> pg_backend_pid()"
    )
    rows = conn.execute(query, (database,)).fetchall()
    young = [float(age) for *_, age in rows if float(age) < stuck_after]
    if young:
        time.sleep(stuck_after - min(young))
        rows = conn.execute(query, (database,)).fetchall()
    return [
        f"session {pid} ({app}) idle in transaction since {since}"
        for pid, app, since, age in rows
        if float(age) >= stuck_after
    ]


def orphaned_mcp_servers(marker: str, grace: float = 5.0) -> list[str]:
    """MCP test servers of this run (`marker` in their environment, e.g. the ledger path) whose
    parent is gone. A server exits by itself on EOF, so each gets `grace` seconds to do so."""
    deadline = time.monotonic() + grace
    while True:
        found = [_describe(pid) for pid in _orphans(marker)]
        if not found or time.monotonic() > deadline:
            return [f"orphaned MCP server process {text}" for text in found]
        time.sleep(0.1)


def _orphans(marker: str) -> list[str]:
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:  # (the command line first: it rules out nearly every process, cheaply)
            if MCP_SERVER_MARK.encode() not in (proc / "cmdline").read_bytes():
                continue
            environ = (proc / "environ").read_bytes()
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if marker.encode() in environ and (ppid == 1 or not Path(f"/proc/{ppid}").exists()):
            pids.append(proc.name)
    return pids


def _describe(pid: str) -> str:
    try:
        return f"{pid}: " + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return pid


def assert_invariants(
    database_url: str, *, at_rest: bool = True, mcp_marker: str | None = None
) -> None:
    problems = violations(database_url, at_rest=at_rest, mcp_marker=mcp_marker)
    assert not problems, "invariants violated:\n  " + "\n  ".join(problems)


__all__ = [
    "assert_invariants",
    "event_log_violations",
    "orphaned_mcp_servers",
    "transcript_violations",
    "violations",
    "violations_after_test",
]
