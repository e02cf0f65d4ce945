"""The app uvicorn imports in each of its worker processes (`--workers N`): settings from the
environment."""

from __future__ import annotations

from fastapi import FastAPI

from app.api.app import create_app


def from_environment() -> FastAPI:
    return create_app()
