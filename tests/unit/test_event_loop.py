"""The worker's event loop (`app/worker/event_loop.py`): uvloop's unless asked otherwise, asyncio's
own when asked or where uvloop is missing (said in the log)."""

from __future__ import annotations

import asyncio
import logging

import pytest
import uvloop

from app.config import load_settings
from app.errors import ConfigError
from app.worker import event_loop


def test_the_default_is_uvloop_and_asyncio_is_one_setting_away() -> None:
    assert load_settings().event_loop == "uvloop"
    assert load_settings(event_loop="asyncio").event_loop == "asyncio"
    loop = event_loop.new_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
    loop = event_loop.new_event_loop("asyncio")
    try:
        assert not isinstance(loop, uvloop.Loop)
        assert isinstance(loop, asyncio.AbstractEventLoop)
    finally:
        loop.close()


def test_an_unknown_loop_is_refused_naming_the_variable_and_the_choices() -> None:
    with pytest.raises(ConfigError, match="CHATWORKER_EVENT_LOOP: Input should be 'uvloop' or"):
        load_settings(event_loop="trio")


def test_without_uvloop_the_worker_runs_on_asyncio_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(event_loop, "uvloop_available", lambda: False)
    with caplog.at_level(logging.WARNING, logger="app.worker.event_loop"):
        loop = event_loop.new_event_loop("uvloop")
    try:
        assert not isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
    assert "uvloop is not installed" in caplog.text


def test_run_runs_a_coroutine_on_the_loop_asked_for() -> None:
    async def kind() -> bool:
        return isinstance(asyncio.get_running_loop(), uvloop.Loop)

    assert event_loop.run(kind()) is True
    assert event_loop.run(kind(), "asyncio") is False
