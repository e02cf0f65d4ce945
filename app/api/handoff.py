"""A long response that leaves the request's frames behind: a pure ASGI wrapper, as far out as
it can be put, under which a response may hand the rest of its life over once its head is sent.

A server-sent stream lives for minutes or hours, and while its coroutine runs inside the request,
every frame between the server and the route stays suspended with it: FastAPI's and Starlette's
own layers, the routing and its exit stacks, each middleware's frame and closures. At 10,000 open
streams that was ~9 KB a stream of the API's memory and a fifth of the objects that every full
garbage collection walks (`python -m bench --only sse`). A response that can go on without them
(`EventStream`) sends its head through the whole chain, as any response does (the security
headers, the metrics' count, CORS are applied then), puts what is left of it in the request's
scope under `HANDOFF` and returns; the chain unwinds (with the copy of the scope it was given, and
what its layers put there), and `Handoff` runs the rest from its own frame, sending with its own
`send`:

    uvicorn -> Handoff -> FastAPI -> Starlette -> middlewares -> routing -> the route
        -> EventStream: the head sent, the rest handed over, every frame above returns
    uvicorn -> Handoff -> the rest of the stream (its events and pings)

So the middlewares between see a stream's head, never its events (ours only look at the head:
`SecurityHeaders`, `Observed`, `BodyLimit`). The rest keeps the `receive` the response was given
(a body limit still applies to it).

`chatworker serve` wraps the whole app (`app.api.app.create_server_app`); `install` adds one as
the outermost of its middlewares too, for an app that mounts the routes its own way (an inner
`Handoff` under an outer one passes through). Without any, a response runs its rest where it is.
If the chain fails after the hand-over, the rest is abandoned: what it holds is given back (a
stream's follower closed, its count returned).
"""

from __future__ import annotations

from typing import Protocol

from starlette.types import ASGIApp, Receive, Scope, Send

HANDOFF = "chatworker.handoff"


class Rest(Protocol):
    """What a response still has to do once its head is sent."""

    async def run(self, send: Send) -> None: ...

    async def abandon(self) -> None: ...


class Handoff:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or HANDOFF in scope:  # (an outer one runs the rest)
            await self.app(scope, receive, send)
            return
        later: list[Rest] = []
        # (the app gets a copy of the scope: what its layers put there, FastAPI's exit stacks,
        # the route, goes with them; the server keeps the scope for as long as the connection)
        inner = {**scope, HANDOFF: later}
        try:
            await self.app(inner, receive, send)
        except BaseException:
            for rest in later:
                await rest.abandon()
            raise
        del inner
        for rest in later:
            await rest.run(send)


def hand_off(scope: Scope, rest: Rest) -> bool:
    """Give `rest` to the `Handoff` above this request (True), or say there is none (False: the
    caller runs it itself)."""
    later = scope.get(HANDOFF)
    if later is None:
        return False
    later.append(rest)
    return True


__all__ = ["HANDOFF", "Handoff", "Rest", "hand_off"]
