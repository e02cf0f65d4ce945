"""An operator's bulk action: retry, or cancel, every run a filter selects, in two steps.

1. **The dry run** (`plan`): the filter, the action and the moment it was asked (`bound`: only
   turns created before it are ever selected, so the set cannot grow) make a confirmation token;
   with it, how many runs the filter selects now.
2. **The confirmed run** (`run`): the token's selection, acted on a batch at a time (at most
   `batch` runs per call, `RATE_PER_S` a second), each action and its audit entry committed
   together. What is left is selected again by the next call with the same token: a run already
   acted on is no longer selected (a cancelled turn is finished; a retried conversation's
   current turn is no longer the one that failed, whatever became of its retry: `current`; a retry
   refused as `NotRetryable` meanwhile is passed over), so a call cut off
   midway (the API process killed) leaves every run done or untouched, and calling again
   finishes the rest.

    action  selects                                   does to each
    ------  ----------------------------------------  -------------------------------------------
    retry   the filter's failed turns                 its conversation retried (once: the
                                                      turn that failed last in it)
    cancel  the filter's queued, running and waiting  the turn cancelled (its worker told)
            turns
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import uuid
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from app.client.audit import BULK_CANCEL, BULK_RETRY, AuditAction
from app.client.runs import RunFilter
from app.errors import InvalidRequest, NotRetryable
from app.vocabulary import QUEUED, REQUIRES_ACTION, RUNNING, TURN_FAILED

if TYPE_CHECKING:
    from app.client.asynchronous import AsyncChatClient

RETRY, CANCEL = "retry", "cancel"
ACTIONS = {RETRY: (TURN_FAILED,), CANCEL: (QUEUED, RUNNING, REQUIRES_ACTION)}
AUDITED = {RETRY: BULK_RETRY, CANCEL: BULK_CANCEL}
RATE_PER_S = 50  # actions a second at most: a bulk retry of thousands does not flood the queue
MAX_BATCH = 1000


@dataclass(frozen=True)
class BulkPlan:
    action: str
    wanted: RunFilter  # (its limit and cursor unused)
    bound: datetime  # only turns created before it

    @property
    def token(self) -> str:
        body = json.dumps(
            {"action": self.action, "bound": self.bound.isoformat(), "filter": _filter(self)},
            sort_keys=True,
            default=str,
        )
        check = hashlib.sha256(body.encode()).hexdigest()[:16]
        return base64.urlsafe_b64encode(f"{check}.{body}".encode()).decode().rstrip("=")

    def selecting(self, status: str) -> RunFilter:
        return replace(self.wanted, status=status, until=self.bound, limit=200, before=None)


@dataclass(frozen=True)
class BulkResult:
    action: str
    selected: int  # runs the token's selection holds now (before this call acted)
    done: int  # acted on by this call
    skipped: int  # selected, found done already (retried, or ended meanwhile)
    remaining: int  # left for the next call with the same token


def plan(action: str, wanted: RunFilter, bound: datetime) -> BulkPlan:
    if action not in ACTIONS:
        raise InvalidRequest(f"action must be {' or '.join(ACTIONS)}")
    if wanted.status is not None:
        raise InvalidRequest(
            f"a bulk {action} selects its own statuses ({', '.join(ACTIONS[action])}): give "
            "no status"
        )
    return BulkPlan(action, wanted, bound)


def parse_token(token: str) -> BulkPlan:
    """The plan a confirmation token stands for; `InvalidRequest` when it is not one."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        check, body = raw.split(".", 1)
        if hashlib.sha256(body.encode()).hexdigest()[:16] != check:
            raise ValueError("checksum")
        given = json.loads(body)
        fields = dict(given["filter"])
        for name in ("since", "until"):
            if fields.get(name) is not None:
                fields[name] = datetime.fromisoformat(fields[name])
        if fields.get("cost_above") is not None:
            fields["cost_above"] = Decimal(fields["cost_above"])
        return plan(given["action"], RunFilter(**fields), datetime.fromisoformat(given["bound"]))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise InvalidRequest("confirm is not a confirmation token of a dry run") from None


async def count(client: AsyncChatClient, bulk: BulkPlan) -> int:
    return len(await _selected(client, bulk))


async def run(client: AsyncChatClient, bulk: BulkPlan, operator: str, batch: int) -> BulkResult:
    """Act on at most `batch` of the token's selection (see the module's docstring)."""
    if not 1 <= batch <= MAX_BATCH:
        raise InvalidRequest(f"batch must be 1 to {MAX_BATCH}")
    selected = await _selected(client, bulk)
    done = skipped = 0
    for turn_id, conversation_id in selected[:batch]:
        audit = AuditAction(
            operator, AUDITED[bulk.action], str(turn_id), {"token": bulk.token[:16]}
        )
        if bulk.action == RETRY:
            try:
                await client.retry_conversation(conversation_id, audit=audit)
            except NotRetryable:  # (retried already: by an earlier call, or by its owner)
                skipped += 1
                continue
        else:
            turn = await client.cancel_turn(turn_id, audit=audit)
            if turn.is_finished and turn.status != "cancelled":
                skipped += 1
                continue
        done += 1
        await asyncio.sleep(1 / RATE_PER_S)
    remaining = len(selected) - min(batch, len(selected))
    return BulkResult(bulk.action, len(selected), done, skipped, remaining)


async def _selected(client: AsyncChatClient, bulk: BulkPlan) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """Every run the plan selects now: (turn, conversation), newest first; for a retry, only
    the failed turns that are still their conversation's current one (each conversation once:
    a retried one has moved on to its retry)."""
    found: list[tuple[uuid.UUID, uuid.UUID]] = []
    for status in ACTIONS[bulk.action]:
        wanted = bulk.selecting(status)
        while True:
            page = await client.admin.list_runs(wanted)
            found += [
                (run.turn_id, run.conversation_id)
                for run in page
                if bulk.action != RETRY or run.current
            ]
            if len(page) < wanted.limit:
                break
            wanted = replace(wanted, before=page[-1].turn_id)
    return found


def _filter(bulk: BulkPlan) -> dict[str, Any]:
    fields = asdict(bulk.wanted)
    for name in ("status", "limit", "before"):
        fields.pop(name)
    return fields


__all__ = ["ACTIONS", "BulkPlan", "BulkResult", "count", "parse_token", "plan", "run"]
