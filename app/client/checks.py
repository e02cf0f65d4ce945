"""Validation of what a web app passes in, before anything touches the database.

Pure functions: each bad input raises an `InvalidRequest` subclass whose message names the problem.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import urlsplit

from app.client.admission import BUSY_POLICIES
from app.client.views import Decision
from app.egress import Network, literal_address, refusal
from app.errors import (
    ConversationNotFound,
    FileNotFound,
    InvalidCursor,
    InvalidMessage,
    InvalidRequest,
    MessageTooLarge,
    TurnNotFound,
    WebhookNotFound,
)
from app.models import (
    MAX_IDEMPOTENCY_KEY_CHARS,
    PERIODS,
    WEBHOOK_EVENT_TYPES,
)
from app.models.webhook import MAX_URL_CHARS

MAX_MODEL_CHARS = 200
MAX_PAGE = 1000
MAX_DESCRIPTION_CHARS = 500  # a webhook's
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what every provider accepts as a name


def parse_conversation_id(value: uuid.UUID | str) -> uuid.UUID:
    """The id as a UUID; a malformed one is reported as not found, like an unknown one."""
    return _parse_id(value, ConversationNotFound, "conversation")


def parse_turn_id(value: uuid.UUID | str) -> uuid.UUID:
    """The id as a UUID; a malformed one is reported as not found, like an unknown one."""
    return _parse_id(value, TurnNotFound, "turn")


def parse_file_id(value: uuid.UUID | str) -> uuid.UUID:
    """The id as a UUID; a malformed one is reported as not found, like an unknown one."""
    return _parse_id(value, FileNotFound, "file")


def parse_webhook_id(value: uuid.UUID | str) -> uuid.UUID:
    """The id as a UUID; a malformed one is reported as not found, like an unknown one."""
    return _parse_id(value, WebhookNotFound, "webhook")


def _parse_id(value: uuid.UUID | str, not_found: type[InvalidRequest], noun: str) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise not_found(f"no {noun} {value!r} (not a valid id)") from None


def check_model(model: Any) -> str:
    """The model string, stripped."""
    if not isinstance(model, str) or not model.strip() or len(model) > MAX_MODEL_CHARS:
        raise InvalidRequest(f"model must be a non-empty string of at most {MAX_MODEL_CHARS}")
    if not model.isprintable() or not _is_unicode(model):
        raise InvalidRequest("model must be printable text (no control character, no surrogate)")
    return model.strip()


def check_text(text: Any, what: str, limit: int, *, allow_empty: bool = False) -> None:
    """A storable string of at most `limit` characters (`what` names it in the message)."""
    if not isinstance(text, str):
        raise InvalidMessage(f"{what} must be a string, not {type(text).__name__}")
    if not allow_empty and not text.strip():
        raise InvalidMessage(f"{what} is empty")
    if len(text) > limit:
        raise MessageTooLarge(f"{what} is {len(text)} characters; the limit is {limit}")
    if "\x00" in text:
        raise InvalidMessage(f"{what} contains a NUL character, which cannot be stored")
    if not _is_unicode(text):
        raise InvalidMessage(f"{what} is not valid Unicode (a lone surrogate), cannot be stored")


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_storable_json(value: Any, what: str) -> None:
    """JSON that every database stores: serializable, and no string in it (key or value) holds
    a NUL character or a lone surrogate (PostgreSQL's JSONB refuses both)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(
            f"{what} must be JSON-serializable (no NaN or Infinity either): {exc}"
        ) from None
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, str) and ("\x00" in item or not _is_unicode(item)):
            raise InvalidRequest(
                f"{what} holds a string with a NUL character or a lone surrogate, which "
                "cannot be stored"
            )


def check_idempotency_key(key: Any) -> str | None:
    """None, or 1 to 200 printable characters."""
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > MAX_IDEMPOTENCY_KEY_CHARS:
        raise InvalidRequest(
            f"idempotency_key must be a string of 1 to {MAX_IDEMPOTENCY_KEY_CHARS} characters"
        )
    if not key.isprintable():
        raise InvalidRequest("idempotency_key must be printable (no control characters)")
    return key


MAX_METADATA_KEYS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512


#: What a dialect keeps with a turn to show back (`submit_message`'s `echo`), serialized.
MAX_ECHO_BYTES = 2048


