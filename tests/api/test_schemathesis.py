"""Schemathesis against the live API process: every operation of the OpenAPI document (read from
the server at test time) is fuzzed with schema-valid and schema-invalid requests, with a valid API
key, and must answer as documented: no 5xx, only documented status codes, bodies and headers that
match their schemas, invalid requests refused with a 4xx, a request without valid credentials
refused with a 401 (schemathesis' default checks). Every error is a problem whose `code` the
table in app/api/problems.py documents for its status.

Each operation runs with random ids (mostly 404s), then with the ids of a real conversation and
turn of the caller, so the routes' real answers are checked too. The event stream never ends on
its own (`until=never` is its default): it is left out here and tested in test_routes.py and
test_bad_inputs.py.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.result import Ok

from app.api import problems
from tests.api.conftest import Deployment, finished_turn, owner_name

# One deployment for the module: its tests stay on one test process (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("api-schemathesis")

# A fuzzed `?wait=` holds a request for at most a second.
# Schemathesis sends hundreds of bad credentials in a minute: the limit of failed
# authentications per address is tested in test_hardening.py, not in the way here.
API_ENV = {"CHATWORKER_API_MAX_WAIT_SECONDS": "1", "CHATWORKER_API_AUTH_FAILURE_LIMIT": ""}
EXAMPLES = 12  # per operation, mode and kind of id
# The streams never end on their own.
SKIPPED = re.compile(r"/stream$")
IDEMPOTENCY_KEY = "Idempotency-Key"
RUNNING = ("processing", "tool_loop")
# Schema-valid requests the API may still refuse on their meaning (an empty message, a model or
# tool name it does not know, a cursor past the end: 400), or on the state (404, 409).
ACCEPTED_STATUSES = ["2xx", "400", "404", "409"]


def documented_codes() -> dict[int, set[str]]:
    """The status -> codes table of the docstring of app/api/problems.py."""
    table: dict[int, set[str]] = {}
    for status, code in re.findall(r"^\s+(\d{3})\s+([a-z_]+)\s", problems.__doc__ or "", re.M):
        table.setdefault(int(status), set()).add(code)
    return table


CODES = documented_codes()


def test_the_error_code_table_is_read() -> None:
    assert CODES[404] == {
        "conversation_not_found",
        "turn_not_found",
        "action_not_found",
        "webhook_not_found",
        "response_not_found",
        "message_not_found",
        "file_not_found",
        "not_found",
    }
    assert "unsupported_media_type" in CODES[415]


@pytest.fixture(scope="module")
def key(shared_api: Deployment) -> str:
    return shared_api.key(owner_name("fuzz"))


def real_ids(shared_api: Deployment, key: str) -> dict[str, str]:
    """A conversation of the caller's with a finished turn."""
    with shared_api.http(token=key) as http:
        conversation = http.post("/v1/conversations", json={}).json()["id"]
        submitted = http.post(f"/v1/conversations/{conversation}/messages", json={"text": "hi"})
        assert submitted.status_code == 202, submitted.text
        turn = submitted.json()["turn"]["id"]
        finished_turn(http, turn)
    return {"conversation_id": conversation, "turn_id": turn}


def resting(shared_api: Deployment, key: str, conversation_id: str) -> None:
    deadline = time.monotonic() + 30
    with shared_api.http(token=key) as http:
        while http.get(f"/v1/conversations/{conversation_id}").json()["status"] in RUNNING:
            assert time.monotonic() < deadline, "the conversation never came to rest"
            time.sleep(0.1)


