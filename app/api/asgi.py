"""The app uvicorn imports in each of its worker processes (`--workers N`): settings from the
environment."""

from __future__ import annotations

from starlette.types import ASGIApp

from app.api.app import create_server_app


def from_environment() -> ASGIApp:
    return create_server_app()
