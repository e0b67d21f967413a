"""What the scheduler stores per tenant: the investigations agents open (`investigations`,
each with its tenant). An agent's schedule (`agent_schedule`: its ticks' slots and outcomes)
and the workers (`agent_workers`) belong to the deployment, not to any tenant."""

from __future__ import annotations

from mongogate.erasure import Declared, Kept, Removed, Target
from mongogate.scheduler.documents import (
    INVESTIGATIONS_COLLECTION,
    SCHEDULE_COLLECTION,
    TENANT,
    WORKERS_COLLECTION,
)
from mongogate.values import Doc


def of_tenant(target: Target) -> Doc | None:
    return {TENANT: target.tenant} if target.subject is None else None


ERASURE = Declared(
    "scheduler",
    parts=(
        Removed(
            INVESTIGATIONS_COLLECTION,
            of_tenant,
            "holds no subject's documents: investigations belong to the tenant",
        ),
    ),
    kept=(
        Kept(SCHEDULE_COLLECTION, "one document per agent (its schedule, ticks and outcomes): no tenant"),
        Kept(WORKERS_COLLECTION, "one document per worker process: no tenant"),
    ),
)
