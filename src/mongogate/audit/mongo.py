"""The MongoDB audit sink's writer: a bounded queue and a background thread, so a request
never waits on (or fails because of) the audit database.

Events are inserted in batches by a synchronous client of their own (the read-write user's
URI) on the writer thread. When the database cannot take a batch (unreachable, refused), the
batch goes to the fallback (the audit file and stderr) and ``fallbacks`` counts its events;
for ``retry_s`` after a failure, batches go straight to the fallback instead of waiting on a
dead server again. A full queue sends the event to the fallback at once (counted), so
nothing is dropped silently. ``close()`` (at shutdown, and at interpreter exit) writes what
is queued. The thread and its queue are audit/queue.py's, shared with the file sink.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from pymongo import MongoClient
from pymongo.errors import BulkWriteError, PyMongoError

from mongogate.audit.queue import BackgroundQueue, QueuedSink
from mongogate.audit.store import COLLECTION, ensure_indexes, to_doc
from mongogate.connect import mongo_client

log = logging.getLogger(__name__)

#: a queued event and its line (what the fallback gets)
_Event = tuple[dict[str, Any], str]
_DUPLICATE = 11000


class MongoSink(QueuedSink[_Event]):
    """Insert audit events into ``<db>.audit_events``; ``fallback(lines)`` takes what it cannot.
    ``synced``, ``flush`` and ``close`` are QueuedSink's (audit/queue.py)."""

    def __init__(
        self,
        uri: str,
        db_name: str,
        fallback: Callable[[list[str]], None],
        *,
        queue_size: int = 10_000,
        timeout_ms: int = 5000,
        retention_days: int | None = 90,
        retry_s: float = 5.0,
    ) -> None:
        self._uri = uri
        self._db_name = db_name
        self._fallback = fallback
        self._max = queue_size
        self._timeout_ms = timeout_ms
        self._retention_days = retention_days
        self._retry_s = retry_s
        self._queue: BackgroundQueue[_Event] = BackgroundQueue(
            "mongogate-audit-db", self._write, stopped=self._close_client, batch=500
        )
        self._lock = threading.Lock()  # guards the depth count (taken before an event is queued)
        self._depth = 0
        self._client: MongoClient[dict[str, Any]] | None = None
        self._indexed = False
        self._down_until = 0.0
        #: events that went to the fallback instead of MongoDB (unreachable, refused, queue full)
        self.fallbacks = 0
        #: events inserted into MongoDB
        self.written = 0

    @property
    def depth(self) -> int:
        """Events waiting for the writer."""
        return self._depth

    # -- producers --------------------------------------------------------------------------

    def submit(self, event: dict[str, Any], line: str) -> None:
        """Queue the event; inside a running loop return at once, elsewhere once it is written.
        A full queue sends it to the fallback at once (counted)."""
        with self._lock:
            full = self._depth >= self._max
            if not full:
                self._depth += 1
        if full:
            self.fallbacks += 1
            self._fallback([line])
            return
        self._queue.submit((event, line))

    # -- on the queue's thread --------------------------------------------------------------

    def _write(self, events: list[_Event]) -> None:
        try:
            failed = self._insert(events)
            if failed:
                self.fallbacks += len(failed)
                try:
                    self._fallback(failed)
                except Exception:  # the fallback must not kill the writer
                    log.exception("audit fallback failed")
        finally:
            with self._lock:
                self._depth -= len(events)

    def _insert(self, events: list[tuple[dict[str, Any], str]]) -> list[str]:
        """Insert the batch; the lines of the events MongoDB did not take."""
        if time.monotonic() < self._down_until:
            return [line for _, line in events]
        docs = [to_doc(event, uuid.uuid4().hex) for event, _ in events]
        try:
            coll = self._collection()
            coll.insert_many(docs, ordered=False)
        except BulkWriteError as e:
            bad = {err["index"] for err in e.details.get("writeErrors", []) if err.get("code") != _DUPLICATE}
            self.written += len(events) - len(bad)
            return [events[i][1] for i in sorted(bad)]
        except PyMongoError as e:
            self._down_until = time.monotonic() + self._retry_s
            log.warning(
                "audit sink unreachable (%s: %s); %d event(s) written to the fallback file instead",
                type(e).__name__,
                str(e)[:300],
                len(events),
            )
            return [line for _, line in events]
        except (
            Exception
        ) as e:  # BSON cannot encode an event (a lone surrogate in a claim): never the writer's death
            if len(events) > 1:  # the others still go in, one by one
                return [line for one in events for line in self._insert([one])]
            log.warning(
                "audit event not storable in MongoDB (%s); written to the fallback file", type(e).__name__
            )
            return [events[0][1]]
        self.written += len(events)
        return []

    def _collection(self) -> Any:
        if self._client is None:
            self._client = mongo_client(self._uri, self._timeout_ms)
        coll = self._client[self._db_name][COLLECTION]
        if not self._indexed:
            ensure_indexes(coll, self._retention_days)
            self._indexed = True
        return coll

    def _close_client(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None
