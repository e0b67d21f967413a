"""Which due ticks a worker claims first: agents split over the live workers by a stable hash.

Every worker claims through the same conditional write, so two workers never run one tick; the
partition only keeps them from racing for the same documents (each lost race is a wasted write
and, on the embedded engine, a second and third worker used to lower throughput). A worker
claims the agents whose hash falls to it among the claiming workers (`agent_workers` documents
of workers that run the loop, seen within `takeover_s`, itself included, sorted by id), and any
other agent once its tick has waited `takeover_s` past its time. So a worker that died drops out
of the split once it has been silent for `takeover_s` (its agents then fall to the others
outright), and a worker whose view of the fleet is behind never leaves a tick unclaimed for
longer than that.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime


def bucket(key: str, n: int) -> int:
    """The agent's share among `n` workers (sha256: the same in every process, unlike `hash()`)."""
    return int.from_bytes(hashlib.sha256(b"partition:" + key.encode()).digest()[:8], "big") % n


@dataclass(frozen=True)
class Partition:
    worker_id: str
    #: the live workers' ids, sorted (this worker among them)
    owners: tuple[str, ...]
    #: another worker's agent is claimed once its tick has waited this long past its time
    takeover_s: float

    def owns(self, key: str) -> bool:
        return len(self.owners) <= 1 or self.owners[bucket(key, len(self.owners))] == self.worker_id

    def may_claim(self, key: str, ready_at: datetime | None, now: datetime) -> bool:
        if self.owns(key):
            return True
        return ready_at is not None and (now - ready_at).total_seconds() >= self.takeover_s


def partition(worker_id: str, live: Iterable[str], takeover_s: float) -> Partition:
    return Partition(worker_id, tuple(sorted({*live, worker_id})), takeover_s)


def claiming(claimers: Iterable[tuple[str, datetime]], now: datetime, takeover_s: float) -> list[str]:
    """The workers seen within `takeover_s` (a worker silent for longer is out of the split)."""
    return [wid for wid, seen in claimers if (now - seen).total_seconds() <= takeover_s]
