"""`GET /healthz` and `GET /readyz` for load balancers and orchestrators.

Both are unauthenticated and say nothing but a status word: `/healthz` is 200 while the
process serves HTTP (no database call); `/readyz` is 200 when a database ping answers within
`server.ready_timeout_s` and the database is not refusing this server's writes, else 503. After a
tool's write was refused for good (disk full, read-only storage: `tools/faults.py`), each probe
also tries one small write, and answers 503 `{"status": "writes_refused"}` until a write succeeds
again (that probe's, or any tool's). Concurrent `/readyz` requests share one ping in flight, so a
flood of unauthenticated probes costs the database one round trip at a time. They sit in
front of the Host/Origin guard: a probe addresses the pod by IP, and a status word is nothing
a rebinding attack could use.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from mongogate.errors import StorageError

if TYPE_CHECKING:
    from mongogate.db import Database
    from mongogate.tools.faults import WriteHealth

PATHS = frozenset({"/healthz", "/readyz"})
_NO_STORE = {"cache-control": "no-store"}


@dataclass
class Readiness:
    """The open database of a server (set by its lifespan), for `/readyz`."""

    db: Database | None = None
    #: the server's write refusals (set with `db` by the lifespan)
    writes: WriteHealth | None = None


_probes: weakref.WeakKeyDictionary[Any, Readiness] = weakref.WeakKeyDictionary()


def readiness_for(server: object) -> Readiness:
    """One Readiness per MCP server object: the lifespan fills it, the HTTP app reads it."""
    probe = _probes.get(server)
    if probe is None:
        probe = _probes[server] = Readiness()
    return probe


class HealthRoutes:
    def __init__(self, app: ASGIApp, readiness: Readiness, timeout_s: float) -> None:
        self.app = app
        self.readiness = readiness
        self.timeout_s = timeout_s
        self._inflight: tuple[Database, asyncio.Future[str]] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in PATHS:
            await self.app(scope, receive, send)
            return
        if scope["method"] not in ("GET", "HEAD"):
            allow = {"allow": "GET, HEAD", **_NO_STORE}
            response = JSONResponse({"status": "method not allowed"}, 405, allow)
        elif scope["path"] == "/healthz":
            response = JSONResponse({"status": "ok"}, 200, _NO_STORE)
        else:
            response = await self._ready()
        await response(scope, receive, send)

    async def _ready(self) -> JSONResponse:
        db = self.readiness.db
        if db is None:
            return JSONResponse({"status": "unavailable"}, 503, _NO_STORE)
        flight = self._inflight
        if flight is None or flight[0] is not db:
            task = asyncio.ensure_future(self._ping(db))
            flight = self._inflight = (db, task)
            task.add_done_callback(lambda _: self._done(task))
        # shield: one probe hanging up never cancels the ping the others wait on
        status = await asyncio.shield(flight[1])
        return JSONResponse({"status": status}, 200 if status == "ready" else 503, _NO_STORE)

    async def _ping(self, db: Database) -> str:
        try:
            await db.ping(self.timeout_s)
        except StorageError:
            return "unavailable"
        writes = self.readiness.writes
        if writes is not None and writes.refused is not None:
            try:
                with anyio.fail_after(self.timeout_s):
                    written = await writes.probe(db.memory)
            except (TimeoutError, StorageError):  # slow, or closed meanwhile: not ready either way
                written = False
            if not written:
                return "writes_refused"
        return "ready"

    def _done(self, task: asyncio.Future[str]) -> None:
        if self._inflight is not None and self._inflight[1] is task:
            self._inflight = None
