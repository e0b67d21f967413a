"""A cap on what one principal holds on the server: its live MCP sessions (protocol 2025-06-18
and 2025-11-25, `Mcp-Session-Id`), or, on a request that opens no session (protocol 2026-07-28,
or any request to a `server.stateless` server), its requests in flight.

The SDK keeps each stateful session (about 37 KB) until its idle timeout, with one global cap:
one token could open thousands and crowd out everyone. Here each principal (tenant and subject
of its token; the launch principal without auth) may hold ``server.max_sessions_per_principal``.
Opening one more **evicts that principal's least recently used idle session** (no request in
flight, no open GET stream): its id answers 404 "Session not found" from then on, which the
spec tells clients to meet by initializing again. When every one of them is busy, the new one
is refused: 429 with a JSON-RPC error ``[busy] (retryable) ...`` and ``Retry-After``.
Sessions idle for ``server.session_idle_timeout_s`` end by themselves (the SDK's timer).
A request naming a session counts against that session only when its sender is the session's
principal: anyone else's is left to the SDK, which answers 404 as for an unknown session (before,
another tenant holding requests that named alice's idle sessions made them all busy, and alice's
next session was refused).

Without a session nothing outlives a request, so what a principal can hold is its requests in
flight (each one a connection, and on protocol 2026-07-28 a response that may stream while the
call runs): at most ``server.max_sessions_per_principal`` at once, counted before the body is
read; one more is refused at once, 429 with ``[busy] (retryable)`` and ``Retry-After``, and
nothing runs.

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
from weakref import WeakKeyDictionary

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mongogate.compat.sdk import forget_session, session_hooks, session_task_group, set_session_hooks

log = logging.getLogger(__name__)

_SESSION_HEADER = b"mcp-session-id"


@dataclass
class _Opening:
    """The request that may open a session: whose it is, and the id it got."""

    principal: str
    session_id: str | None = None


_opening: ContextVar[_Opening | None] = ContextVar("mongogate_session_opening", default=None)
#: each manager's cap (tests and health checks read its counts through `cap_of`)
_CAPS: WeakKeyDictionary[StreamableHTTPSessionManager, SessionCap] = WeakKeyDictionary()


def cap_of(manager: StreamableHTTPSessionManager) -> SessionCap | None:
    return _CAPS.get(manager)


def principal_key(scope: Scope) -> str:
    """The principal a request authenticated as (tenant and subject), or "local" without auth."""
    token = getattr(scope.get("user"), "access_token", None)
    if token is None:
        return "local"
    claims = getattr(token, "claims", None) or {}
    return json.dumps([claims.get("tenant"), token.subject or token.client_id])


def _may_open_session(scope: Scope) -> bool:
    """The SDK's own routing: a request of a newer protocol (a version header outside the 2025
    handshake versions) keeps no server-side session: it is counted as a request in flight."""
    header = MCP_PROTOCOL_VERSION_HEADER.encode("ascii").lower()
    pv = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == header), None)
    return pv is None or pv in HANDSHAKE_PROTOCOL_VERSIONS


SESSIONS_FIX = "none was opened: end one (DELETE with its Mcp-Session-Id) or retry once one is idle"
EXCHANGES_FIX = "nothing was run: retry once one of them has been answered"


class SessionCap:
    """Per-principal accounting around one StreamableHTTPSessionManager: sessions (stateful
    server, handshake protocols) and requests in flight (no session: ``stateless`` or 2026-07-28)."""

    def __init__(
        self, manager: StreamableHTTPSessionManager, per_principal: int, *, stateless: bool = False
    ) -> None:
        self.manager = manager
        self.cap = per_principal
        self.stateless = stateless
        self.owner: dict[str, str] = {}
        self._used: dict[str, int] = {}
        self._busy: dict[str, int] = {}
        #: requests in flight that belong to no session, per principal (only those with one)
        self.in_flight: dict[str, int] = {}
        self._tick = itertools.count()
        self.evicted = 0
        inner_asgi: ASGIApp = manager.asgi_app

        async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
            await self._serve(inner_asgi, scope, receive, send)

        setattr(manager, "asgi_app", asgi)  # noqa: B010 (on the instance: looked up at call time)
        _CAPS[manager] = self
        if stateless:
            return  # no sessions to count
        inner_admit, inner_discard = session_hooks(manager)

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

        set_session_hooks(manager, admit, discard)  # on the instance, as asgi_app

    def sessions_of(self, principal: str) -> list[str]:
        return [sid for sid, who in self.owner.items() if who == principal]

    def busy_sessions(self, principal: str) -> int:
        """The principal's sessions with a request in flight or a GET stream open."""
        return sum(1 for sid in self.sessions_of(principal) if self._busy.get(sid, 0))

    async def _serve(self, inner: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        if self.stateless or not _may_open_session(scope):
            await self._exchange(inner, scope, receive, send)
            return
        sid = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == _SESSION_HEADER), None)
        if sid is not None and sid in self.owner and self.owner[sid] == principal_key(scope):
            self._enter(sid)
            try:
                await inner(scope, receive, send)
            finally:
                self._leave(sid)
            return
        if sid is not None or scope.get("method") != "POST":
            await inner(scope, receive, send)
            return
        principal = principal_key(scope)
        mine = self.sessions_of(principal)
        if len(mine) >= self.cap and all(self._busy.get(s, 0) for s in mine):
            holds = f"{self.cap} MCP sessions open, each with a request in flight"
            await self._refuse(send, holds, SESSIONS_FIX)
            return
        opening = _Opening(principal)
        token = _opening.set(opening)
        try:
            await inner(scope, receive, send)
        finally:
            _opening.reset(token)
            if opening.session_id is not None:
                self._leave(opening.session_id)

    async def _exchange(self, inner: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        """A request that opens no session: counted against its principal until it is answered
        (the last byte of its response handed on, before the app's own clean-up: a client that
        sends its next request on seeing an answer is never counted twice)."""
        principal = principal_key(scope)
        held = self.in_flight.get(principal, 0)
        if held >= self.cap:
            await self._refuse(send, f"{held} requests in flight on paths without a session", EXCHANGES_FIX)
            return
        self.in_flight[principal] = held + 1
        counted = True

        def answered() -> None:
            nonlocal counted
            if counted:
                counted = False
                left = self.in_flight[principal] - 1
                if left:
                    self.in_flight[principal] = left
                else:
                    del self.in_flight[principal]  # the table holds only principals with requests

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                answered()
            await send(message)

        try:
            await inner(scope, receive, counting_send)
        finally:
            answered()

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

    async def _refuse(self, send: Send, holds: str, fix: str) -> None:
        text = (
            f"[busy] (retryable) this principal already has {holds} "
            f"(server.max_sessions_per_principal = {self.cap}); {fix}"
        )
        body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": text}}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", b"1"),
        ]
        await send({"type": "http.response.start", "status": 429, "headers": headers})
        await send({"type": "http.response.body", "body": body})
