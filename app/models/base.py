"""The declarative base, its naming convention and the column types shared by the models.

Constraint names are fixed by the convention so migrations can drop them by name on every dialect.
"""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Integer, MetaData
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# JSONB on Postgres (indexable, compact), plain JSON text elsewhere.
JsonType = JSON().with_variant(JSONB(), "postgresql")

# SQLite only autoincrements an INTEGER PRIMARY KEY.
BigIntId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def in_list(column: str, values: tuple[str, ...]) -> str:
    """The SQL of a CHECK that `column` is one of `values`."""
    return f"{column} IN ({', '.join(repr(v) for v in values)})"
