"""An API process's quiet streams read the log as a safety net (a commit notice lost): each every
`CHATWORKER_API_LOG_POLL_SECONDS`, stretched so that together they read it at most 100 times a
second, however many streams the process serves."""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any

from app.api.state import SAFETY_READS_PER_SECOND, ApiState
from app.client.following import Following
from app.client.merge import Cursor
from app.client.views import EventPage
from app.config import load_settings


def test_the_safety_read_interval_grows_with_the_streams_past_a_hundred_reads_a_second() -> None:
    settings = load_settings(
        api_log_poll_seconds=10, api_max_streams=20_000, api_max_streams_per_owner=20_000
    )
    api = ApiState(settings, client=Any, owns_client=False)  # type: ignore[arg-type]
    try:
        assert api.safety_read_interval(5.0) == 10.0  # the setting, over the floor
        for _ in range(999):
            api.open_stream(None)
        assert api.safety_read_interval(5.0) == 10.0  # 999 streams / 10 s: under 100 reads/s
        for _ in range(10_000 - 999):
            api.open_stream(None)
        interval = api.safety_read_interval(5.0)
        assert interval == 100.0  # 10,000 streams: each every 100 s
        assert api.streams / interval <= SAFETY_READS_PER_SECOND
    finally:
        api.close()


def test_a_follower_asks_its_interval_at_each_read_so_the_early_streams_stretch_too() -> None:
    """A stream opened when the process had few keeps asking: with 10,000 open later, its
    next safety read is 100 s away, not the 10 s it got at its opening."""

    class Reader:
        def events(self, conversation_id: Any, after: int = 0, limit: int = 100) -> EventPage:
            return EventPage(conversation_id, [], 0, "idle", 0)

    intervals = iter([10.0, 100.0])
    asked: list[float] = []

    def interval() -> float:
        asked.append(next(intervals))
        return asked[-1]

    following = Following(
        Reader(),  # type: ignore[arg-type]
        uuid.uuid4(),
        Cursor.parse(0),
        until=None,
        poll_interval=1.0,
        log_interval=interval,
    )
    for expected in (10.0, 100.0):
        steps = following._read_log()
        page = next(steps)
        with contextlib.suppress(StopIteration):  # (the read is done: the generator ends)
            steps.send(Reader().events(following.conversation_id, page.after))
        assert asked[-1] == expected
        wait = following._next_log - time.monotonic()
        assert 0.8 * expected - 1 <= wait <= 1.2 * expected  # (jittered by +-20 %)
