"""The HTTP API: `create_app(settings)` for uvicorn, `install(app)` to mount it in your own
FastAPI app, `router` for the bare `/v1` routes. A skin over `app.client`; never the worker."""

from app.api.app import create_app, install
from app.api.routes import router

__all__ = ["create_app", "install", "router"]
