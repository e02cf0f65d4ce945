"""The retention section: how long resting conversations are kept before `chatworker prune`.

Nothing is deleted unless someone runs the prune command; this only gives it a default cutoff.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from app.config.section import Section


class RetentionSettings(Section):
    """The default age past which `chatworker prune` deletes a resting conversation."""

    title: ClassVar[str] = "Retention"

    retention_days: float | None = Field(
        None,
        gt=0,
        description="`chatworker prune` deletes resting conversations untouched for this many "
        "days (unset: `--older-than 90d` is required)",
    )
