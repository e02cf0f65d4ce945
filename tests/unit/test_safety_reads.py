"""An API process's quiet streams read the log as a safety net (a commit notice lost): each every
`CHATWORKER_API_LOG_POLL_SECONDS`, stretched so that together they read it at most 100 times a
second, however many streams the process serves."""

from __future__ import annotations

from typing import Any

from app.api.state import SAFETY_READS_PER_SECOND, ApiState
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
