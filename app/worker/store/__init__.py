"""All SQL of the worker, by concept: a turn's store (`TurnStore`, `lifecycle`: the claim
(`claiming`), the fenced writes of its steps (`steps`), its other reads (`turn_reads`), the values
they exchange (`records`)), the fenced statements it runs (`fence`), the driver that runs them
(`driver`: psycopg's fast path or SQLAlchemy Core, chosen once), the session tool cache's reads
(`outputs`), webhook deliveries (`DeliveryStore`), a worker process's liveness token
(`liveness`), a database outage's errors and the claims it interrupted (`outage`), the queued
turns whose doorbell may be lost (`doorbells`), and housekeeping (`Upkeep`: orphans, dead leases,
the janitor, retention, the tool catalogue)."""

from app.worker.store.clock import Clock, utc_now
from app.worker.store.deliveries import DeliveryStore, DueDelivery
from app.worker.store.driver import DEFERRED_CLAIM, Deferred
from app.worker.store.lifecycle import TurnStore
from app.worker.store.liveness import LivenessToken
from app.worker.store.outputs import ListedOutput, OutputPage
from app.worker.store.records import (
    Claim,
    Committed,
    CompactionRecord,
    KeptOutput,
    LeaseLost,
    Snapshot,
    Steering,
)
from app.worker.store.upkeep import Pruned, StaleConversation, Upkeep

__all__ = [
    "DEFERRED_CLAIM",
    "Claim",
    "Clock",
    "Committed",
    "CompactionRecord",
    "Deferred",
    "DeliveryStore",
    "DueDelivery",
    "KeptOutput",
    "LeaseLost",
    "ListedOutput",
    "LivenessToken",
    "OutputPage",
    "Pruned",
    "Snapshot",
    "StaleConversation",
    "Steering",
    "TurnStore",
    "Upkeep",
    "utc_now",
]
