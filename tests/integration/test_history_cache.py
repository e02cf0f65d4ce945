"""The transcripts a worker process keeps between turns (`app/worker/history.py`): a claim of a
conversation it ran before reads only what was committed since, and sends exactly what a claim
that read everything would; a kept transcript that no longer matches what is committed (another
worker compacted the conversation meanwhile) is read again whole. On PostgreSQL and SQLite.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from app.testing import fakes
from app.worker.history import Histories
from app.worker.lease_runner import Outcome
from app.worker.plan import Entry
from app.worker.store import Snapshot, TurnStore
from app.worker.transcript import Transcript
from tests.integration.test_loop import ADD_THEN_ANSWER, World, make_tools, run
from tests.integration.test_user_in_the_loop import world_of

LOCATE = {"name": "get_location", "parameters": {"type": "object", "properties": {}}}


@pytest.fixture
def world(any_database_url: str) -> Iterator[World]:
    yield from world_of(any_database_url, make_tools())


def kept_store(world: World) -> TurnStore:
    return TurnStore(world.engine, histories=Histories(8))


def answered(world: World, store: TurnStore, conversation_id: uuid.UUID) -> bool:
    """A turn of the model that adds, then answers, run to its end with `store`."""
    model = fakes.ScriptedModel(ADD_THEN_ANSWER)
    return run(world.runner(model, store=store), conversation_id) is Outcome.IDLE


def fresh_claim(world: World, conversation_id: uuid.UUID) -> Snapshot:
    """What a process that kept nothing reads (then the lease is given back)."""
    snapshot = TurnStore(world.engine).claim(conversation_id, "reader", 30)
    assert isinstance(snapshot, Snapshot)
    world.store.release(snapshot.claim)
    return snapshot


def test_a_claim_reads_only_what_was_committed_since_and_sends_the_same(world: World) -> None:
    store = kept_store(world)
    conversation_id = world.conversation("What is 1 + 2?", tools=["add"])
    assert answered(world, store, conversation_id)
    assert store.histories is not None and len(store.histories) == 1
    kept = store.histories.take(conversation_id)
    assert kept is not None and [e.seq for e in kept] == [1, 2, 3, 4]
    store.histories.keep(conversation_id, kept)

    world.client.submit_message(conversation_id, "And 2 + 2?")
    whole = fresh_claim(world, conversation_id).transcript
    snapshot = store.claim(conversation_id, "worker-1", 30)
    assert isinstance(snapshot, Snapshot)
    assert snapshot.transcript is kept  # the kept one, with the new message appended
    assert list(snapshot.transcript) == list(whole)
    assert snapshot.transcript.provider_messages() == whole.provider_messages()
    assert snapshot.transcript.call_ids == whole.call_ids
    store.release(snapshot.claim)
    assert store.histories.take(conversation_id) is None  # taken while it was claimed
    assert answered(world, store, conversation_id)


def test_answers_the_web_side_committed_meanwhile_are_read(world: World) -> None:
    """A turn that waits for the client: the run keeps its transcript, the client's answer is
    committed by the web side, and the next claim here reads it after what it kept."""
    store = kept_store(world)
    conversation_id = world.conversation("Where am I?", tools=["add"], client_tools=[LOCATE])
    asking = fakes.ScriptedModel(
        fakes.by_iteration([fakes.calls(("c_loc", "get_location", {})), fakes.text("Paris.")])
    )
    assert run(world.runner(asking, store=store), conversation_id) is Outcome.REQUIRES_ACTION
    turn = world.client.current_turn(conversation_id)
    assert turn is not None
    world.client.answer_actions(turn.id, outputs={"c_loc": "Paris"})
    assert run(world.runner(asking, store=store), conversation_id) is Outcome.IDLE
    sent = asking.requests[-1].messages
    assert sent[-1] == {"role": "tool", "tool_call_id": "c_loc", "content": "Paris"}
    roles = [m.role for m in world.client.get_conversation(conversation_id).messages]
    assert roles == ["user", "assistant", "tool", "assistant"]


def test_a_kept_transcript_that_no_longer_matches_is_read_again_whole(world: World) -> None:
    store = kept_store(world)
    conversation_id = world.conversation("What is 1 + 2?", tools=["add"])
    assert answered(world, store, conversation_id)
    # Another worker's run compacts the conversation meanwhile (here: a kept copy from before).
    assert store.histories is not None
    kept = store.histories.take(conversation_id)
    assert kept is not None
    stale = kept
    stale.compact(stale.compacted._replace(number=5, elided_through=3))
    store.histories.keep(conversation_id, stale)
    world.client.submit_message(conversation_id, "And 2 + 2?")
    snapshot = store.claim(conversation_id, "worker-1", 30)
    assert isinstance(snapshot, Snapshot)
    assert snapshot.transcript is not stale
    assert [e.seq for e in snapshot.transcript] == [1, 2, 3, 4, 5]
    assert snapshot.transcript.compacted.number == 0  # what is committed
    store.release(snapshot.claim)
    assert answered(world, store, conversation_id)


def test_a_claim_that_finds_nothing_to_do_keeps_what_it_had(world: World) -> None:
    store = kept_store(world)
    conversation_id = world.conversation("What is 1 + 2?", tools=["add"])
    assert answered(world, store, conversation_id)
    assert store.claim(conversation_id, "worker-1", 30) is None  # at rest: nothing to claim
    assert store.histories is not None and len(store.histories) == 1


def test_the_cache_holds_at_most_its_memory_least_recently_kept_first(world: World) -> None:
    ids = [world.conversation(f"Q{n}", tools=["add"]) for n in range(3)]
    roomy = TurnStore(world.engine, histories=Histories(8))
    assert answered(world, roomy, ids[0])
    assert roomy.histories is not None
    one = roomy.histories.weight  # what one such transcript weighs
    assert one > 0
    histories = Histories(2.5 * one / 1024 / 1024)  # room for two of them
    store = TurnStore(world.engine, histories=histories)
    for conversation_id in ids[1:]:
        assert answered(world, store, conversation_id)
    histories.keep(ids[0], roomy.histories.take(ids[0]) or Transcript(None))
    assert len(histories) == 2 and histories.weight <= histories.limit
    assert histories.take(ids[1]) is None  # the least recently kept went first
    assert histories.take(ids[0]) is not None and histories.take(ids[2]) is not None
    assert histories.weight == 0
    off = Histories(0)
    off.keep(ids[0], Transcript(None, [Entry(1, "user", "hi")]))
    assert len(off) == 0  # 0: nothing is kept
