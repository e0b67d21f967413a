"""`mongogate worker --metrics-port`: ticks by agent and status, lag and drift per agent."""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

from mongogate.assembly import run_worker
from mongogate.scheduler.agents import Agent, AgentRegistry, TickContext
from mongogate.scheduler.worker_metrics import WorkerMetrics
from tests.conftest import make_settings

pytestmark = pytest.mark.anyio


async def fine(ctx: TickContext) -> None:
    pass


async def broken(ctx: TickContext) -> None:
    raise RuntimeError("no coffee")


async def test_worker_metrics_count_ticks_by_agent_and_status(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings = make_settings(
        engine_uri,
        db_name,
        tmp_path,
        scheduler={"jitter_max_s": 0, "spread": False, "tick_timeout_s": 5, "idle_sleep_s": 0.1},
    )
    metrics = WorkerMetrics()
    agents = AgentRegistry([Agent("fine", fine, 3600), Agent("broken", broken, 3600)])
    # both are due at once, and a run's first pass always happens: one tick each
    await run_worker(settings, agents, duration_s=0.1, metrics=metrics)
    reg = metrics.registry
    assert reg.get_sample_value("mongogate_scheduler_ticks_total", {"agent": "fine", "status": "ok"}) == 1
    assert (
        reg.get_sample_value("mongogate_scheduler_ticks_total", {"agent": "broken", "status": "error"}) == 1
    )
    assert reg.get_sample_value("mongogate_scheduler_tick_drift_seconds_count", {"agent": "fine"}) == 1
    assert reg.get_sample_value("mongogate_scheduler_lag_seconds", {"agent": "fine"}) == 0  # next slot ahead

    server = metrics.serve(0, "127.0.0.1")
    try:
        async with httpx2.AsyncClient(timeout=30) as hc:
            r = await hc.get(f"http://127.0.0.1:{server.server_port}/metrics")
    finally:
        server.shutdown()
        server.server_close()
    assert r.status_code == 200 and 'mongogate_scheduler_ticks_total{agent="fine",status="ok"} 1.0' in r.text


async def test_every_registered_agent_has_a_lag_series_from_the_start(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings = make_settings(
        engine_uri,
        db_name,
        tmp_path,
        scheduler={"jitter_max_s": 0, "spread": False, "tick_timeout_s": 5, "idle_sleep_s": 0.1},
    )
    agents = AgentRegistry([Agent("fine", fine, 3600), Agent("broken", broken, 3600)])
    await run_worker(settings, agents, duration_s=0.1, metrics=WorkerMetrics())  # both ran: next in an hour
    metrics = WorkerMetrics()
    await run_worker(settings, agents, duration_s=0.1, metrics=metrics)  # nothing is due in this run
    reg = metrics.registry
    for key in ("fine", "broken"):
        assert reg.get_sample_value("mongogate_scheduler_lag_seconds", {"agent": key}) == 0, key
        assert reg.get_sample_value("mongogate_scheduler_ticks_total", {"agent": key, "status": "ok"}) is None
