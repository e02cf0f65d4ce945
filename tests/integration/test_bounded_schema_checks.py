"""No answer can stop a worker: a structured answer built to make its schema's check explode (a
backtracking `pattern`, `uniqueItems` over thousands of objects, `$ref`s that fan out) fails its
turn with a clear error, and a plain turn of another conversation on the same worker process
completes while it is judged: the check never holds the worker's event loop.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.testing.fake_llm import FakeLLMServer
from tests.deployment import Deployment

BACKTRACKS = {
    "name": "word",
    "schema": {
        "type": "object",
        "properties": {"word": {"type": "string", "pattern": "^(a+)+$"}},
        "required": ["word"],
    },
}
UNIQUE = {
    "name": "rows",
    "schema": {
        "type": "object",
        "properties": {"rows": {"type": "array", "uniqueItems": True}},
        "required": ["rows"],
    },
}
# 2^40 ways down to one leaf: bounded keywords, a multiplied whole (only a deadline stops it)
LEVELS = 40
FANS_OUT = {
    "name": "fan",
    "schema": {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/d0"}},
        "$defs": {
            **{
                f"d{n}": {"anyOf": [{"$ref": f"#/$defs/d{n + 1}"}, {"$ref": f"#/$defs/d{n + 1}"}]}
                for n in range(LEVELS)
            },
            f"d{LEVELS}": {"type": "string", "minLength": 5},
        },
    },
}
ROWS = [{"id": n, "name": f"row {n}"} for n in range(6000)]
BOUND_SECONDS = 5  # a turn whose answer cannot match, or cannot be checked, has failed by then


@pytest.fixture
def deployment(
    database_url: str, redis_url: str, tmp_path: Path, fake_llm: FakeLLMServer
) -> Iterator[Deployment]:
    deployment = Deployment(database_url, redis_url, tmp_path, fake_llm)
    yield deployment
    deployment.close()


def judged_beside_a_plain_turn(
    deployment: Deployment, schema: dict[str, Any], answer: Any, **env: str
) -> str:
    """Start one worker; a structured turn whose model answers `answer` (every time), and a
    plain turn whose answer arrives while the first is judged. The plain turn completes; the
    structured one's error is returned."""
    deployment.llm.script([], match="Fill the form", default={"text": json.dumps(answer)})
    deployment.llm.script([], match="Say hello", default={"text": "Hello.", "delay": 1})
    worker = deployment.start_worker(extra_env=env)
    structured = deployment.client.create_conversation(output_schema=schema)
    plain = deployment.chat("Say hello")
    turn = deployment.client.submit_message(structured, "Fill the form").turn_id

    said_hello = deployment.wait(plain, timeout=30)
    assert said_hello.status == "idle", f"{said_hello.error}\n{worker.log()}"
    assert said_hello.messages[-1].content == "Hello."
    failed = deployment.wait(structured, timeout=60)
    assert failed.status == "failed" and failed.error is not None, worker.log()
    assert worker.wait_exit(timeout=0) is None  # (the worker lives on)
    # The turn ends within 5 s of its start (the database's clock: its two model calls and
    # judgements, the repair included), never a lease or a spinning check later.
    ended = deployment.client.get_turn(turn)
    assert ended.started_at is not None and ended.finished_at is not None
    assert (ended.finished_at - ended.started_at).total_seconds() <= BOUND_SECONDS
    return failed.error


def test_a_backtracking_pattern_fails_its_turn_and_the_worker_goes_on(
    deployment: Deployment,
) -> None:
    error = judged_beside_a_plain_turn(deployment, BACKTRACKS, {"word": "a" * 40 + "!"})

    assert error.startswith("The model's answer did not match the output schema after 1")
    assert "does not match '^(a+)+$'" in error


def test_unique_items_over_thousands_of_objects_fails_its_turn_and_the_worker_goes_on(
    deployment: Deployment,
) -> None:
    error = judged_beside_a_plain_turn(deployment, UNIQUE, {"rows": [*ROWS, ROWS[0]]})

    assert error.startswith("The model's answer did not match the output schema after 1")
    assert "has non-unique elements" in error


def test_a_schema_too_costly_to_check_fails_its_turn_at_the_deadline(
    deployment: Deployment,
) -> None:
    error = judged_beside_a_plain_turn(
        deployment, FANS_OUT, {"a": "x"}, CHATWORKER_SCHEMA_CHECK_SECONDS="1"
    )

    assert error == (
        "The model's answer could not be checked against the output schema: the check took "
        "longer than 1 s (the schema makes it too costly)"
    )
    assert len(deployment.llm.requests(match="Fill the form")) == 1  # (no repair: it fails)


def test_an_answer_that_matches_a_bounded_schema_completes(deployment: Deployment) -> None:
    both = {
        "name": "both",
        "schema": {
            "type": "object",
            "properties": {
                "rows": {"type": "array", "uniqueItems": True},
                "word": {"type": "string", "pattern": "^(a+)+$"},
            },
        },
    }
    deployment.llm.script([], default={"text": json.dumps({"rows": ROWS, "word": "aaa"})})
    deployment.start_worker()
    conversation_id = deployment.client.create_conversation(output_schema=both)
    deployment.client.submit_message(conversation_id, "Fill the form")

    view = deployment.wait(conversation_id, timeout=60)
    assert view.status == "idle", view.error
    assert view.messages[-1].output == {"rows": ROWS, "word": "aaa"}
