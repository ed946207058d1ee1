"""An ASGI middleware that applies `reflectrm.serving.hosts` to every request, before any route reads it.

Both services wrap their whole application in it (`reflectrm serve`'s FastAPI app, the workbench's
Gradio app): a refused request never reaches a route, so nothing is read, parsed or stored for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from reflectrm.serving.hosts import AccessConfig, Refusal

Reply = Callable[[Refusal], tuple[str, bytes]]
"""A refusal as (content type, body) in the service's own error shape (it may also count it)."""

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]]


def plain_reply(refusal: Refusal) -> tuple[str, bytes]:
    """A refusal as one line of text."""
    return "text/plain; charset=utf-8", refusal.message.encode("utf-8") + b"\n"


def request_header(scope: Scope, name: bytes) -> str | None:
    """Header `name` (lower case); None when it is missing. Repeated, its values are joined with ", " as HTTP
    reads them (so two Host or Origin headers make one malformed value, refused, never one of them picked)."""
    values = [value.decode("latin-1") for key, value in scope.get("headers", ()) if key.lower() == name]
    return ", ".join(values) if values else None


class AccessGuard:
    """Refuses a request from a foreign Host, or a cross-site one that would change something (`AccessConfig`)."""

    def __init__(self, app: ASGIApp, *, access: AccessConfig, reply: Reply = plain_reply) -> None:
        self.app, self.access, self.reply = app, access, reply

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):  # lifespan
            await self.app(scope, receive, send)
            return
        # a WebSocket is never protected by CORS: its handshake counts as a request that changes something
        method = scope.get("method", "GET") if scope["type"] == "http" else "WEBSOCKET"
        refusal = self.access.refusal(method, host=request_header(scope, b"host"),
                                      origin=request_header(scope, b"origin"),
                                      fetch_site=request_header(scope, b"sec-fetch-site"))
        if refusal is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": refusal.message[:120]})
        else:
            await respond(send, refusal, self.reply)


async def respond(send: Any, refusal: Refusal, reply: Reply) -> None:
    """Send `refusal` as a whole response without reading the request's body.

    The connection is not closed: uvicorn drops what is left of the body as it arrives (never holding
    it), where a close with unread bytes would reset the connection and the client could lose the answer."""
    content_type, body = reply(refusal)
    await send({"type": "http.response.start", "status": refusal.status,
                "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
