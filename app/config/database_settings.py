"""The database and queue section: where conversations are kept and how the workers are rung.

`DATABASE_URL` and `REDIS_URL` keep their bare names, the ones hosting platforms hand out.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator

from app.config.section import Section

DEFAULT_DATABASE_URL = "sqlite:///chatworker.db"


class DatabaseSettings(Section):
    """The database every process shares, and Redis: the queue, the live streams, cancel notices."""

    title: ClassVar[str] = "Database and queue"

    database_url: str = Field(
        DEFAULT_DATABASE_URL,
        validation_alias="DATABASE_URL",
        description="SQLAlchemy URL of the database: `postgresql+psycopg://user:pass@host:5432/db` "
        "in production (`postgres://` URLs are accepted); the default is a file in the working "
        "directory",
    )
    redis_url: str | None = Field(
        None,
        validation_alias="REDIS_URL",
        description="`redis://host:6379/0` for the dramatiq queue, the live streams "
        "(`chatworker:live:<id>`) and cancel notices; unset: an in-process broker, worker and "
        "live channel (`chatworker demo`), while a web app rings no worker (`enqueued=False`) and "
        "its followers read the committed log",
    )

    @field_validator("database_url")
    @classmethod
    def _database_scheme(cls, value: str) -> str:
        # Hosting platforms hand out postgres:// URLs; SQLAlchemy needs the driver named.
        for prefix in ("postgres://", "postgresql://"):
            if value.startswith(prefix):
                return "postgresql+psycopg://" + value[len(prefix) :]
        if not value.startswith(("postgresql+psycopg://", "sqlite://")):
            raise ValueError("must start with postgresql+psycopg:// (or postgres://) or sqlite://")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            return None
        if value is not None and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return value

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")