def check_echo(echo: Any) -> dict[str, Any] | None:
    """None, or a JSON object of at most `MAX_ECHO_BYTES` (a dialect's own few fields)."""
    if echo is None or echo == {}:
        return None
    if not isinstance(echo, Mapping):
        raise InvalidRequest("echo must be an object")
    check_storable_json(dict(echo), "echo")
    if len(json.dumps(dict(echo)).encode()) > MAX_ECHO_BYTES:
        raise InvalidRequest(f"echo holds more than {MAX_ECHO_BYTES} bytes of JSON")
    return dict(echo)


def check_metadata(metadata: Any) -> dict[str, str] | None:
    """None, or at most 16 pairs of strings: keys of 1 to 64 characters, values of up to 512
    (OpenAI's limits), printable and without NUL."""
    if metadata is None or metadata == {}:
        return None
    if not isinstance(metadata, Mapping):
        raise InvalidRequest("metadata must be an object of strings")
    if len(metadata) > MAX_METADATA_KEYS:
        raise InvalidRequest(f"metadata has {len(metadata)} keys; at most {MAX_METADATA_KEYS}")
    for key, value in metadata.items():
        if not isinstance(key, str) or not 1 <= len(key) <= MAX_METADATA_KEY_CHARS:
            raise InvalidRequest(
                f"metadata key {key!r} must be a string of 1 to {MAX_METADATA_KEY_CHARS} characters"
            )
        if not isinstance(value, str) or len(value) > MAX_METADATA_VALUE_CHARS:
            raise InvalidRequest(
                f"metadata[{key!r}] must be a string of at most {MAX_METADATA_VALUE_CHARS} "
                "characters"
            )
        if not (key + value).isprintable():
            raise InvalidRequest(f"metadata[{key!r}] holds a control character")
    return dict(metadata)


def check_busy_policy(on_busy: Any) -> str:
    if on_busy not in BUSY_POLICIES:
        raise InvalidRequest(f"on_busy must be one of {', '.join(BUSY_POLICIES)}, not {on_busy!r}")
    return str(on_busy)


def check_seq(seq: Any) -> int:
    """A message's seq: an integer >= 1."""
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise InvalidRequest(f"seq must be a message's seq, an integer >= 1, not {seq!r}")
    return seq


def check_cursor(after: Any, limit: Any) -> tuple[int, int]:
    """An event cursor (0 = from the start) and a page size of 1 to 1000."""
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise InvalidCursor(f"after must be an event seq >= 0, not {after!r}")
    return after, check_page_size(limit)


