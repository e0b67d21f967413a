"""RFC 6750 challenges a client can act on, and protected-resource metadata that tells the truth.

The SDK answers every refused request with the same ``error="invalid_token",
error_description="Authentication required"``. Here a request without credentials gets a plain
``Bearer`` challenge (RFC 6750 §3.1: no error code), and a refused token gets
``error="invalid_token"`` with the reason class the verifier noted (expired, wrong audience,
unknown signing key, ...): a fixed text, never token or key material.

The RFC 9728 metadata names an authorization server only when the operator said ``auth.issuer``
is one (``auth.advertise_issuer``); otherwise it names none, so clients do not start an OAuth
login against a server that serves no OAuth.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mongogate.errors import ConfigError
from mongogate.server.guards import is_loopback
from mongogate.tools.state import AppState

__all__ = ["METADATA_PATH", "BearerChallenge", "Challenge", "ChallengingServer", "note_rejection"]

#: RFC 9728 §3.1: the metadata of resource ``<origin>/mcp`` lives at this path.
METADATA_PATH = "/.well-known/oauth-protected-resource/mcp"

_note: ContextVar[list[str] | None] = ContextVar("mongogate_auth_rejection", default=None)


def note_rejection(kind: str) -> None:
    """Called by a verifier that refuses a token: the reason class for this request's challenge."""
    box = _note.get()
    if box is not None:
        box.append(kind)


@dataclass(frozen=True)
class Challenge:
    """What the challenge and the metadata say about this server."""

    resource: str  # the MCP endpoint's URL
    authorization_servers: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()

    @property
    def metadata_url(self) -> str:
        """RFC 9728 §3.1: the well-known prefix goes between the origin and the resource's path
        (``server.public_url`` with a path prefix keeps it after the prefix)."""
        parts = urlsplit(self.resource)
        return f"{parts.scheme}://{parts.netloc}/.well-known/oauth-protected-resource{parts.path}"

    def metadata(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "resource": self.resource,
            "bearer_methods_supported": ["header"],
            "resource_name": "mongogate",
        }
        if self.authorization_servers:
            doc["authorization_servers"] = list(self.authorization_servers)
        if self.scopes:
            doc["scopes_supported"] = list(self.scopes)
        return doc

    def header(self, reason: str | None) -> str:
        link = f'resource_metadata="{self.metadata_url}"'
        if reason is None:
            return f"Bearer {link}"
        return f'Bearer error="invalid_token", error_description="{reason}", {link}'


def _has_bearer(scope: Scope) -> bool:
    """A bearer token was presented (another scheme, or ``Bearer`` alone, counts as none)."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            scheme, _, token = bytes(value).partition(b" ")
            return scheme.lower() == b"bearer" and bool(token.strip())
    return False


class BearerChallenge:
    """Rewrites the SDK's 401 into the challenge above; every other response passes untouched."""

    def __init__(self, app: ASGIApp, challenge: Challenge) -> None:
        self.app = app
        self.challenge = challenge

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        box: list[str] = []
        token = _note.set(box)
        rewriting = False

        async def send_wrapper(message: Message) -> None:
            nonlocal rewriting
            if message["type"] == "http.response.start" and message["status"] == 401:
                rewriting = True
                return
            if rewriting and message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return  # the SDK's short JSON body is replaced as a whole
                await self._send_401(send, scope, box)
                return
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            _note.reset(token)

    async def _send_401(self, send: Send, scope: Scope, box: list[str]) -> None:
        # A missing (or non-Bearer) credential gets the plain challenge; a refused one its reason.
        reason = (box[-1] if box else "invalid token") if _has_bearer(scope) else None
        # The body says what the challenge says: no error code when no token was sent (§3.1)
        body_doc = (
            {"error": "invalid_token", "error_description": reason}
            if reason is not None
            else {"error_description": "authentication required: send Authorization: Bearer <token>"}
        )
        body = json.dumps(body_doc).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", self.challenge.header(reason).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class ChallengingServer(MCPServer[AppState]):
    """MCPServer whose Streamable HTTP app answers with these challenges and this metadata."""

    challenge: Challenge | None = None
    #: what build_server made it for: a stdio server's calls all act as its launch principal
    transport: str = "http"
    #: HTTP without authentication (``insecure_no_auth``): every caller is the launch principal
    unauthenticated: bool = False

    def install_challenge(self, challenge: Challenge) -> None:
        self.challenge = challenge

        async def metadata(request: Request) -> Response:
            headers = {"Access-Control-Allow-Origin": "*", "Cache-Control": "max-age=3600"}
            if request.method == "OPTIONS":
                headers["Access-Control-Allow-Methods"] = "GET, OPTIONS"
                return Response(status_code=204, headers=headers)
            return JSONResponse(challenge.metadata(), headers=headers)

        for path in (METADATA_PATH, "/.well-known/oauth-protected-resource"):
            self.custom_route(path, methods=["GET", "OPTIONS"])(metadata)

    def sse_app(self, **kwargs: Any) -> Starlette:
        """Refused: the SDK's SSE transport would serve this server without any of its guards."""
        raise ConfigError(
            "mongogate serves MCP over stdio or Streamable HTTP only (serve_http, `mongogate serve "
            "--http`): the SSE transport has no token check, Host/Origin guard or limits"
        )

    def streamable_http_app(self, **kwargs: Any) -> Starlette:
        """The HTTP app, only for a server built for HTTP (serve_http, the SDK's run and tests all
        come here): a stdio server has no token check, and no-auth HTTP is for loopback only."""
        if self.transport != "http":
            raise ConfigError(
                "this server was built for stdio, where every call acts as the launch principal with "
                'no authentication: build it with build_server(settings, registry, transport="http") '
                "to serve it over HTTP"
            )
        host = kwargs.get("host")
        if self.unauthenticated and isinstance(host, str) and not is_loopback(host):
            raise ConfigError(
                f"refusing to serve HTTP without authentication on {host!r}: insecure_no_auth is for a "
                "loopback address only (e.g. 127.0.0.1); set auth.mode to 'jwt' or 'api_keys'"
            )
        app = super().streamable_http_app(**kwargs)
        if self.challenge is not None:
            app.add_middleware(BearerChallenge, challenge=self.challenge)
        return app
