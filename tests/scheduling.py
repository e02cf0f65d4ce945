"""The order the test processes get the suite's work in (`--dist loadgroup`): the slowest units
first, each to the first process that is free.

A unit is a group (`xdist_group`: one deployment shared by a module's tests) or a single test.
xdist hands out the groups with the most tests first, whatever they cost, then the rest as
collected, and gives a process its next unit while it still has two tests to run: two long units
could queue on one process while another runs dry at the end. Here the collection puts the known
slowest modules first (`SLOW_FIRST`, slowest first), then the modules with a test marked `slow`,
then the rest as collected (the many short unit tests last, to fill the end); and a process that
runs a unit of `SLOW_FIRST` is given no other long unit to queue behind it, only the shortest.
"""

from __future__ import annotations

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadGroupScheduling
from xdist.workermanage import WorkerController

# Modules whose units take from ~20 s to a few minutes each (on a loaded 2-core machine).
SLOW_FIRST = (
    "tests/integration/test_bench.py",  # 5 runs of the benchmark, 80-300 s each
    "tests/api/test_schemathesis.py",  # one group, 60-150 s
    "tests/api/test_ai_sdk.py",  # the API modules' groups: 40-100 s each
    "tests/api/test_responses.py",
    "tests/api/test_routes.py",
    "tests/api/test_request_bodies.py",
    "tests/api/test_bad_inputs.py",
    "tests/api/test_browser.py",
    "tests/api/test_owner_streams.py",
    "tests/api/test_hardening.py",
    "tests/api/test_owners.py",
    "tests/integration/test_invariant_tampering.py",  # one group, 20-35 s
    "tests/crash/test_crash_matrix.py",  # 20 tests of 10-20 s each
)


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def slowest_first(items: list[pytest.Item]) -> None:
    """Sort the collection in place; stable and by module, so a module's tests stay together and
    in their order."""
    slow = {module_of(item.nodeid) for item in items if item.get_closest_marker("slow")}
    ranks = {name: rank for rank, name in enumerate(SLOW_FIRST)}
    after = len(ranks)
    items.sort(
        key=lambda item: ranks.get(
            module_of(item.nodeid), after + (module_of(item.nodeid) not in slow)
        )
    )


class SlowestFirst(LoadGroupScheduling):
    """`--dist loadgroup`, the units in collection order (see the module's docstring)."""

    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False

    def _reschedule(self, node: WorkerController) -> None:
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        pending = [
            nodeid
            for unit in self.assigned_work[node].values()
            for nodeid, done in unit.items()
            if not done
        ]
        if len(pending) > 2:
            return
        if not any(module_of(nodeid) in SLOW_FIRST for nodeid in pending):
            self._assign(node, self.workqueue.popitem(last=False))
        elif len(pending) == 1:
            # A process runs its last test only once it knows the next one (or that there is
            # none): behind a slow one goes the shortest unit, the last of the queue.
            self._assign(node, self.workqueue.popitem(last=True))

    def _assign(self, node: WorkerController, unit: tuple[str, dict[str, bool]]) -> None:
        scope, work_unit = unit
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        collection = self.registered_collections[node]
        node.send_runtest_some([collection.index(nodeid) for nodeid in work_unit])
