"""Capacity said: ticks due per second (from the schedule) against ticks run per second (measured
by the workers), and whether the fleet keeps up on this engine.

Each worker writes the rate it claimed ticks at since its previous heartbeat into its worker
document (`fleet.heartbeat`); the fleet's rate is the sum over live workers. The due rate is
the sum of ``1 / interval`` over active interval agents (cron and one-off agents are not
counted: their rate is not constant). A fleet is behind when it runs clearly fewer ticks than
fall due while some agent lags more than one interval behind its slot.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mongogate.scheduler.status import AgentStatus

#: run below this share of the due rate, with an agent a full interval behind: cannot keep up
KEEP_UP_SHARE = 0.9


@dataclass(frozen=True)
class Capacity:
    due_per_s: float
    run_per_s: float
    live_workers: int
    behind: bool

    def line(self) -> str:
        text = (
            f"capacity: {self.due_per_s:.2f} ticks due/s, {self.run_per_s:.2f} ticks run/s "
            f"by {self.live_workers} live worker(s)"
        )
        if self.behind:
            text += (
                "\nWARNING: the fleet cannot keep up on this engine (ticks run/s below ticks due/s and "
                "agents a full interval behind): fewer agents, longer intervals, or MongoDB "
                "(see docs/scheduler.md, capacity)"
            )
        return text


def due_rate(intervals: Iterable[float | None]) -> float:
    return sum(1.0 / i for i in intervals if i)


def assess(statuses: Sequence[AgentStatus], run_per_s: float, live_workers: int) -> Capacity:
    active = [st for st in statuses if st.state not in ("orphaned", "paused", "done")]
    due = due_rate(st.interval_s for st in active)
    lagging = any(st.interval_s and st.lag_s > st.interval_s for st in active)
    return Capacity(due, run_per_s, live_workers, behind=lagging and run_per_s < KEEP_UP_SHARE * due)
