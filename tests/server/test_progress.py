"""Progress notifications (issue 40 item 4): a call that reads a scope whole reports its progress
to a client that sent a progressToken (the SDK's real client, in-process and over HTTP), and the
reporter paces them by the injectable clock (mongogate.progress)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mongogate import progress
from mongogate.clock import ManualClock
from mongogate.recall.inprocess import cache
from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer
from tests.conftest import jwt_auth, make_settings
from tests.helpers import ok

pytestmark = pytest.mark.anyio

Seen = list[tuple[float, float | None, str | None]]


async def _recall_with_progress(c: Client) -> Seen:
    seen: Seen = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    result = await c.call_tool("recall", {"query": "where is the office"}, progress_callback=on_progress)
    assert not result.is_error
    return seen


async def _remember(c: Client, n: int) -> None:
    for i in range(n):
        await ok(c, "remember", text=f"fact number {i} about the office", key=f"fact.{i}")


async def test_a_first_recall_reports_reading_the_scope(
    engine_uri: str, db_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache, "STEP", 2)  # a step every 2 memories read (500 in production)
    settings = make_settings(engine_uri, db_name, tmp_path)
    async with Client(build_server(settings)) as writer:
        await _remember(writer, 5)
    async with Client(build_server(settings)) as c:  # a new server: its first recall reads the scope
        seen = await _recall_with_progress(c)
        assert [s[0] for s in seen] == [2, 4]  # the first step at once; the last one at the end
        assert all(m is not None and "recall index" in m for _, _, m in seen)
        assert await _recall_with_progress(c) == []  # the index is held: nothing long, nothing sent


async def test_progress_reaches_a_client_over_http(
    engine_uri: str, db_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache, "STEP", 2)
    settings = make_settings(engine_uri, db_name, tmp_path, auth=jwt_auth())
    token = mint_dev_token(settings.auth, tenant="acme", ttl_s=600, subject="svc")
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as writer:
        await _remember(writer, 4)
    with BackgroundHttpServer(build_server(settings, transport="http")) as http:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as hc,
            Client(streamable_http_client(http.url, http_client=hc)) as c,
        ):
            assert [s[0] for s in await _recall_with_progress(c)] == [2, 4]


async def test_the_reporter_sends_the_first_step_then_one_per_interval_and_the_last() -> None:
    clock = ManualClock()
    sent: Seen = []

    async def send(done: float, total: float | None, message: str | None) -> None:
        sent.append((done, total, message))

    reporter = progress.Reporter(send, clock)
    with progress.reporting(reporter):
        await progress.step(1, 10, "a")
        await progress.step(2, 10, "b")  # within the interval: held
        await progress.step(1, 10, "c")  # never backwards: nothing new
        clock.advance(ms=int(progress.INTERVAL.total_seconds() * 1000))
        await progress.step(3, 10, "d")
        await progress.step(4, 10, "e")
    await progress.step(9, 10, "outside")  # no reporter: nothing
    await reporter.finish()
    assert sent == [(1, 10, "a"), (3, 10, "d"), (4, 10, "e")] and reporter.sent == 3


async def test_a_failed_send_never_fails_the_work() -> None:
    async def gone(*_: Any) -> None:
        raise ConnectionResetError

    reporter = progress.Reporter(gone, ManualClock())
    await reporter.step(1)
    await reporter.finish()
    assert reporter.sent == 0
