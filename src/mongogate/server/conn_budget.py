"""Connection budgets: probes keep their own, and one address cannot hold many unfinished heads.

- ``/healthz`` and ``/readyz`` are answered even when the MCP budget (``server.max_connections``
  open connections) is full: they have their own small budget, ``server.probe_concurrency``
  probes in flight at once (503 beyond). Before, uvicorn's ``limit_concurrency`` refused every
  request alike, so half-open connections turned ``/healthz`` itself to 503.
- One client address may have at most ``server.max_pending_heads_per_address`` connections still
  sending their request head (connected, or a next request begun on a kept-alive connection);
  one more closes that address's oldest such connection with 429. The head deadline
  (``server.header_timeout_s``) still closes each of them; this bounds how many one address holds
  meanwhile, so 20 new half-open connections a second cannot keep the server at its cap.
- A connection kept alive between requests (its last response sent, nothing of a next one
  received) holds no request: when a new connection would go past ``server.max_connections``,
  the longest idle one is closed to make room, as its keep-alive timeout would close it
  (clients open a new connection for their next request, as they do after any keep-alive
  close). So the budget refuses (503) only when every open connection is sending a request or
  waiting for its answer; a token that was answered (a refusal, a short call) cannot keep
  connections from others by leaving them open.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sized
from typing import Protocol

from starlette.types import ASGIApp, Receive, Scope, Send

from mongogate.server.health import PATHS as PROBE_PATHS

_HEADS_TEXT = (
    b"Too many connections from this address are still sending their request head "
    b"(server.max_pending_heads_per_address)"
)
TOO_MANY_HEADS = (
    b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n" % len(_HEADS_TEXT)
) + _HEADS_TEXT


class Pending(Protocol):
    def evict_pending(self) -> None: ...


class Idle(Protocol):
    def close_idle(self) -> None: ...


class ConnectionBudget:
    """Shared by every connection of one server (its protocols and its outermost ASGI app)."""

    def __init__(self, max_connections: int, probe_concurrency: int, per_address: int) -> None:
        self.max_connections = max_connections
        self.probe_concurrency = probe_concurrency
        self.per_address = per_address
        self.probes = 0
        #: the server's open connections (uvicorn's set), given by the first connection
        self.connections: Sized = ()
        self._pending: dict[str, OrderedDict[Pending, None]] = {}
        #: connections between requests, the longest idle first
        self._idle: OrderedDict[Idle, None] = OrderedDict()
        #: idle connections closed to make room, until the server forgets them
        self._closing: set[Idle] = set()
        self.reclaimed = 0

    def open_count(self) -> int:
        """Open connections, less those already closed to make room (gone at the next loop turn)."""
        return len(self.connections) - len(self._closing)

    def idle_started(self, conn: Idle) -> None:
        self._idle[conn] = None

    def idle_done(self, conn: Idle) -> None:
        self._idle.pop(conn, None)

    def forget(self, conn: Idle) -> None:
        self._idle.pop(conn, None)
        self._closing.discard(conn)

    def make_room(self) -> None:
        """A connection was opened: past the budget, close the longest idle ones to make room."""
        while self.open_count() > self.max_connections and self._idle:
            conn, _ = self._idle.popitem(last=False)
            self._closing.add(conn)
            self.reclaimed += 1
            conn.close_idle()

    def pending(self, address: str) -> int:
        return len(self._pending.get(address, ()))

    def head_started(self, address: str, conn: Pending) -> None:
        waiting = self._pending.setdefault(address, OrderedDict())
        waiting[conn] = None
        while len(waiting) > self.per_address:
            oldest, _ = waiting.popitem(last=False)
            oldest.evict_pending()

    def head_done(self, address: str, conn: Pending) -> None:
        waiting = self._pending.get(address)
        if waiting is not None:
            waiting.pop(conn, None)
            if not waiting:
                del self._pending[address]


class BudgetGate:
    """The outermost ASGI app: probes within their own budget, everything else within the MCP one."""

    def __init__(self, app: ASGIApp, budget: ConnectionBudget) -> None:
        self.app = app
        self.budget = budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        b = self.budget
        if scope["path"] in PROBE_PATHS:
            if b.probes >= b.probe_concurrency:
                await _unavailable(send, b"Too many probes in flight (server.probe_concurrency)")
                return
            b.probes += 1
            try:
                await self.app(scope, receive, send)
            finally:
                b.probes -= 1
            return
        if b.open_count() > b.max_connections:  # every other connection has a request in flight
            await _unavailable(
                send, b"Service Unavailable: too many open connections (server.max_connections)"
            )
            return
        await self.app(scope, receive, send)


async def _unavailable(send: Send, text: bytes) -> None:
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(text)).encode()),
        (b"connection", b"close"),
        (b"retry-after", b"1"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": text})


def address_of(peer: object) -> str:
    return str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
