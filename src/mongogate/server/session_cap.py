"""A cap on the live MCP sessions of one principal (protocol 2025-06-18, `Mcp-Session-Id`).

The SDK keeps each stateful session (about 37 KB) until its idle timeout, with one global cap:
one token could open thousands and crowd out everyone. Here each principal (tenant and subject
of its token; the launch principal without auth) may hold ``server.max_sessions_per_principal``.
Opening one more **evicts that principal's least recently used idle session** (no request in
flight, no open GET stream): its id answers 404 "Session not found" from then on, which the
spec tells clients to meet by initializing again. When every one of them is busy, the new one
is refused: 429 with a JSON-RPC error ``[busy] (retryable) ...`` and ``Retry-After``.
Sessions idle for ``server.session_idle_timeout_s`` end by themselves (the SDK's timer).

This wraps ``asgi_app`` of the SDK's session manager on its instance (to see each request's
session and principal) and, through ``compat.sdk`` (mcp 2.3, pinned), its private admission
(to evict before a new session is registered) and discard (to forget ended ones).
"""

from __future__ import annotations

import itertools
import json
import logging
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Receive, Scope, Send

from mongogate.compat.sdk import forget_session, session_hooks, session_task_group, set_session_hooks

log = logging.getLogger(__name__)

_SESSION_HEADER = b"mcp-session-id"


@dataclass
class _Opening:
    """The request that may open a session: whose it is, and the id it got."""

    principal: str
    session_id: str | None = None


_opening: ContextVar[_Opening | None] = ContextVar("mongogate_session_opening", default=None)


def principal_key(scope: Scope) -> str:
    """The principal a request authenticated as (tenant and subject), or "local" without auth."""
    token = getattr(scope.get("user"), "access_token", None)
    if token is None:
        return "local"
    claims = getattr(token, "claims", None) or {}
    return json.dumps([claims.get("tenant"), token.subject or token.client_id])


def _may_open_session(scope: Scope) -> bool:
    """The SDK's own routing: a request of a newer protocol (a version header outside the 2025
    handshake versions) keeps no server-side session, so the session cap never refuses it."""
    header = MCP_PROTOCOL_VERSION_HEADER.encode("ascii").lower()
    pv = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == header), None)
    return pv is None or pv in HANDSHAKE_PROTOCOL_VERSIONS


class SessionCap:
    """Per-principal session accounting around one StreamableHTTPSessionManager."""

    def __init__(self, manager: StreamableHTTPSessionManager, per_principal: int) -> None:
        self.manager = manager
        self.cap = per_principal
        self.owner: dict[str, str] = {}
        self._used: dict[str, int] = {}
        self._busy: dict[str, int] = {}
        self._tick = itertools.count()
        self.evicted = 0
        inner_asgi: ASGIApp = manager.asgi_app
        inner_admit, inner_discard = session_hooks(manager)

        async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
            await self._serve(inner_asgi, scope, receive, send)

        def admit(requestor: Any) -> Any:
            self._make_room()
            transport = inner_admit(requestor)
            opening = _opening.get()
            sid = getattr(transport, "mcp_session_id", None)
            if transport is not None and isinstance(sid, str):
                self.owner[sid] = opening.principal if opening is not None else "local"
                self._used[sid] = next(self._tick)
                self._busy[sid] = 1  # its opening request is in flight
                if opening is not None:
                    opening.session_id = sid
            return transport

        async def discard(session_id: str, transport: Any) -> None:
            self._forget(session_id)
            await inner_discard(session_id, transport)

        # on the instance (the SDK looks each one up at call time)
        setattr(manager, "asgi_app", asgi)  # noqa: B010
        set_session_hooks(manager, admit, discard)

    def sessions_of(self, principal: str) -> list[str]:
        return [sid for sid, who in self.owner.items() if who == principal]

    async def _serve(self, inner: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        sid = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == _SESSION_HEADER), None)
        if sid is not None and sid in self.owner:
            self._enter(sid)
            try:
                await inner(scope, receive, send)
            finally:
                self._leave(sid)
            return
        if sid is not None or scope.get("method") != "POST" or not _may_open_session(scope):
            await inner(scope, receive, send)
            return
        principal = principal_key(scope)
        mine = self.sessions_of(principal)
        if len(mine) >= self.cap and all(self._busy.get(s, 0) for s in mine):
            await self._refuse(send)
            return
        opening = _Opening(principal)
        token = _opening.set(opening)
        try:
            await inner(scope, receive, send)
        finally:
            _opening.reset(token)
            if opening.session_id is not None:
                self._leave(opening.session_id)

    def _enter(self, sid: str) -> None:
        self._busy[sid] = self._busy.get(sid, 0) + 1
        self._used[sid] = next(self._tick)

    def _leave(self, sid: str) -> None:
        if sid in self.owner:
            self._busy[sid] = max(0, self._busy.get(sid, 0) - 1)
            self._used[sid] = next(self._tick)

    def _forget(self, sid: str) -> None:
        self.owner.pop(sid, None)
        self._used.pop(sid, None)
        self._busy.pop(sid, None)

    def _make_room(self) -> None:
        """At the cap: end the principal's least recently used idle session (synchronously gone)."""
        opening = _opening.get()
        principal = opening.principal if opening is not None else "local"
        mine = self.sessions_of(principal)
        if len(mine) < self.cap:
            return
        idle = [s for s in mine if not self._busy.get(s, 0)]
        if not idle:
            return  # all busy (raced past _serve's check): the SDK's own limit answers, or it fits
        victim = min(idle, key=lambda s: self._used.get(s, 0))
        transport = forget_session(self.manager, victim)
        self._forget(victim)
        self.evicted += 1
        log.info("evicted idle MCP session %s: its principal opened more than %d", victim[:12], self.cap)
        scope = getattr(transport, "idle_scope", None)
        if scope is not None:
            scope.cancel()  # ends its server task as the idle timeout would (it then terminates)
        elif transport is not None and (group := session_task_group(self.manager)) is not None:
            group.start_soon(transport.terminate)

    async def _refuse(self, send: Send) -> None:
        text = (
            f"[busy] (retryable) this principal already has {self.cap} MCP sessions open, each with a "
            f"request in flight (server.max_sessions_per_principal = {self.cap}); none was opened: end "
            "one (DELETE with its Mcp-Session-Id) or retry once one is idle"
        )
        body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": text}}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", b"1"),
        ]
        await send({"type": "http.response.start", "status": 429, "headers": headers})
        await send({"type": "http.response.body", "body": body})
