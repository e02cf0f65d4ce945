"""A worker process's liveness token, and the SQL that asks whether a lease's holder still lives.

Each worker process holds one PostgreSQL session advisory lock, `(NAMESPACE, token)`, on a
connection of its own for as long as it lives; every claim records that token on the lease
(`conversations.lease_token`). The database drops a session's locks the moment its process is
gone (a SIGKILL, an OOM kill, a crash: the socket closes and the backend exits, ~6 ms here), so a
lease whose token is no longer held in `pg_locks` belongs to a dead process and is free at once:
the claim takes it (`TOKEN_GONE` in its WHERE) and the host's sweep finds it within a second
(`DEAD_LEASES`) instead of waiting out the lease's TTL.

What the token cannot see, the TTL still covers, as before: a host frozen but alive (SIGSTOP, a
paused VM) keeps its session and so its token; a network partition leaves the server's backend
waiting for TCP to give up. A lease without a token (NULL) is never judged by it: SQLite, the
token turned off (`CHATWORKER_LIVENESS_TOKEN=false`), or a connection that turned out to hop
between server sessions (a pooler in transaction mode: its statements report another backend
pid, or the lock vanished from under it), after which this process takes no token again.

A process whose token's connection broke (a database restart, a terminated backend) takes a new
token and moves to it the leases of the runs still alive in it, by conversation and epoch; a
lease whose run stopped meanwhile (the database went away under it) keeps the token that is gone,
so it is free at once, like a dead process's. After a restart every token is gone at once, so a
missing one counts only once the server has been up `RESTART_GRACE_S`: long enough for each live
worker to take its token again, move its live runs' leases and give back its stopped runs' claims
(`outage.py`) before any other worker judges them.

Judging a holder dead is never what stops it writing: the fence (`lease_epoch`) is. A process
that only lost its token's connection and goes on running finds its lease taken over and
commits nothing, exactly like a worker whose lease expired.
"""

from __future__ import annotations

import enum
import logging
import secrets
import uuid
from collections.abc import Callable, Collection
from typing import Any

