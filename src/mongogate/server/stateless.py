"""A stateless server answers GET on the MCP endpoint with 405 (the spec's other answer).

With no session, nothing can ever be sent on a GET stream, yet the SDK held each one open for
good, each counting against `server.max_connections`: one token holder could fill them all.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

_BODY = (
    b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,'
    b'"message":"Method Not Allowed: stateless server, POST only"}}'
)


class NoStreamsWhenStateless:
    def __init__(self, app: ASGIApp, path: str = "/mcp") -> None:
        self.app = app
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "GET" or scope.get("path") != self.path:
            await self.app(scope, receive, send)
            return
        headers = [
            (b"allow", b"POST"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(_BODY)).encode()),
        ]
        await send({"type": "http.response.start", "status": 405, "headers": headers})
        await send({"type": "http.response.body", "body": _BODY})
