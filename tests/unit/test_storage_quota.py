"""The owner's storage quota's answer (`app/client/quota.py`), row by row of its table."""

from __future__ import annotations

import pytest

from app.client.quota import refusal
from app.errors import LargerThanStorageQuota, StorageQuotaExceeded


@pytest.mark.parametrize(
    ("stored", "adding", "answer"),
    [
        (5_000, 0, None),  # nothing new: stored, whatever the owner holds
        (0, 1_001, LargerThanStorageQuota),  # more than the whole quota
        (600, 500, StorageQuotaExceeded),  # past it with the rest
        (500, 500, None),  # exactly the quota: within it
    ],
)
def test_each_row_of_the_quota_s_table(
    stored: int, adding: int, answer: type[Exception] | None
) -> None:
    found = refusal(stored, adding, 1_000, "the files")
    assert (None if found is None else type(found)) is answer
    if found is not None:
        assert "CHATWORKER_OWNER_STORAGE_BYTES" in str(found)
