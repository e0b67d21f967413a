"""Per-tenant concurrency: one tenant's heavy calls cannot take every slot of the server.

``limits.tenant_concurrency`` requests of one tenant run at once on a server process (all its
tokens, MCP sessions and protocol revisions together): every request but the few answered from
memory without reading anything (`FREE`: the handshake, ping, discovery and the static lists),
so a method added later (a listen stream, were one ever served) is counted by default; up to
``limits.tenant_queue`` more wait for a slot, in arrival order, at most
``limits.tenant_queue_timeout_ms``; beyond either a call is refused at once with
``[busy] (retryable)`` and nothing runs. Other tenants never wait for these slots.

An SDK middleware placed after ObserveCalls (so a refusal is logged and counted under its code)
and before the query-call audit (a capacity refusal is no policy event, and a flood of them must
not flood the audit trail). A call without an authenticated tenant passes: the tool refuses it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR

from mongogate.config import LimitsSettings
from mongogate.errors import Busy, MongogateError
from mongogate.tools.base import error_result
from mongogate.tools.state import AppState, PendingState


@dataclass
class _Tenant:
    running: int = 0
    waiting: deque[asyncio.Future[None]] = field(default_factory=deque)


class TenantSlots:
    """A fair (FIFO) counting semaphore per tenant, with a bounded queue and a bounded wait."""

    def __init__(self, concurrency: int, queue: int, wait_ms: int) -> None:
        self.concurrency = concurrency
        self.queue = queue
        self.wait_s = wait_ms / 1000
        self._tenants: dict[str, _Tenant] = {}

    def running(self, tenant: str) -> int:
        t = self._tenants.get(tenant)
        return t.running if t is not None else 0

    def waiting(self, tenant: str) -> int:
        t = self._tenants.get(tenant)
        return len(t.waiting) if t is not None else 0

    def _busy(self, t: _Tenant, why: str) -> Busy:
        return Busy(
            f"your tenant already runs {t.running} requests at once (limits.tenant_concurrency = "
            f"{self.concurrency}) and {why}; nothing was run: retry in about 1 s"
        )

    async def acquire(self, tenant: str) -> None:
        t = self._tenants.setdefault(tenant, _Tenant())
        if t.running < self.concurrency and not t.waiting:
            t.running += 1
            return
        if len(t.waiting) >= self.queue or self.wait_s <= 0:
            raise self._busy(t, f"{len(t.waiting)} more are waiting (limits.tenant_queue = {self.queue})")
        slot: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        t.waiting.append(slot)
        try:
            with anyio.fail_after(self.wait_s):
                await asyncio.shield(slot)
        except BaseException as e:
            if slot.done() and not slot.cancelled():
                self.release(tenant)  # handed a slot as we gave up: pass it on
            else:
                slot.cancel()
                t.waiting.remove(slot)
                self._forget(tenant, t)
            if isinstance(e, TimeoutError):
                raise self._busy(
                    t, f"this call waited {self.wait_s * 1000:.0f} ms (limits.tenant_queue_timeout_ms)"
                ) from None
            raise

    def release(self, tenant: str) -> None:
        t = self._tenants[tenant]
        while t.waiting:
            slot = t.waiting.popleft()
            if not slot.done():
                slot.set_result(None)  # the slot moves to the next caller: running is unchanged
                return
        t.running -= 1
        self._forget(tenant, t)

    def _forget(self, tenant: str, t: _Tenant) -> None:
        if t.running == 0 and not t.waiting:  # the table holds only tenants with calls in flight
            self._tenants.pop(tenant, None)


#: requests answered from memory, reading nothing: the only ones that hold no slot (every other,
#: tool calls, prompt gets, resource reads and lists, and any method served later, holds one; a
#: refusal outside tools/call is a JSON-RPC error, not a tool result). Notifications hold none.
FREE = frozenset(
    {"initialize", "ping", "server/discover", "tools/list", "prompts/list", "resources/templates/list"}
)


def limited(method: str) -> bool:
    return method not in FREE and not method.startswith("notifications/")


class TenantConcurrency:
    """ServerMiddleware: each request but the `FREE` ones holds one of its tenant's slots while it
    runs."""

    def __init__(self, limits: LimitsSettings) -> None:
        self.slots = TenantSlots(
            limits.tenant_concurrency, limits.tenant_queue, limits.tenant_queue_timeout_ms
        )

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if not limited(ctx.method):
            return await call_next(ctx)
        app = ctx.lifespan_context
        try:
            tenant = app.principal(ctx).tenant if isinstance(app, AppState | PendingState) else None
        except MongogateError:
            tenant = None
        if tenant is None:
            return await call_next(ctx)
        try:
            await self.slots.acquire(tenant)
        except Busy as e:
            if ctx.method != "tools/call":
                raise MCPError(code=INTERNAL_ERROR, message=f"[{e.code}] (retryable) {e}") from e
            return error_result(e)
        try:
            return await call_next(ctx)
        finally:
            self.slots.release(tenant)
