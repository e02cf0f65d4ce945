"""Run the alembic migrations from code: `chatworker migrate`, the tests and the demo call this.

The scripts live in the checkout's `migrations/`; a wheel install carries them as `app/_migrations`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.exc import OperationalError

from app.errors import DatabaseUnavailable

_PACKAGE_DIR = Path(__file__).resolve().parent
log = logging.getLogger(__name__)

# An upgrade runs beside the previous release's processes (turns in flight): its DDL may meet
# their row locks in the other order, and PostgreSQL then aborts one side (deadlock_detected) or
# a lock wait gives up (lock_not_available). The upgrade is one transaction, rolled back whole,
# so it is simply run again; the workers' side retries its own statements.
RETRIED_SQLSTATES = frozenset({"40P01", "55P03"})
RETRY_WAITS_SECONDS = (0.5, 1.0, 2.0, 4.0)


def migrations_dir() -> Path:
    """Where the migration scripts are: inside the package when installed, else the checkout's."""
    for candidate in (_PACKAGE_DIR / "_migrations", _PACKAGE_DIR.parent / "migrations"):
        if (candidate / "env.py").is_file() and (candidate / "versions").is_dir():
            return candidate
    raise DatabaseUnavailable(f"migration scripts not found next to {_PACKAGE_DIR}")


def alembic_config(url: str) -> Config:
    """An alembic config for `url`, independent of the working directory."""
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # A literal '%' in a password would otherwise be read as interpolation.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["configure_logger"] = False
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at `url` up to `revision`."""
    _run(lambda: command.upgrade(alembic_config(url), revision))


def downgrade(url: str, revision: str = "base") -> None:
    """Take the database at `url` down to `revision`."""
    _run(lambda: command.downgrade(alembic_config(url), revision))


def _run(operation: Callable[[], None], sleep: Callable[[float], None] = time.sleep) -> None:
    for wait in (*RETRY_WAITS_SECONDS, None):
        try:
            operation()
            return
        except OperationalError as exc:
            if wait is None or getattr(exc.orig, "sqlstate", None) not in RETRIED_SQLSTATES:
                raise DatabaseUnavailable(f"cannot migrate the database: {exc.orig}") from exc
            log.warning(
                "migration met the running processes' locks (%s); again in %s s", exc.orig, wait
            )
            sleep(wait)
