"""What runs store per tenant: run checkpoints (`runs`), their events (`run_events`), and the
checkpoints of LangGraph threads (`lg_checkpoints`, `lg_writes`), fenced by run leases.

Every one carries `tenant` (the tenant alone: a run belongs to no subject). `mongogate.langgraph`
writes the last two; it sits above every layer and imports langgraph, so its collections are
declared here, beside the run leases that fence them (`tests/test_erase_declared.py` checks the
saver's names). A run's document goes before its events: a save still running finds its run
gone and appends no event after the erasure passed.
"""

from __future__ import annotations

from mongogate.erasure import Declared, Removed, Target
from mongogate.runs.documents import EVENTS_COLLECTION, RUNS_COLLECTION, TENANT
from mongogate.values import Doc

#: the LangGraph checkpointer's collections (`langgraph/saver.py`)
LG_CHECKPOINTS = "lg_checkpoints"
LG_WRITES = "lg_writes"

NO_SUBJECT = "holds no subject's documents: runs belong to the tenant"


def of_tenant(target: Target) -> Doc | None:
    return {TENANT: target.tenant} if target.subject is None else None


ERASURE = Declared(
    "runs",
    parts=(
        Removed(RUNS_COLLECTION, of_tenant, NO_SUBJECT),
        Removed(EVENTS_COLLECTION, of_tenant, NO_SUBJECT),
        Removed(LG_CHECKPOINTS, of_tenant, NO_SUBJECT),
        Removed(LG_WRITES, of_tenant, NO_SUBJECT),
    ),
)
