"""Prometheus metrics of a worker (``mongogate worker --metrics-port N``): ticks, lag, drift per agent.

Labels are agent keys (the registered agents: bounded) and tick statuses. ``lag`` is how far
behind its slot an agent is when the loop sees it due (0 once its next slot is ahead); every
registered agent has a lag series from the moment the worker starts (from its schedule
document), so an agent that never runs can still be alerted on;
``drift`` is how late each tick was claimed after its slot.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

DRIFT_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)


class WorkerMetrics:
    """What the loop (scheduler/loop.py) reports through ``Scheduler.observer`` (a ``host.LoopObserver``)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.ticks = Counter(
            "mongogate_scheduler_ticks", "Ticks run by agent and status (ok, error, timeout)",
            ["agent", "status"], registry=r,
        )  # fmt: skip
        self.lag = Gauge(
            "mongogate_scheduler_lag_seconds", "How far behind its slot the agent is when seen due",
            ["agent"], registry=r,
        )  # fmt: skip
        self.drift = Histogram(
            "mongogate_scheduler_tick_drift_seconds", "How late each tick was claimed after its slot",
            ["agent"], buckets=DRIFT_BUCKETS, registry=r,
        )  # fmt: skip
        self.missed = Counter(
            "mongogate_scheduler_missed_slots", "Slots passed over (catch_up = skip)", ["agent"], registry=r
        )
        self.duration = Histogram("mongogate_scheduler_tick_seconds", "Tick run time", ["agent"], registry=r)
        self.misfired = Counter(
            "mongogate_scheduler_misfired",
            "Ticks skipped: later than the misfire grace",
            ["agent"],
            registry=r,
        )
        self.abandoned = Counter(
            "mongogate_scheduler_abandoned",
            "Claimed ticks that never reported (their worker died), found by this worker",
            ["agent"],
            registry=r,
        )

        self.due_rate = Gauge(
            "mongogate_scheduler_ticks_due_per_second",
            "Ticks falling due per second (interval agents this worker registers)",
            registry=r,
        )
        self.run_rate = Gauge(
            "mongogate_scheduler_ticks_run_per_second",
            "Ticks the live workers claimed per second (fleet-wide, at their last heartbeats)",
            registry=r,
        )
        self.behind = Gauge(
            "mongogate_scheduler_fleet_behind",
            "1 when the fleet cannot keep up on this engine (run/s below due/s, agents an interval late)",
            registry=r,
        )

    def capacity(self, due_per_s: float, run_per_s: float, behind: bool) -> None:
        self.due_rate.set(due_per_s)
        self.run_rate.set(run_per_s)
        self.behind.set(1 if behind else 0)

    def due(self, agent: str, lag_s: float) -> None:
        self.lag.labels(agent).set(max(lag_s, 0.0))

    def claimed(self, agent: str, drift_s: float, missed_slots: int) -> None:
        self.drift.labels(agent).observe(max(drift_s, 0.0))
        if missed_slots:
            self.missed.labels(agent).inc(missed_slots)

    def lost_ticks(self, agent: str, misfired: int, abandoned: int) -> None:
        if misfired:
            self.misfired.labels(agent).inc(misfired)
        if abandoned:
            self.abandoned.labels(agent).inc(abandoned)

    def finished(
        self, agent: str, status: str, seconds: float, next_run_at: datetime | None, now: datetime
    ) -> None:
        self.ticks.labels(agent, status).inc()
        self.duration.labels(agent).observe(seconds)
        if next_run_at is None or next_run_at > now:
            self.lag.labels(agent).set(0.0)

    def serve(self, port: int, host: str) -> Any:
        """Serve ``/metrics`` on a thread; returns the server (stop: ``shutdown()``, ``server_close()``)."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server
