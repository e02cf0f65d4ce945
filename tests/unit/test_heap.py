"""`app/api/heap.py`: what start-up made is frozen out of the collector's sight, what comes
after is still collected; the server's app is built that way, under a `Handoff`."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from app.api import heap


@pytest.fixture
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
def test_settle_freezes_what_is_there_and_later_garbage_is_still_collected() -> None:
    heap.settle()
    assert gc.get_freeze_count() > 1000  # (this test process's modules, at least)

    class Cycle:
        def __init__(self) -> None:
            self.me = self

    Cycle()  # garbage made after the freeze: a cycle only a collection frees
    assert gc.collect() > 0
