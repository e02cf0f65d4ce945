"""Files: a user message's file read back (its bytes, as stored), for its owner only."""

from __future__ import annotations

import uuid
from urllib.parse import quote

from fastapi import APIRouter, Response

from app.api.auth import Authenticated
from app.api.gate import GuardedRoute
from app.api.problems import documented
from app.api.state import Api

router = APIRouter(prefix="/files", tags=["files"], route_class=GuardedRoute)

#: Shown in the page (an image); anything else is downloaded, never rendered by the browser.
INLINE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


@router.get(
    "/{file_id}",
    response_class=Response,
    responses={
        **documented(401, 404, 422, 503),
        200: {"description": "the file's bytes, as its media type (read from them)"},
    },
)
async def get_file(file_id: uuid.UUID, caller: Authenticated, api: Api) -> Response:
    """A message's file: its bytes with the media type read from them (an image inline, any
    other file as an attachment); another owner's is a 404 `file_not_found`."""
    stored = await api.chat.get_file(file_id, owner=caller.owner)
    disposition = "inline" if stored.media_type in INLINE_TYPES else "attachment"
    if stored.name:
        disposition += f"; filename*=UTF-8''{quote(stored.name)}"
    return Response(
        stored.data,
        media_type=stored.media_type,
        headers={
            "Content-Disposition": disposition,
            # (the same bytes for this id forever: a browser keeps them; nothing else may run)
            "Cache-Control": "private, max-age=31536000, immutable",
            "Content-Security-Policy": "default-src 'none'; sandbox",
        },
    )
