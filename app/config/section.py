"""A section of the settings: a named group of fields, and the environment variable of each field.

The `Settings` object is built from the sections; a section holds fields and their checks, no I/O.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel

ENV_PREFIX = "CHATWORKER_"


class Section(BaseModel):
    """Fields that belong together; `title` heads their table in docs/SETTINGS.md."""

    title: ClassVar[str]


def variable_of(model: type[BaseModel], field: str) -> str:
    """The environment variable that sets `field` of `model`: its alias, or the prefixed name."""
    alias = model.model_fields[field].validation_alias
    return alias if isinstance(alias, str) else ENV_PREFIX + field.upper()


def comma_list(value: Any) -> tuple[str, ...]:
    """A comma-separated string (or a sequence) as its stripped, non-empty parts."""
    if isinstance(value, str):
        value = value.split(",")
    return tuple(str(part).strip() for part in value if str(part).strip())
