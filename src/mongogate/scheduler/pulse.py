"""What a worker's loop tells the fleet and reads of it, per worker and never per tick.

- its heartbeat: every `heartbeat_every` (a quarter of `worker_ttl_s`, 1 to 10 s) one write by
  `_id` of the rate it claimed ticks at, into its `agent_workers` document;
- the split of the agents over the claiming workers (`partition.py`): the workers collection (as
  small as the fleet) read at most once a second, so a worker that joins or leaves moves it at
  once, and again right after each heartbeat;
- the fleet's capacity, said at each heartbeat from that read and from the oldest due slot the
  loop's last scan saw (no read of its own): ticks due/s against run/s to the observer, and a
  warning when the fleet cannot keep up.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from datetime import datetime, timedelta

import anyio

from mongogate.scheduler import fleet
from mongogate.scheduler.capacity import KEEP_UP_SHARE, due_rate
from mongogate.scheduler.kinds import Every
from mongogate.scheduler.partition import Partition, claiming, partition
from mongogate.scheduler.store import ClaimStore

log = logging.getLogger(__name__)

#: how often the split is read again (the workers collection)
SPLIT_EVERY_S = 1.0

#: what capacity is reported to: (ticks due/s, ticks run/s, behind)
CapacityReport = Callable[[float, float, bool], None]


class Pulse:
    """One worker's heartbeat, its view of the split, and the capacity it says (module docstring)."""

    def __init__(self, store: ClaimStore, report: CapacityReport | None = None) -> None:
        self.store = store
        self.report = report
        ttl = store.settings.worker_ttl_s
        self.heartbeat_every = timedelta(seconds=max(1.0, min(10.0, ttl / 4)))
        # Agents split over the claiming workers seen within three heartbeats; another worker's
        # agent is taken once its tick waited as long (`partition`).
        self.takeover_s = 3 * self.heartbeat_every.total_seconds()
        every = (a.schedule.seconds if isinstance(a.schedule, Every) else None for a in store.agents)
        self.due_per_s = due_rate(every)
        self._fastest = min(
            (a.schedule.seconds for a in store.agents if isinstance(a.schedule, Every)), default=None
        )
        self._last_beat = store.clock.now()
        self._beat_claimed = 0
        self._part: Partition | None = None
        # the split's age in monotonic seconds, not the injectable clock: a clock that stands still
        # (a test's, or a paused VM's) must not freeze a stale split in which every worker leaves an
        # agent to another and none claims it (seen with four workers started on one busy core)
        self._split_at = 0.0
        self._fleet: fleet.Fleet | None = None
        #: the oldest due slot the loop's last scan from the start saw (None: nothing due)
        self.oldest: datetime | None = None

    async def start(self, now: datetime) -> None:
        """This worker claims from now on (a rate of 0 in its document: the others split with it)."""
        self._last_beat = now
        await fleet.heartbeat(self.store.db, self.store.worker_id, now, 0.0)
        self._split_at = anyio.current_time()

    async def leave(self) -> None:
        """A stopping worker stops claiming: the others take its share at their next read."""
        await fleet.leave(self.store.db, self.store.worker_id)

    async def split(self, now: datetime) -> Partition:
        """The split of the agents over the claiming workers, read again at most once a second."""
        if self._part is None or anyio.current_time() - self._split_at >= SPLIT_EVERY_S:
            store = self.store
            live = self._fleet = await fleet.read_fleet(store.db, now, store.settings.worker_ttl_s)
            takeover = self.takeover_s
            self._part = partition(store.worker_id, claiming(live.claimers, now, takeover), takeover)
            self._split_at = anyio.current_time()
        return self._part

    async def beat(self, now: datetime, claimed: int) -> None:
        """Every heartbeat interval: the claim rate since the last one (`claimed` is this worker's
        total), the workers read again with it, and the capacity said."""
        if now - self._last_beat < self.heartbeat_every:
            return
        rate = (claimed - self._beat_claimed) / max((now - self._last_beat).total_seconds(), 1e-3)
        await fleet.heartbeat(self.store.db, self.store.worker_id, now, rate)
        self._last_beat, self._beat_claimed = now, claimed
        self._split_at = -math.inf  # the fleet with this rate in it: read now, and split by it
        await self.split(now)
        self._say_capacity(now)

    def _say_capacity(self, now: datetime) -> None:
        """Fleet-wide ticks due/s against run/s; behind when the fleet's workers run clearly fewer
        ticks than fall due and the oldest due slot is an interval late."""
        known = self._fleet
        if known is None:
            return
        at, fastest = self.oldest, self._fastest
        late = at is not None and fastest is not None and (now - at).total_seconds() > fastest
        behind = late and known.run_per_s < KEEP_UP_SHARE * self.due_per_s
        if self.report is not None:
            self.report(self.due_per_s, known.run_per_s, behind)
        if behind:
            log.warning(
                "worker %s: the fleet cannot keep up on this engine: %.2f ticks due/s, "
                "%.2f run/s by %d worker(s)",
                self.store.worker_id,
                self.due_per_s,
                known.run_per_s,
                known.live_workers,
            )
