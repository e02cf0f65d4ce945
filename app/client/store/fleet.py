"""The reads behind the operators' fleet (`fleet.FleetView`): each on an index or a catalog view,
none a scan of the log.

    what                       read from
    -------------------------  -------------------------------------------------------------
    live workers               pg_locks (the liveness tokens held) and pg_stat_activity (their
                               sessions' names); the runs each holds by `lease_token`
    queued runs, oldest wait   conversations running with no lease (`ix_conversations_queued`)
    outcomes, failures         turns of the last hour, of the last day (`ix_turns_created`),
                               the failures' errors read at most `MAX_FAILURES`
    spend today                turns since midnight UTC, summed per owner
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from sqlalchemy import Connection, func, select, text

from app.client.fleet import FleetView, WorkerView, error_class
from app.models import LIVENESS_APPLICATION, LIVENESS_NAMESPACE, RUNNING_STATUSES, UNHELD_SQL
from app.models.tables import conversations, turns
from app.vocabulary import TURN_FAILED

MAX_FAILURES = 10_000
MAX_OWNERS = 20

_HOLDERS = text(
    "SELECT l.objid::bigint AS token, a.application_name AS name, a.backend_start AS since"
    " FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid"
    " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2"
    " AND l.classid = CAST(CAST(:namespace AS bigint) AS oid) ORDER BY a.backend_start"
)


def read_fleet(connection: Connection, now: datetime) -> FleetView:
    c = conversations.c
    queued, oldest = connection.execute(
        select(func.count(), func.min(c.heartbeat_at)).where(text(UNHELD_SQL))
    ).one()
    running = connection.execute(
        select(func.count()).where(c.status.in_(RUNNING_STATUSES), c.lease_owner.is_not(None))
    ).scalar_one()
    hour = connection.execute(
        select(turns.c.status, func.count())
        .where(turns.c.created_at >= now - timedelta(hours=1))
        .group_by(turns.c.status)
    ).all()
    errors = connection.execute(
        select(turns.c.error)
        .where(turns.c.created_at >= now - timedelta(days=1), turns.c.status == TURN_FAILED)
        .limit(MAX_FAILURES)
    ).scalars()
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    spent = func.coalesce(func.sum(turns.c.cost_usd), 0)
    spend = connection.execute(
        select(c.owner, spent)
        .join(turns, turns.c.conversation_id == c.id)
        .where(turns.c.created_at >= midnight)
        .group_by(c.owner)
        .order_by(spent.desc())
        .limit(MAX_OWNERS)
    ).all()
    return FleetView(
        workers=_workers(connection, now),
        queued=int(queued),
        oldest_queued_s=None
        if oldest is None
        else max(0.0, (now - _aware(oldest)).total_seconds()),
        running=int(running),
        outcomes_last_hour={str(status): int(count) for status, count in hour},
        failures_last_day=Counter(error_class(error) for error in errors).most_common(),
        spend_today=[(owner or "-", Decimal(total)) for owner, total in spend],
    )


def _workers(connection: Connection, now: datetime) -> list[WorkerView]:
    """The live workers: PostgreSQL's liveness tokens (SQLite has none)."""
    if connection.dialect.name != "postgresql":
        return []
    holders = connection.execute(_HOLDERS, {"namespace": LIVENESS_NAMESPACE}).all()
    c = conversations.c
    flights = {
        token: (count, beat)
        for token, count, beat in connection.execute(
            select(c.lease_token, func.count(), func.max(c.heartbeat_at))
            .where(c.lease_token.in_([h.token for h in holders]), c.lease_owner.is_not(None))
            .group_by(c.lease_token)
        )
    }
    prefix = LIVENESS_APPLICATION + " "
    return [
        WorkerView(
            name=str(holder.name).removeprefix(prefix),
            token=int(holder.token),
            since=_aware(holder.since),
            in_flight=int(flights.get(holder.token, (0, None))[0]),
            last_heartbeat=_beat(flights.get(holder.token, (0, None))[1]),
        )
        for holder in holders
    ]


def _beat(moment: datetime | None) -> datetime | None:
    return None if moment is None else _aware(moment)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


__all__ = ["read_fleet"]
