"""The app uvicorn imports in each of its worker processes (`--workers N`): settings from the
environment."""

from __future__ import annotations

from starlette.types import ASGIApp

from app.api.app import create_app
from app.api.handoff import servable


def from_environment() -> ASGIApp:
    return servable(create_app())