def test_every_operation_answers_as_documented(shared_api: Deployment, key: str) -> None:
    url = shared_api.apis[0].url
    config = schemathesis.Config.from_dict(
        {
            "base-url": url,
            "auth": {"openapi": {"HTTPBearer": {"bearer": key}}},
            "checks": {"positive_data_acceptance": {"expected-statuses": ACCEPTED_STATUSES}},
        }
    )
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", config=config)
    failures: dict[str, str] = {}
    statuses: dict[str, set[int]] = {}
    ran = []
    # DELETE last: it deletes the real conversation the other operations use.
    loaded = sorted(schema.get_all_operations(), key=_is_delete)
    ids = real_ids(shared_api, key)
    for result in loaded:
        if not isinstance(result, Ok):
            failures[f"invalid schema: {result.err()}"] = str(result.err())
            continue
        operation = result.ok()
        if SKIPPED.search(operation.path):
            continue
        has_input = bool(len(operation.query) or len(operation.path_parameters))
        has_input = has_input or bool(len(operation.body))
        variants: list[tuple[GenerationMode, dict[str, str] | None]] = [
            (GenerationMode.POSITIVE, None)
        ]
        fixed = {k: v for k, v in ids.items() if f"{{{k}}}" in operation.path}
        if fixed:
            variants.append((GenerationMode.POSITIVE, fixed))
            if operation.method.upper() == "DELETE":  # not while a fuzzed message runs (409)
                resting(shared_api, key, ids["conversation_id"])
        if has_input:  # with nothing to make invalid, a negative case cannot be generated
            variants.append((GenerationMode.NEGATIVE, None))
        for mode, path_parameters in variants:
            label = (
                f"{operation.label} ({mode.value}, {'real' if path_parameters else 'random'} ids)"
            )
            seen = statuses.setdefault(label, set())
            started = time.monotonic()
            failure = fuzz(operation, mode, path_parameters, seen.add)
            print(f"{time.monotonic() - started:6.2f} s  {label}: {sorted(seen)}")
            if failure is not None:
                failures[label] = failure
            ran.append(label)
    assert failures == {}, "\n\n".join(f"=== {k}\n{v}" for k, v in failures.items())
    assert len(ran) >= 20, ran
    answered = {status for seen in statuses.values() for status in seen}
    # The fuzzing reached past validation: real answers, not only refusals.
    assert {200, 201, 202, 204, 404, 422} <= answered, statuses


def _is_delete(result: Any) -> bool:
    return isinstance(result, Ok) and result.ok().method.upper() == "DELETE"


def fuzz(
    operation: Any,
    mode: GenerationMode,
    path_parameters: dict[str, str] | None,
    seen: Callable[[int], None],
) -> str | None:
    """Run the operation's cases; the failure's report, or None."""

    strategy = operation.as_strategy(mode, path_parameters=path_parameters)
    if mode == GenerationMode.POSITIVE:
        strategy = strategy.map(unique_idempotency_key)

    @given(case=strategy)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        response = case.call_and_validate(timeout=30)
        seen(response.status_code)
        check_problem(case.path, response)

    try:
        run()
    except Unsatisfiable:
        return None  # nothing to generate for this mode (e.g. fixed ids and no other input)
    except Exception as exc:  # a check failed: its report
        return str(exc)
    except BaseExceptionGroup as group:  # schemathesis' FailureGroup of several checks
        return str(group)
    return None


def unique_idempotency_key(case: Any) -> Any:
    """The generated key, made unique: a key reused with another text is refused (422
    idempotency_key_reused, as documented), which is no failure of a schema-valid request."""
    if case.headers and case.headers.get(IDEMPOTENCY_KEY) is not None:
        case.headers[IDEMPOTENCY_KEY] = f"{uuid.uuid4().hex}{case.headers[IDEMPOTENCY_KEY]}"
    return case


#: The paths that answer errors in OpenAI's shape (documented as such): `{"error": {...}}`.
OPENAI_SHAPED = re.compile(r"^/v1/(chat|models|responses)")


def check_problem(path: str, response: Any) -> None:
    """An error is an `application/problem+json` whose code is documented for its status (on
    OpenAI's dialect, its error object, with the same codes)."""
    if response.status_code < 400:
        return
    if OPENAI_SHAPED.search(path):
        assert response.headers["content-type"] == ["application/json"], response.headers
        error = json.loads(response.content)["error"]
        assert {"message", "type", "param", "code"} <= set(error), error
        assert error["code"] in CODES.get(response.status_code, set()), error
        return
    assert response.headers["content-type"] == [problems.MEDIA_TYPE], response.headers
    body = json.loads(response.content)
    assert body["status"] == response.status_code, body
    assert body["code"] in CODES.get(response.status_code, set()), body
