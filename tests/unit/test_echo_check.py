"""What a dialect keeps with a turn to show back (`submit_message`'s `echo`): a small JSON
object, or nothing; anything else refused before a row is written."""

from __future__ import annotations

from typing import Any

import pytest

from app.client.checks import MAX_ECHO_BYTES, check_echo
from app.errors import InvalidRequest


def test_an_echo_is_kept_as_given_and_an_empty_one_is_none() -> None:
    given = {"store": False, "previous_response_id": "resp_" + "0" * 32}
    assert check_echo(given) == given
    assert check_echo(None) is None and check_echo({}) is None


@pytest.mark.parametrize(
    ("echo", "says"),
    [
        (["store"], "must be an object"),
        ({"store": float("nan")}, "JSON-serializable"),
        ({"x": "\x00"}, "NUL"),
        ({"x": "y" * MAX_ECHO_BYTES}, f"more than {MAX_ECHO_BYTES} bytes"),
    ],
)
def test_an_echo_that_cannot_be_kept_is_refused(echo: Any, says: str) -> None:
    with pytest.raises(InvalidRequest, match=says):
        check_echo(echo)
