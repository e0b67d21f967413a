"""What happened to a tick, as values: for an agent's listeners, the worker's log and its metrics.

Three outcomes an operator or an agent may act on: `success` (the tick returned), `failure`
(it raised, or its deadline cancelled it) and `missed` (slots passed over: coalesced, skipped
by the misfire grace, or lost with a dead worker's claim). The worker always logs each one on
the ``mongogate.scheduler.events`` logger (``outcome`` and ``ms`` are fields of the JSON log
line) and counts it in its metrics; an agent may also declare async listeners (``on_success``,
``on_failure``, ``on_missed``) that receive the same `TickEvent`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import anyio

Outcome = Literal["success", "failure", "missed"]

log = logging.getLogger(__name__)

#: how long a listener may take before it is cancelled (it must not hold the worker's slot)
LISTENER_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class TickEvent:
    agent_key: str
    outcome: Outcome
    #: the slot concerned (for `missed`: the newest slot passed over, when known)
    scheduled_at: datetime | None
    worker_id: str
    #: "ok", "error", "timeout" for a tick that ran; "coalesced", "misfired", "abandoned" for `missed`
    status: str
    error: str | None = None
    duration_s: float | None = None
    #: slots passed over (for `missed`)
    missed_slots: int = 0


Listener = Callable[[TickEvent], Awaitable[None]]


async def notify(listener: Listener | None, event: TickEvent) -> None:
    """Log the event and call the agent's listener; a failing or hanging listener is logged, never raised."""
    level = logging.WARNING if event.outcome != "success" else logging.DEBUG
    ms = None if event.duration_s is None else round(event.duration_s * 1000, 3)
    log.log(
        level,
        "agent %s %s (%s)%s",
        event.agent_key,
        event.outcome,
        event.status,
        f": {event.missed_slots} slot(s)" if event.outcome == "missed" else "",
        extra={"outcome": f"{event.outcome}:{event.status}", "ms": ms},
    )
    if listener is None:
        return
    try:
        with anyio.move_on_after(LISTENER_TIMEOUT_S) as scope:
            await listener(event)
        if scope.cancel_called:
            log.warning(
                "agent %s: %s listener exceeded %g s", event.agent_key, event.outcome, LISTENER_TIMEOUT_S
            )
    except Exception:
        log.error("agent %s: %s listener failed", event.agent_key, event.outcome, exc_info=True)
