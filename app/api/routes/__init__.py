"""The `/v1` routes, one module per resource; `router` assembles them (all need a caller but the
health checks)."""

from fastapi import APIRouter

from app.api.aisdk.routes import router as aisdk_router
from app.api.chat.routes import router as chat_router
from app.api.responses.routes import router as responses_router
from app.api.routes import (
    admin,
    branches,
    conversations,
    events,
    files,
    system,
    turns,
    webhooks,
)

router = APIRouter(prefix="/v1")
router.include_router(system.router)
router.include_router(conversations.router)
router.include_router(branches.router)
router.include_router(turns.router)
router.include_router(events.router)
router.include_router(webhooks.router)
router.include_router(files.router)
router.include_router(responses_router)
router.include_router(aisdk_router)
router.include_router(chat_router)
router.include_router(admin.router)

__all__ = ["router"]
