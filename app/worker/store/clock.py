"""The store's clock: UTC, from this machine, replaceable in tests (a dead worker's old clock)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


__all__ = ["Clock", "utc_now"]
