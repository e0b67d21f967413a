"""Claims in batches: the due slots a worker read, claimed together with the outcomes of the ticks
that finished since its last write, in one `update` command of one statement per document.

Each statement is filtered by `_id` alone (the embedded engine's flat path) and carries its own
condition in its pipeline (the `next_run_at` and `due_at` the worker read): a claim either moves
its document or fails (`writes.when(..., fail=True)`), so of all the workers whose batches name
one slot exactly one moves it, and each learns from its reply alone which of its claims won: a
lost one is a write error at its index, every other one applied. Nothing is read back, whatever
won or lost. The command is unordered, so one lost claim does not stop the statements after it;
a tick's outcome and the next claim of the same agent in one batch touch different fields (the
outcome removes its own open claim, the claim adds another and is conditional on the schedule
only), so their order does not matter.

The outcomes wait in `Outcomes` (filled as ticks finish, emptied by the next write); a command that
fails puts them back, so none is lost to a failed command, and each is idempotent (the same
`$set`, the same `$unset`), so one written twice does no harm.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pymongo import UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import BulkWriteError, PyMongoError

from mongogate.errors import StorageError
from mongogate.scheduler import documents as sd
from mongogate.scheduler import writes
from mongogate.scheduler.slots import Claim
from mongogate.values import Doc

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Planned:
    """A claim about to be written: the slot it answers and its conditional update of `key`."""

    key: str
    claim: Claim
    update: list[Doc]


@dataclass(frozen=True)
class Outcome:
    """A finished tick's outcome, waiting for the next write."""

    key: str
    claim_id: str
    doc: sd.OutcomeDoc


class Outcomes:
    """The outcomes of finished ticks not written yet, in the order they finished."""

    def __init__(self) -> None:
        self._pending: list[Outcome] = []

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, key: str, claim_id: str, doc: sd.OutcomeDoc) -> None:
        self._pending.append(Outcome(key, claim_id, doc))

    def take(self) -> list[Outcome]:
        taken, self._pending = self._pending, []
        return taken

    def put_back(self, taken: list[Outcome]) -> None:
        """A write that failed: its outcomes go first in the next one."""
        self._pending = taken + self._pending

    def finished(self, key: str) -> frozenset[str]:
        """The claim ids of this agent whose tick finished here (its open claim is on the way out)."""
        return frozenset(o.claim_id for o in self._pending if o.key == key)


async def write(
    coll: AsyncCollection[Doc], planned: list[Planned], outcomes: list[Outcome]
) -> frozenset[str]:
    """Write `outcomes` and `planned` claims in one unordered command; the claim ids that won.

    Raises StorageError when the command fails or is not acknowledged as asked (the caller puts
    the outcomes back; a claim whose command failed is not run: if it took effect, its open claim
    expires and is counted as abandoned, as a dead worker's is)."""
    ops = [UpdateOne({sd.ID: o.key}, writes.outcome(o.claim_id, o.doc)) for o in outcomes]
    ops += [UpdateOne({sd.ID: p.key}, p.update) for p in planned]
    if not ops:
        return frozenset()
    failed: set[int] = set()
    try:
        await coll.bulk_write(ops, ordered=False)
    except BulkWriteError as e:
        if e.details.get("writeConcernErrors"):
            raise StorageError(f"tick claims not acknowledged: {e.details['writeConcernErrors']}") from e
        failed = {int(err["index"]) for err in e.details.get("writeErrors", [])}
        refused = sorted(i for i in failed if i < len(outcomes))
        if refused:  # an outcome by `_id` fails only when the database refuses it: never retried
            log.warning("%d tick outcome(s) refused: %s", len(refused), e.details["writeErrors"][:3])
    except PyMongoError as e:
        raise StorageError(f"could not claim ticks: {e}") from e
    first = len(outcomes)
    return frozenset(p.claim.claim_id for i, p in enumerate(planned, first) if i not in failed)
