"""Start-up migrations that run until they find nothing left to do, then never again.

A start used to send, whatever the data: the back-fill of `sessions.last_activity` (an
`update_many`) and a probe per collection for documents under an older version's ids (messages,
summaries, run events). Each is a step: it runs, and once it finds nothing left (every session
has `last_activity`; no ObjectId `_id` is left) it is recorded in one marker document,
`memory_meta` `{_id: "migrations", <step>: <version that recorded it>}`, read by `_id` once per
start (`Migrations`, shared by the services' `ensure_indexes`). A step that found older
documents left is not recorded: it runs at every start until they are gone (retention,
`delete_session`), as before.

An older version started on the database after the marker was written (one before derived ids:
the only ones that write what these steps look for) re-creates at its start the unique indexes
this version retires (`session_key_unique`, `run_seq_unique`, recall's `OLD_UNIQUE`), and every
start reads those collections' indexes anyway: a step whose collection holds its retired index
runs again, so what that version wrote is found (docs/decisions/startup-and-config.md). Such a
step's record is removed (`reopen`) before its sign is dropped: a start killed in between leaves
the step un-recorded, so the next start runs it though the index is gone. Long-term memory's
signs are read before the marker (`assembly.ensure_memory_indexes`): its index is dropped while
uuid memories remain, so a start racing another sees the index or the un-record.
Deleting the marker makes the next start run every step.
"""

from __future__ import annotations

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from mongogate.values import Doc
from mongogate.version import __version__

#: the collection of mongogate's own bookkeeping documents (no tenant's data)
META = "memory_meta"
MARKER = "migrations"

#: the steps: every session has `last_activity`; no message, summary or run event under an ObjectId
SESSION_ACTIVITY = "session_activity"
MESSAGE_IDS = "message_ids"
SUMMARY_IDS = "summary_ids"
RUN_EVENT_IDS = "run_event_ids"
#: no memory under a uuid (long-term memory also keeps its own `legacy_ids` document, recall/ids.py)
MEMORY_IDS = "memory_ids"


class Migrations:
    """The steps recorded as done on one database: the marker read at the first question, once."""

    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self.db = db
        self._done: set[str] | None = None

    async def done(self, step: str) -> bool:
        if self._done is None:
            marker = await self.db[META].find_one({"_id": MARKER})
            self._done = set(marker or {}) - {"_id"}
        return step in self._done

    async def record(self, step: str) -> None:
        """`step` found nothing left to do: later starts skip it."""
        await self._change({"$set": {step: __version__}})
        if self._done is not None:
            self._done.add(step)

    async def settle(self, step: str, left: bool) -> None:
        """What `step` found: nothing ``left`` (recorded), or older documents (the record, if any,
        removed: the sign that sent it looking may be gone at the next start, recall's indexes)."""
        if not left:
            await self.record(step)
        else:
            await self.reopen(step)

    async def reopen(self, step: str) -> None:
        """`step` must run until it records again: called before its sign (an older version's
        retired index) is dropped, so a start killed between the drop and the step's record
        leaves the step to the next start instead of skipped for good."""
        if await self.done(step):
            await self._change({"$unset": {step: ""}})
            assert self._done is not None
            self._done.discard(step)

    async def _change(self, change: Doc) -> None:
        try:
            await self.db[META].update_one({"_id": MARKER}, change, upsert=True)
        except DuplicateKeyError:  # another start inserted the marker first: it is there now
            await self.db[META].update_one({"_id": MARKER}, change)

    async def needed(self, step: str, retired_index: bool) -> bool:
        """Whether `step` runs: not recorded, or an older version has started since (its retired
        unique index is back)."""
        return retired_index or not await self.done(step)
