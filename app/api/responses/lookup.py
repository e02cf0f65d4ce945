"""A response found from its id (404 `response_not_found` in OpenAI's shape when it is not the
caller's, or not there), the tools' servers its items name, and the wait for it to rest."""

from __future__ import annotations

import time

from app.api.auth import Caller
from app.api.responses.errors import ResponseNotFound, Unsupported
from app.api.responses.ids import ResponseId
from app.api.responses.objects import response_count
from app.api.state import ApiState
from app.client import TurnRecord
from app.errors import TurnNotFound
from app.models import REQUIRES_ACTION

#: A wait for a response re-reads its turn at least this often.
WAIT_ROUND_SECONDS = 2.0


def parse(response_id: str) -> ResponseId:
    try:
        return ResponseId.parse(response_id)
    except Unsupported:
        raise ResponseNotFound(f"no response {response_id!r}") from None


def record_of(api: ApiState, caller: Caller, response: ResponseId) -> TurnRecord:
    try:
        record = api.client.turn_record(response.turn_id, owner=caller.owner)
    except TurnNotFound:
        raise ResponseNotFound(f"no response {response}") from None
    if response.segment >= response_count(record):
        raise ResponseNotFound(f"no response {response}")
    return record


def is_last(record: TurnRecord, response: ResponseId) -> bool:
    return response.segment == response_count(record) - 1


def servers_of(api: ApiState) -> dict[str, str]:
    """Each tool's MCP server, from the catalogue the workers publish."""
    return {tool.name: tool.server for tool in api.client.admin.list_tools()}


def wait(api: ApiState, caller: Caller, response: ResponseId) -> TurnRecord:
    """The response's turn once it rests (ends, or pauses), at most the server's wait: each
    round a long poll on the log after the turn's last event (an earlier pause of the same
    turn is behind it), then the turn read again."""
    deadline = time.monotonic() + api.settings.api_max_wait_seconds
    while True:
        record = api.client.turn_record(response.turn_id, owner=caller.owner)
        remaining = deadline - time.monotonic()
        if rests(record) or remaining <= 0:
            return record
        api.client.wait_for_events(
            record.conversation.id,
            record.events[-1].seq if record.events else 0,
            limit=1,
            wait=min(remaining, WAIT_ROUND_SECONDS),
            log_interval=max(WAIT_ROUND_SECONDS, api.settings.api_log_poll_seconds),
            owner=caller.owner,
        )


def rests(record: TurnRecord) -> bool:
    """Ended, or waiting for the user (a wait that was answered turns it back to running)."""
    return record.turn.is_finished or record.turn.status == REQUIRES_ACTION
