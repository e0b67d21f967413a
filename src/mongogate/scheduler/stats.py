"""What one worker's run did: the counters `Scheduler.run` returns and `mongogate worker` prints."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SchedulerStats:
    claimed: int = 0
    #: claims lost to another worker (or no longer due): the cost of racing
    lost: int = 0
    ok: int = 0
    failed: int = 0
    timed_out: int = 0
    #: slots passed over by this worker's claims (coalesced, or past the misfire grace)
    missed_slots: int = 0
    #: claims that ran nothing: every due slot was past the misfire grace
    misfired: int = 0
    #: earlier claims found expired without an outcome (their worker died), counted by this worker
    abandoned: int = 0
    #: schedule documents of agents nobody registers, parked by this worker
    orphans_parked: int = 0
    #: scans of the schedule (each one bounded query)
    scans: int = 0
    max_drift_s: float = 0.0
    by_agent: dict[str, int] = field(default_factory=dict)
