"""The SSE stream of a conversation, interrupted and resumed, through real API and worker processes.

what happens                                   what the reader gets
---------------------------------------------  ---------------------------------------------
a finished tool turn replayed from 0, the      at every boundary: the first connection's
  connection dropped after item i and resumed    items then the second's == the uninterrupted
  with `Last-Event-ID` = item i's id             stream, byte for byte (each event once)
the same, for each id of a live read (a        the committed events after it, exactly
  delta's id too) once the turn has finished
the same while the turn runs (a few             the committed events exactly as uninterrupted;
  boundaries: events, deltas, the commit)        deltas never twice nor skipped; the answer
the worker SIGKILLed while the answer streams   on the same connection: `message.discarded`
  (a second worker takes over: 3 s lease)        for the partial, `turn.resumed`, the new
                                                 deltas, the crash-free answer, `turn.completed`
the API process SIGKILLed mid-stream; the       no gap, no duplicate: the deltas go on where
  reader resumes on a second API process          they stopped, the events once, the answer
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace

import httpx

from app.client import Cursor, Delta, Discarded, EventPage, EventView, Following
from app.live import ANY_STREAM, RESUMED, TEXT, CommitNotice, Fragment, LiveEntry
from app.live.memory import MemoryChannel
from tests.api.conftest import Deployment
from tests.api.private_services import (
    Item,
    after_items,
    answer_of,
    assert_deltas_consistent,
    assert_each_event_once,
    boot,
    committed_of,
    deltas_of,
    read_sse,
    wait_until,
    without_turn,
)

ANSWER = (
    "Two and three make five; the add tool agrees, and so does every accountant who has "
    "ever balanced a ledger at the end of a long and quiet afternoon."
)
TOOL_CALL = {"tool_calls": [{"id": "call_add", "name": "add", "arguments": {"a": 2, "b": 3}}]}


def new_conversation(http: httpx.Client, tools: list[str] | None = None) -> str:
    created = http.post("/v1/conversations", json={"tools": tools or []})
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def submit(http: httpx.Client, conversation_id: str, text: str) -> str:
    submitted = http.post(f"/v1/conversations/{conversation_id}/messages", json={"text": text})
    assert submitted.status_code == 202, submitted.text
    return str(submitted.json()["turn"]["id"])


def resumed(
    http: httpx.Client, conversation_id: str, stop: Callable[[list[Item]], bool]
) -> tuple[list[Item], list[Item]]:
    """Read from the start until `stop`, drop the connection, reconnect with `Last-Event-ID`
    and read to the end: both connections' items."""
    first = read_sse(http, conversation_id, after="0", stop=stop)
    assert first and first[-1].event != "stream.end", first
    second = read_sse(http, conversation_id, last_event_id=first[-1].id)
    return first, second