def check_page_size(limit: Any) -> int:
    """A page size of 1 to 1000."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidRequest(f"limit must be between 1 and {MAX_PAGE}, not {limit!r}")
    return limit


MAX_OUTPUTS = 128


def check_outputs(outputs: Any, limit: int, *, allow_empty: bool = False) -> dict[str, str]:
    """Answers by call id: a non-empty mapping of call ids to storable strings."""
    if not isinstance(outputs, Mapping) or not (outputs or allow_empty):
        raise InvalidRequest("outputs must be a non-empty mapping of call ids to outputs")
    if len(outputs) > MAX_OUTPUTS:
        raise InvalidRequest(f"at most {MAX_OUTPUTS} outputs at once, not {len(outputs)}")
    checked: dict[str, str] = {}
    for call_id, output in outputs.items():
        _check_call_id(call_id)
        check_text(output, f"the output of {call_id}", limit, allow_empty=True)
        checked[call_id] = output
    return checked


def check_decisions(approvals: Any, limit: int, *, allow_empty: bool = False) -> dict[str, Any]:
    """Approvals by call id: True, False, or a `Decision` (with the reason for the model)."""
    if not isinstance(approvals, Mapping) or not (approvals or allow_empty):
        raise InvalidRequest("approvals must be a non-empty mapping of call ids to decisions")
    checked: dict[str, Decision] = {}
    for call_id, decision in approvals.items():
        _check_call_id(call_id)
        given = Decision(decision) if isinstance(decision, bool) else decision
        if not isinstance(given, Decision) or not isinstance(given.approve, bool):
            raise InvalidRequest(f"the approval of {call_id} must be true or false")
        if given.reason is not None:
            check_text(given.reason, f"the reason for {call_id}", limit, allow_empty=True)
        checked[call_id] = given
    return checked


def _check_call_id(call_id: Any) -> None:
    if not isinstance(call_id, str) or not 1 <= len(call_id) <= 200:
        raise InvalidRequest(f"a call id must be a string of 1 to 200 characters: {call_id!r}")


def check_budget(
    owner: str | None,
    conversation_id: uuid.UUID | None,
    period: str,
    max_tokens: int | None,
    max_cost_usd: float | str | None,
) -> tuple[int | None, Decimal | None]:
    """The limits as stored, or the `InvalidRequest` naming what is wrong."""
    if (owner is None) == (conversation_id is None):
        raise InvalidRequest("a budget is an owner's or one conversation's: give exactly one")
    if owner is not None and not (isinstance(owner, str) and owner.strip()):
        raise InvalidRequest(f"owner must be a non-empty string, not {owner!r}")
    if period not in PERIODS:
        raise InvalidRequest(f"period must be one of {', '.join(PERIODS)}, not {period!r}")
    if max_tokens is None and max_cost_usd is None:
        raise InvalidRequest("a budget needs max_tokens, max_cost_usd or both")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0
    ):
        raise InvalidRequest(f"max_tokens must be a whole number >= 0, not {max_tokens!r}")
    cost = None
    if max_cost_usd is not None:
        try:
            cost = Decimal(str(max_cost_usd))
        except InvalidOperation:
            raise InvalidRequest(f"max_cost_usd must be a number, not {max_cost_usd!r}") from None
        if isinstance(max_cost_usd, bool) or not cost.is_finite() or cost < 0:
            raise InvalidRequest(f"max_cost_usd must be a number >= 0, not {max_cost_usd!r}")
    return max_tokens, cost


def check_budget_subject(owner: str | None, conversation_id: uuid.UUID | None, period: str) -> None:
    """A budget's subject: exactly one of an owner and a conversation, and a known period."""
    if (owner is None) == (conversation_id is None) or period not in PERIODS:
        raise InvalidRequest("give exactly one of owner and conversation, and a period")


def check_url(url: object, allowed: Sequence[Network] = ()) -> str:
    """A webhook's URL: http(s), a host, no credentials or fragment, no whitespace or control
    character; a host that is an address (or `localhost`) must not be loopback, private,
    link-local or reserved unless `allowed` (`app/egress.py`; a name is checked at delivery)."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidRequest(f"url must be an http or https URL, not {url!r}")
    if len(url) > MAX_URL_CHARS:
        raise InvalidRequest(f"url is over {MAX_URL_CHARS} characters")
    if any(ch.isspace() or not ch.isprintable() for ch in url) or not _is_unicode(url):
        raise InvalidRequest("url must not contain whitespace or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError as exc:
        raise InvalidRequest(f"url {url!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidRequest(f"url must be an http or https URL with a host, not {url!r}")
    if parts.username or parts.password:
        raise InvalidRequest("url must not carry credentials: the signature authenticates")
    if parts.fragment:
        raise InvalidRequest("url must not have a #fragment")
    host = parts.hostname
    address = literal_address(host)
    if address is None and (host == "localhost" or host.endswith(".localhost")):
        address = literal_address("127.0.0.1")
    why = None if address is None else refusal(address, allowed)
    if why is not None:
        raise InvalidRequest(
            f"url's host {host!r} is a {why} address: webhooks are not sent there (an operator "
            "allows a network with CHATWORKER_WEBHOOK_ALLOWED_NETWORKS)"
        )
    return url


def check_event_types(event_types: Sequence[str] | None) -> tuple[str, ...]:
    if event_types is None:
        return WEBHOOK_EVENT_TYPES
    if isinstance(event_types, str) or not isinstance(event_types, Sequence):
        raise InvalidRequest(f"event_types must be a list of event types, not {event_types!r}")
    if not event_types:
        raise InvalidRequest("event_types must name at least one event type (omit it: all)")
    unknown = [name for name in event_types if name not in WEBHOOK_EVENT_TYPES]
    if unknown:
        raise InvalidRequest(
            f"unknown event type {unknown[0]!r}; use {', '.join(WEBHOOK_EVENT_TYPES)}"
        )
    return tuple(name for name in WEBHOOK_EVENT_TYPES if name in event_types)
