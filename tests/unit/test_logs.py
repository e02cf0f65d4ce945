"""The one logging setup (`app.telemetry.logs`): JSON lines with the turn's ids, uvicorn's
configuration in the same format, and a library's own handlers folded into the root's."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import logging.config
from collections.abc import Iterator

import pytest

from app.telemetry import logs


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    logs.configure(logs.JSON, logging.DEBUG, stream=stream)
    yield stream
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_json_line_holds_the_record_and_nothing_empty(captured: io.StringIO) -> None:
    logging.getLogger("app.probe").warning("hello %s", "world")
    (line,) = lines(captured)
    assert {k: line[k] for k in ("level", "logger", "message")} == {
        "level": "WARNING",
        "logger": "app.probe",
        "message": "hello world",
    }
    assert str(line["time"]).endswith("+00:00") and "conversation_id" not in line


def test_every_line_of_a_turn_names_it_in_its_tasks_too(captured: io.StringIO) -> None:
    log = logging.getLogger("app.probe")

    async def child() -> None:
        log.info("in a task it started")

    async def turn() -> None:
        with logs.turn_fields("conv-1", "worker-9"):
            log.info("claimed")
            logs.note_turn("turn-3")
            await asyncio.create_task(child())
            try:
                raise RuntimeError("boom")
            except RuntimeError:
                log.exception("failed")
        log.info("after")

    asyncio.run(turn())
    claimed, in_task, failed, after = [x for x in lines(captured) if x["logger"] == "app.probe"]
    assert (claimed["conversation_id"], claimed["worker_id"]) == ("conv-1", "worker-9")
    assert "turn_id" not in claimed
    assert in_task["turn_id"] == failed["turn_id"] == "turn-3"
    assert "RuntimeError: boom" in str(failed["exc_info"])
    assert "conversation_id" not in after


def test_uvicorn_s_configuration_writes_the_same_json_lines() -> None:
    root = logging.getLogger()
    saved = list(root.handlers)
    try:
        logging.config.dictConfig(logs.uvicorn_options(logs.JSON, "info")["log_config"])
        (handler,) = root.handlers
        assert isinstance(handler.formatter, logs.JsonLines)
        record = logging.LogRecord("uvicorn.error", logging.INFO, __file__, 1, "Started", (), None)
        assert json.loads(handler.format(record))["logger"] == "uvicorn.error"
    finally:
        root.handlers[:] = saved
    assert logs.uvicorn_options(logs.TEXT, "info") == {}


def test_a_library_s_own_handlers_write_through_the_root_in_json(captured: io.StringIO) -> None:
    own = io.StringIO()
    with logs.unified("probe.library"):
        library = logging.getLogger("probe.library")
        library.addHandler(logging.StreamHandler(own))  # as litellm does when imported
        library.propagate = False
        library.warning("while importing")  # dropped: it would be in the library's format
    library.warning("later")
    assert own.getvalue() == ""
    assert [line["message"] for line in lines(captured)] == ["later"]