def test_a_tool_turn_resumes_at_every_boundary_live_and_replayed(deployment: Deployment) -> None:
    deployment.fake_llm.script(
        [
            {**TOOL_CALL, "delay": 2},  # (the readers are all attached when the turn goes on)
            {"text": ANSWER, "stream": True, "chunks": 16, "chunk_delay": 0.2},
        ],
        mode="by_iteration",
    )
    boot(deployment)
    token = deployment.key("alice")
    with deployment.http(token=token) as http:
        conversation_id = new_conversation(http, ["add"])
        submit(http, conversation_id, "add 2 and 3")

        # --- live: readers that each drop their connection at another boundary, and one that
        # reads the whole stream, all while the turn runs
        def after_answer_delta(index: int) -> Callable[[list[Item]], bool]:
            return lambda items: any(  # (the tool call's delta has no text)
                d.data["index"] == index and d.data["text"] for d in deltas_of(items)
            )

        boundaries: dict[str, Callable[[list[Item]], bool]] = {
            "the first event": lambda items: len(items) == 1,
            "the tool call's delta": lambda items: len(deltas_of(items)) == 1,
            "the tool call": lambda items: any(
                i.event == "message.committed" and i.data["message"].get("tool_calls")
                for i in items
            ),
            "the answer's first delta": after_answer_delta(0),
            "the answer's fourth delta": after_answer_delta(3),
            "the answer's commit": lambda items: answer_of(items) is not None,
        }
        with ThreadPoolExecutor(len(boundaries) + 1) as pool:
            whole_live = pool.submit(read_sse, http, conversation_id, after="0")
            cut = {name: pool.submit(resumed, http, conversation_id, stop) for name, stop in
                   boundaries.items()}  # fmt: skip
            live = whole_live.result(timeout=90)
            live_cut = {name: future.result(timeout=90) for name, future in cut.items()}

        # --- the finished turn, replayed
        replay = read_sse(http, conversation_id, after="0")

    assert_each_event_once(replay)
    assert replay[-1].event == "stream.end"
    assert [i.event for i in replay] == [
        "turn.queued",
        "message.committed",  # the user's message
        "status.changed",
        "turn.started",
        "message.committed",  # the tool call
        "status.changed",
        "message.committed",  # the tool's result
        "message.committed",  # the answer
        "turn.completed",
        "status.changed",
        "stream.end",
    ]
    assert deltas_of(replay) == []  # the answer is committed: its deltas are stale
    assert answer_of(replay) == ANSWER
    statuses = [i.data["status"] for i in replay if i.event == "status.changed"]
    assert statuses == ["processing", "tool_loop", "idle"]

    # the uninterrupted live read: the same events, the answer's words before its commit
    assert_each_event_once(live)
    assert without_turn(live) == without_turn(replay)
    assert_deltas_consistent(live)
    words = "".join(i.data["text"] for i in deltas_of(live))
    assert len(deltas_of(live)) >= 4 and ANSWER.startswith(words), words
    answer_commit = next(i for i in live if i.event == "message.committed" and
                         i.data["message"].get("content") == ANSWER)  # fmt: skip
    assert live.index(deltas_of(live)[-1]) < live.index(answer_commit)

    # live, cut at each boundary and resumed
    for name, (first, second) in live_cut.items():
        joined = first + second
        assert without_turn(joined) == without_turn(replay), name
        assert_deltas_consistent(joined)
        assert answer_of(joined) == ANSWER, name
        assert joined[-1].event == "stream.end", name
        shown = "".join(i.data["text"] for i in deltas_of(joined))
        assert ANSWER.startswith(shown), (name, shown)
    first, second = live_cut["the answer's fourth delta"]
    assert first[-1].data["index"] == 3
    assert deltas_of(second) and deltas_of(second)[0].data["index"] == 4, (
        "the deltas go on where the first connection stopped",
        second,
    )

    with deployment.http(token=token) as http:
        # every boundary of the finished replay: the two connections make the replay exactly
        for i in range(len(replay) - 1):
            first = read_sse(http, conversation_id, after="0", stop=after_items(i + 1))
            second = read_sse(http, conversation_id, last_event_id=first[-1].id)
            assert first + second == replay, i
        # `?after=` resumes as `Last-Event-ID` does
        middle = replay[len(replay) // 2]
        assert (
            read_sse(http, conversation_id, after=middle.id) == replay[replay.index(middle) + 1 :]
        )
        # every id of the live read, resumed once the turn has finished: the events after it
        for position, item in enumerate(live[:-1]):
            rest = read_sse(http, conversation_id, last_event_id=item.id)
            expected = [i for i in replay if not i.committed or i.seq > int(item.id.split(":")[0])]
            assert rest == expected, (position, item)
            assert without_turn(rest) == without_turn(live[position + 1 :])


def test_a_worker_killed_mid_answer_is_replaced_and_the_same_stream_goes_on(
    deployment: Deployment,
) -> None:
    deployment.fake_llm.script(
        [{"text": ANSWER, "stream": True, "chunks": 30, "chunk_delay": 0.1}], mode="by_iteration"
    )
    boot(deployment, workers=2)
    doomed, replacement = deployment.workers
    replacement.pause()  # frozen: the doomed worker must be the one answering
    killed = threading.Event()

    def kill_mid_answer(item: Item) -> None:
        if item.event == "message.delta" and item.data["index"] == 4 and not killed.is_set():
            doomed.kill()
            killed.set()
            replacement.resume()  # it finds the turn when the dead worker's lease (3 s) expires

    with deployment.http(token=deployment.key("bob")) as http:
        conversation_id = new_conversation(http)
        turn_id = submit(http, conversation_id, "tell me about sums")
        items = read_sse(
            http, conversation_id, after="0", until="turn_end", on_item=kill_mid_answer
        )
        turn = http.get(f"/v1/turns/{turn_id}").json()

    assert killed.is_set()
    events = [i.event for i in items]
    assert events[-2:] == ["turn.completed", "stream.end"], events
    assert_each_event_once(items)
    assert_deltas_consistent(items)
    assert events.count("turn.resumed") == 1 and events.count("message.discarded") == 1, events
    discarded = events.index("message.discarded")
    started = ["turn.queued", "message.committed", "status.changed", "turn.started"]
    assert events[:discarded] == started + ["message.delta"] * (discarded - 4), events
    assert discarded < events.index("turn.resumed")
    partial = items[discarded].data
    assert partial["stream"] == deltas_of(items)[0].data["stream"]
    after = items[discarded + 1 :]
    new_words = "".join(i.data["text"] for i in deltas_of(after))
    assert new_words and ANSWER.startswith(new_words), new_words
    assert {i.data["stream"] for i in deltas_of(after)}.isdisjoint({partial["stream"]})
    assert answer_of(items) == ANSWER  # what a crash-free run commits
    assert [i.event for i in committed_of(after)][-2:] == ["message.committed", "turn.completed"]
    assert turn["status"] == "completed" and turn["error"] is None


def test_an_api_killed_mid_stream_is_resumed_on_another_without_gap_or_duplicate(
    deployment: Deployment,
) -> None:
    deployment.fake_llm.script(
        [TOOL_CALL, {"text": ANSWER, "stream": True, "chunks": 30, "chunk_delay": 0.12}],
        mode="by_iteration",
    )
    boot(deployment, apis=2)
    doomed, survivor = deployment.apis
    token = deployment.key("carol")

    def kill_mid_answer(item: Item) -> None:
        if item.event == "message.delta" and item.data["index"] == 4:
            doomed.kill()

    with deployment.http(doomed, token) as http:
        conversation_id = new_conversation(http, ["add"])
        submit(http, conversation_id, "add 2 and 3")
        first = read_sse(
            http, conversation_id, after="0", until="turn_end", on_item=kill_mid_answer
        )
    assert doomed.process is not None and doomed.process.poll() is not None
    assert first and first[-1].event != "stream.end"
    with deployment.http(survivor, token) as http:
        second = read_sse(http, conversation_id, last_event_id=first[-1].id, until="turn_end")
        wait_until(
            lambda: http.get(f"/v1/conversations/{conversation_id}").json()["status"] == "idle",
            30,
            "the conversation at rest",
        )
        replay = read_sse(http, conversation_id, after="0")

    joined = first + second
    assert_each_event_once(joined)
    assert [i.event for i in second[-2:]] == ["turn.completed", "stream.end"]
    # (`until=turn_end`: the conversation's status.changed to idle comes after)
    assert without_turn(joined) == without_turn(replay)[: len(committed_of(joined))]
    assert committed_of(replay)[-1].event == "status.changed"
    assert len(committed_of(joined)) == len(committed_of(replay)) - 1
    assert_deltas_consistent(joined)
    last_shown = deltas_of(first)[-1].data
    assert deltas_of(second), "the answer was still streaming when the reader came back"
    assert deltas_of(second)[0].data["stream"] == last_shown["stream"]
    assert deltas_of(second)[0].data["index"] == last_shown["index"] + 1
    assert ANSWER.startswith("".join(i.data["text"] for i in deltas_of(joined)))
    assert answer_of(joined) == ANSWER


# --- the order the follower reads in (in process: the race made certain) --------------------------


@dataclass
class FakeLog:
    """A conversation's committed log, as `Following` reads it from the client."""

    conversation_id: uuid.UUID
    events: list[EventView] = field(default_factory=list)
    last_message_seq: int = 1

    def add(self, kind: str, message_seq: int | None = None) -> None:
        self.events.append(
            EventView(len(self.events) + 1, kind, self.conversation_id, None, datetime.now(UTC),
                      message_seq=message_seq)
        )  # fmt: skip

    def events_after(self, after: int) -> EventPage:
        found = [event for event in self.events if event.seq > after]
        return EventPage(
            self.conversation_id, found, len(self.events), "processing", self.last_message_seq
        )


def test_a_commit_notice_is_answered_before_the_entries_published_after_it() -> None:
    """The worker that resumes a turn commits `turn.resumed`, publishes its notice and the
    discard of the dead worker's partial, then the new reply's deltas. A reader that gets all of
    them in one read must not show the new reply and then drop it for the `turn.resumed` the
    notice announced (it would see two discards, and no more of the reply until its commit)."""
    conversation_id = uuid.uuid4()
    log = FakeLog(conversation_id)
    for kind in ("turn.queued", "message.committed", "status.changed", "turn.started"):
        log.add(kind, 1 if kind == "message.committed" else None)
    channel = MemoryChannel()

    async def log_page(_id: uuid.UUID, after: int, offload: object) -> EventPage:
        return log.events_after(after)

    client = SimpleNamespace(log_page=log_page)
    following = Following(
        client,  # type: ignore[arg-type]
        conversation_id,
        Cursor(0),
        until=None,
        timeout=10,
        poll_interval=0.05,
        channel=channel,
    )

    def publish(*entries: LiveEntry) -> None:
        channel.publish([(conversation_id, entry) for entry in entries])

    def delta(stream: str, index: int) -> Delta:
        return Delta(2, stream, index, (Fragment(TEXT, 0, index, "w"),))

    assert [next(following).seq for _ in range(4)] == [1, 2, 3, 4]  # type: ignore[union-attr]
    publish(delta("dead", 0), delta("dead", 1))
    assert [next(following), next(following)] == [delta("dead", 0), delta("dead", 1)]
    log.add("turn.resumed")
    publish(CommitNotice(5), Discarded(2, ANY_STREAM, RESUMED), delta("new", 0), delta("new", 1))
    got = [next(following) for _ in range(4)]
    assert got[0] == Discarded(2, "dead", RESUMED)
    assert isinstance(got[1], EventView) and got[1].type == "turn.resumed"
    assert got[2:] == [delta("new", 0), delta("new", 1)]
    assert str(following.cursor) == "5:2:new:1"
    following.close()