from sqlalchemy import (
    Boolean,
    Connection,
    Engine,
    Integer,
    and_,
    bindparam,
    literal,
    select,
    tuple_,
    update,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from app.models import LIVENESS_APPLICATION, LIVENESS_NAMESPACE, RUNNING_STATUSES
from app.models.tables import conversations

log = logging.getLogger(__name__)

c = conversations.c

#: The first key of every token's lock ("chwh"); the second is the token, a positive int4.
NAMESPACE = LIVENESS_NAMESPACE
#: A server that just started holds no token until the live workers take theirs again (each
#: within a round, a second): before this many seconds of its uptime a missing token proves
#: nothing, and another worker's sweep would take a live run's lease, or the claim of a run the
#: restart stopped before its own worker gives it back (counting the turn an attempt).
RESTART_GRACE_S = 3
_TOKENS = 2**31 - 1  # tokens are 1 .. 2**31 - 1 (an oid compares with them unsigned)


class _not_held(FunctionElement[bool]):  # noqa: N801 (a SQL expression's name)
    """True when no session of this database holds the token's lock (`pg_locks`); never true
    off PostgreSQL, where no token is taken."""

    type = Boolean()
    inherit_cache = True


@compiles(_not_held, "postgresql")
def _not_in_pg_locks(element: _not_held, compiler: Any, **kw: Any) -> str:
    token = compiler.process(element.clauses, **kw)
    return (
        "(NOT EXISTS (SELECT 1 FROM pg_catalog.pg_locks AS held"
        " WHERE held.locktype = 'advisory' AND held.granted AND held.objsubid = 2"
        f" AND held.classid = {NAMESPACE}::oid AND held.objid = ({token})::oid"
        " AND held.database = (SELECT oid FROM pg_catalog.pg_database"
        " WHERE datname = current_database()))"
        " AND pg_catalog.pg_postmaster_start_time()"
        f" < pg_catalog.now() - interval '{RESTART_GRACE_S} seconds')"
    )


@compiles(_not_held)
def _never(element: _not_held, compiler: Any, **kw: Any) -> str:
    return "0 = 1"


#: The lease's holder took a token and the database no longer shows it held: the holder is dead.
TOKEN_GONE = and_(c.lease_token.is_not(None), _not_held(c.lease_token))

#: Running conversations whose lease holder is dead by its token (the sweep re-rings them).
DEAD_LEASES = (
    select(c.id, c.attempts)
    .where(
        c.status.in_([literal(status) for status in RUNNING_STATUSES]),
        c.lease_owner.is_not(None),
        TOKEN_GONE,
    )
    .limit(bindparam("limit", type_=Integer))
)

# One round trip each, on the token's own connection (autocommit: never idle in a transaction).
# Its session is named after the process's lease owner name (`LIVENESS_APPLICATION` and the
# name, 63 characters at most): the operators' fleet reads who holds which token.
_TAKE = (
    "SELECT pg_try_advisory_lock(%(namespace)s, %(token)s), pg_backend_pid(),"
    " set_config('application_name', %(name)s, false)"
)
_CHECK = (
    "SELECT pg_backend_pid(), EXISTS (SELECT 1 FROM pg_catalog.pg_locks"
    " WHERE pid = pg_backend_pid() AND locktype = 'advisory' AND granted AND objsubid = 2"
    " AND classid = %(namespace)s::bigint::oid AND objid = %(token)s::bigint::oid)"
)


# The leases of this process's live runs move to the token it holds now (None: to their TTL).
# Only theirs, by conversation and epoch: a lease of a run that stopped here (the database went
# away under it) keeps the token that is gone, so every worker's sweep sees it free; and a lease
# another worker took meanwhile is not this owner's.
_REMARK = (
    update(conversations)
    .where(
        c.lease_owner == bindparam("lease_holder"),
        tuple_(c.id, c.lease_epoch).in_(bindparam("alive", expanding=True)),
        c.lease_token.is_distinct_from(bindparam("held_token", type_=Integer)),
    )
    .values(lease_token=bindparam("held_token", type_=Integer))
)

#: A live run of this process: its conversation and its lease's epoch.
Alive = tuple[uuid.UUID, int]


class Check(enum.Enum):
    HELD = "held"  # the token's session still holds it
    LOST = "lost"  # its connection broke or the lock is gone: take another
    MOVED = "moved"  # its statements ran on another server session: a pooler; no token again
    OFF = "off"  # no token (SQLite, turned off, or given up)


class LivenessToken:
    """The token one worker process holds while it lives (`take`, then `keep` every second).
    Not thread-safe: the host calls it from one chore at a time."""

    def __init__(
        self,
        engine: Engine,
        *,
        enabled: bool = True,
        draw: Callable[[], int] = lambda: 1 + secrets.randbelow(_TOKENS),
        owner: str = "",
    ) -> None:
        self.engine = engine
        self.name = f"{LIVENESS_APPLICATION} {owner}".strip()[:63]
        self.enabled = enabled and engine.dialect.name == "postgresql"
        self.draw = draw
        self.token: int | None = None  # what a claim records now (None: the TTL alone)
        self._connection: Any = None  # a psycopg connection, autocommit
        self._pid: int | None = None

    def take(self) -> int | None:
        """Open a connection of its own (detached from the pool: nobody else ever runs on it)
        and take a token no live session holds. None when the token is off."""
        if not self.enabled:
            return None
        self.close()
        pooled = self.engine.raw_connection()
        connection: Any = pooled.driver_connection  # (psycopg's own connection)
        pooled.detach()
        try:
            connection.autocommit = True
            for _ in range(64):
                token = self.draw()
                taken, pid, _name = connection.execute(
                    _TAKE, {"namespace": NAMESPACE, "token": token, "name": self.name}
                ).fetchone()
                if taken:
                    self.token, self._pid, self._connection = token, int(pid), connection
                    return token
        except BaseException:
            connection.close()
            raise
        connection.close()
        raise RuntimeError("no free liveness token after 64 draws")

    def check(self) -> Check:
        """Whether the token is still held by the session that took it (one round trip)."""
        if not self.enabled:
            return Check.OFF
        if self._connection is None or self.token is None:
            return Check.LOST  # (a take that failed: take again)
        try:
            pid, held = self._connection.execute(
                _CHECK, {"namespace": NAMESPACE, "token": self.token}
            ).fetchone()
        except Exception as exc:  # the connection broke (a restart, a terminated backend)
            log.warning("liveness token %s lost with its connection: %s", self.token, exc)
            return Check.LOST
        if int(pid) != self._pid:
            return Check.MOVED
        return Check.HELD if held else Check.LOST

    def keep(self, owner: str, alive: Collection[Alive]) -> Check:
        """Check the token and mend what the check found: a lost token is taken again (the
        leases of this process's `alive` runs move to the new one), a moved connection gives the
        token up for good (their leases fall back to their TTL). Returns what the check found."""
        found = self.check()
        if found in (Check.HELD, Check.OFF):
            return found
        if found is Check.MOVED:
            log.warning(
                "the liveness token's connection ran on another server session (a pooler in"
                " transaction mode?): no token from now on, a dead worker's leases wait out"
                " their TTL (CHATWORKER_LIVENESS_TOKEN=false says so up front)"
            )
            self.enabled = False
            self.close()
        else:
            self.take()  # (if the database is down too, this raises: the next round tries again)
        if alive:
            with self.engine.begin() as connection:
                connection.execute(
                    _REMARK,
                    {"lease_holder": owner, "alive": list(alive), "held_token": self.token},
                )
        return found

    def close(self) -> None:
        """Give the token up (the session ends: its lock goes with it)."""
        connection, self._connection, self.token, self._pid = self._connection, None, None, None
        if connection is not None:
            try:
                connection.close()
            except Exception:  # already broken
                log.debug("closing the liveness connection failed", exc_info=True)


def dead_leases(connection: Connection, limit: int) -> list[tuple[Any, int]]:
    """Running conversations whose holder's token is gone, with their attempts."""
    rows = connection.execute(DEAD_LEASES, {"limit": limit}).all()
    return [(row.id, row.attempts) for row in rows]


__all__ = [
    "DEAD_LEASES",
    "NAMESPACE",
    "RESTART_GRACE_S",
    "TOKEN_GONE",
    "Alive",
    "Check",
    "LivenessToken",
    "dead_leases",
]
