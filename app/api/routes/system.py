"""Health, readiness and the tool catalogue."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.api.auth import Authenticated
from app.api.gate import GuardedRoute
from app.api.problems import documented
from app.api.schemas import Health, Readiness, Tool, ToolList
from app.api.state import Api

router = APIRouter(tags=["system"], route_class=GuardedRoute)


@router.get("/health", response_model=Health)
async def health() -> Health:
    """The process is up (no dependency checked: a liveness probe)."""
    return Health()


@router.get(
    "/ready",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "the database or Redis is down"}},
)
async def ready(api: Api, response: Response) -> Readiness:
    """The database and the live channel answer (a readiness probe)."""
    found = await api.chat.admin.check_ready()
    up = all(state == "ok" for state in found.values())
    if not up:
        response.status_code = 503
        response.headers["Retry-After"] = "5"
    return Readiness(status="ok" if up else "unavailable", **found)


@router.get("/tools", response_model=ToolList, responses=documented(401, 503))
async def list_tools(caller: Authenticated, api: Api) -> ToolList:
    """The tools a conversation may use, as the workers last published them."""
    return ToolList(data=[Tool.model_validate(info) for info in await api.chat.admin.list_tools()])
