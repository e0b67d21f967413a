"""limits.tenant_concurrency: one tenant's calls cannot take every slot (issue 19, fairness).

Over real HTTP with two tenants' tokens. A test-only tool, `hold`, is a failpoint: it signals
that it runs and then waits until the test lets it go (a threading.Event, since the server runs
on its own thread), so "a tenant's slots are all taken" is a fact, not a timing.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver.tools import Tool

from mongogate.config import Settings
from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer
from mongogate.server.tenant_limit import TenantConcurrency, TenantSlots
from mongogate.tools.base import Call, ToolInput, make_tool
from mongogate.tools.registry import ToolRegistry
from tests.conftest import jwt_auth, make_settings

pytestmark = pytest.mark.anyio


class Gate:
    """The failpoint: each `hold` call counts itself in and waits for `release`."""

    def __init__(self) -> None:
        self.entered = 0
        self.go = threading.Event()

    def tools(self, _settings: Settings) -> list[Tool]:
        async def hold(call: Call, _args: ToolInput) -> dict[str, Any]:
            self.entered += 1  # one server thread runs every handler: no lock needed
            await anyio.to_thread.run_sync(self.go.wait, abandon_on_cancel=True)
            return {"tenant": call.principal.tenant}

        return [make_tool(name="hold", description="test failpoint", input_model=ToolInput, handler=hold)]

    async def wait_entered(self, n: int) -> None:
        while self.entered < n:  # polled, bounded by the test timeout
            await anyio.sleep(0.005)


def slots_of(server: Any) -> TenantSlots:
    (limiter,) = [m for m in server.middleware if isinstance(m, TenantConcurrency)]
    return limiter.slots


@pytest.fixture
async def served(
    engine_uri: str, db_name: str, tmp_path: Path
) -> AsyncIterator[tuple[str, Gate, Settings, TenantSlots]]:
    limits = {"tenant_concurrency": 2, "tenant_queue": 1, "tenant_queue_timeout_ms": 600_000}
    settings = make_settings(engine_uri, db_name, tmp_path, auth=jwt_auth(), limits=limits)
    gate = Gate()
    registry = ToolRegistry(run_tools=False)
    registry.add_tools(gate.tools)
    mcp = build_server(settings, registry, transport="http")
    server = BackgroundHttpServer(mcp).start()
    try:
        yield server.url, gate, settings, slots_of(mcp)
    finally:
        gate.go.set()
        server.stop()


def _client(url: str, settings: Settings, tenant: str) -> tuple[httpx2.AsyncClient, Any]:
    token = mint_dev_token(settings.auth, tenant=tenant, ttl_s=600)
    hc = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120)
    return hc, Client(streamable_http_client(url, http_client=hc))


async def test_a_flooding_tenant_queues_then_gets_busy_and_another_tenant_is_not_held(
    served: tuple[str, Gate, Settings, TenantSlots],
) -> None:
    url, gate, settings, slots = served
    results: dict[str, Any] = {}

    async def call(key: str, tenant: str, tool: str = "hold") -> None:
        hc, client = _client(url, settings, tenant)  # one client per call: calls of one client queue
        async with hc, client as c:
            results[key] = await c.call_tool(tool, {})

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "a", "flood")
        tg.start_soon(call, "b", "flood")
        await gate.wait_entered(2)  # both of flood's slots are taken and held
        tg.start_soon(call, "queued", "flood")  # waits in flood's queue (one place)
        while slots.waiting("flood") < 1:  # polled until it is in the queue (the server's own table)
            await anyio.sleep(0.005)
        await call("over", "flood", "list_sessions")  # the queue is full: refused at once
        await call("quiet", "quiet", "list_sessions")  # the other tenant runs while flood is saturated
        assert gate.entered == 2  # the queued call has not run
        gate.go.set()  # flood's calls finish: the queued one then runs
    over = results["over"].content[0].text
    assert over.startswith("[busy] (retryable) ") and "limits.tenant_concurrency = 2" in over
    assert "limits.tenant_queue = 1" in over and "nothing was run" in over
    assert not results["quiet"].is_error
    for key in ("a", "b", "queued"):
        assert not results[key].is_error and results[key].structured_content == {"tenant": "flood"}
    assert gate.entered == 3


async def test_a_queued_call_that_waits_too_long_is_busy_and_releases_nothing() -> None:
    """The wait is bounded: the slot's holder never lets go, so a 1 ms wait ends in [busy]
    whatever the machine's speed; the table is empty once every call is gone."""
    slots = TenantSlots(concurrency=1, queue=4, wait_ms=1)
    await slots.acquire("t")
    from mongogate.errors import Busy

    with pytest.raises(Busy, match=r"waited 1 ms \(limits.tenant_queue_timeout_ms\)"):
        await slots.acquire("t")
    assert slots.running("t") == 1 and slots.waiting("t") == 0
    await slots.acquire("other")  # another tenant is never held by "t"
    slots.release("other")
    slots.release("t")
    assert slots.running("t") == 0 and slots._tenants == {}


async def test_a_released_slot_goes_to_the_first_waiter() -> None:
    slots = TenantSlots(concurrency=1, queue=4, wait_ms=600_000)
    await slots.acquire("t")
    order: list[int] = []

    async def wait(n: int) -> None:
        await slots.acquire("t")
        order.append(n)
        slots.release("t")

    async with anyio.create_task_group() as tg:
        for n in range(3):
            tg.start_soon(wait, n)
            while slots.waiting("t") < n + 1:
                await anyio.sleep(0)
        slots.release("t")
    assert order == [0, 1, 2] and slots._tenants == {}


async def test_prompts_and_resources_take_the_tenants_slots_like_tool_calls(
    served: tuple[str, Gate, Settings, TenantSlots],
) -> None:
    """A tenant whose slots and queue are full could still run resources/read, resources/list and
    prompts/get (each a context read up to limits.max_response_bytes) without limit: only
    tools/call took a slot."""
    from mcp.shared.exceptions import MCPError

    url, gate, settings, slots = served
    async with anyio.create_task_group() as tg:
        for _ in range(2):
            hc, client = _client(url, settings, "flood")

            async def hold(hc: Any = hc, client: Any = client) -> None:
                async with hc, client as c:
                    await c.call_tool("hold", {})

            tg.start_soon(hold)
        await gate.wait_entered(2)
        hq, queued = _client(url, settings, "flood")

        async def wait_in_queue() -> None:
            async with hq, queued as c:
                await c.call_tool("list_sessions", {})

        tg.start_soon(wait_in_queue)
        while slots.waiting("flood") < 1:
            await anyio.sleep(0.005)
        hc, client = _client(url, settings, "flood")
        async with hc, client as c:
            requests: tuple[Callable[[], Awaitable[object]], ...] = (
                lambda: c.list_resources(),
                lambda: c.read_resource("mongogate://sessions"),
                lambda: c.get_prompt("summarize_session", {"session_id": "s1"}),
            )
            try:
                for request in requests:
                    with pytest.raises(MCPError) as busy:
                        await request()
                    assert busy.value.error.message.startswith("[busy] (retryable) ")
                ho, other = _client(url, settings, "quiet")
                async with ho, other as q:
                    assert (await q.list_resources()).resources  # another tenant is not held
            finally:
                gate.go.set()
