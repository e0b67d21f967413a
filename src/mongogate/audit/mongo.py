"""The MongoDB audit sink's writer: a bounded queue and a background thread, so a request
never waits on (or fails because of) the audit database.

Events are inserted in batches by a synchronous client of their own (the read-write user's
URI) on the writer thread. When the database cannot take a batch (unreachable, refused), the
batch goes to the fallback (the audit file and stderr) and ``fallbacks`` counts its events;
for ``retry_s`` after a failure, batches go straight to the fallback instead of waiting on a
dead server again. A full queue sends the event to the fallback at once (counted), so
nothing is dropped silently. ``close()`` (at shutdown, and at interpreter exit) writes what
is queued.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from queue import Empty, SimpleQueue
from typing import Any

from pymongo import MongoClient
from pymongo.errors import BulkWriteError, PyMongoError

from mongogate.audit.file import resolve_future
from mongogate.audit.store import COLLECTION, ensure_indexes, to_doc

log = logging.getLogger(__name__)

#: a queued item: (event, its line for the fallback) or None (a sync marker), and a callback
_Item = tuple[tuple[dict[str, Any], str] | None, Callable[[], None] | None]
_STOP: Any = object()
_DUPLICATE = 11000

_live: weakref.WeakSet[MongoSink] = weakref.WeakSet()


class MongoSink:
    """Insert audit events into ``<db>.audit_events``; ``fallback(lines)`` takes what it cannot."""

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
        self._queue: SimpleQueue[Any] = SimpleQueue()
        self._lock = threading.RLock()  # RLock: the shutdown path writes inline while holding it
        self._depth = 0
        self._thread: threading.Thread | None = None
        self._client: MongoClient[dict[str, Any]] | None = None
        self._indexed = False
        self._down_until = 0.0
        #: events that went to the fallback instead of MongoDB (unreachable, refused, queue full)
        self.fallbacks = 0
        #: events inserted into MongoDB
        self.written = 0
        _live.add(self)

    @property
    def depth(self) -> int:
        """Events waiting for the writer."""
        return self._depth

    # -- producers --------------------------------------------------------------------------

    def submit(self, event: dict[str, Any], line: str) -> None:
        """Queue the event; inside a running loop return at once, elsewhere once it is written."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            done = threading.Event()
            self._offer(event, line, done.set)
            done.wait()
            return
        self._offer(event, line, None)

    def _offer(self, event: dict[str, Any], line: str, callback: Callable[[], None] | None) -> None:
        with self._lock:
            full = self._depth >= self._max
            if not full:
                self._depth += 1
                self._put_locked(((event, line), callback))
        if full:
            self.fallbacks += 1
            self._fallback([line])
            if callback is not None:
                callback()

    async def synced(self) -> None:
        """Wait (without blocking the loop) until every event queued so far is written or fallen back."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is waiting
                loop.call_soon_threadsafe(resolve_future, future)

        with self._lock:
            self._put_locked((None, wake))
        await future

    def flush(self) -> None:
        done = threading.Event()
        with self._lock:
            self._put_locked((None, done.set))
        done.wait()

    def close(self) -> None:
        """Write what is queued, close the client and stop the thread (a later event restarts it)."""
        with self._lock:
            thread = self._thread
            if thread is None:
                return
            self._queue.put(_STOP)
        thread.join()

    def _put_locked(self, item: Any) -> None:
        self._queue.put(item)
        if self._thread is None:
            thread = threading.Thread(target=self._run, name="mongogate-audit-db", daemon=True)
            try:
                thread.start()
            except RuntimeError:  # interpreter shutting down: write on this thread instead
                self._queue.put(_STOP)
                self._run()
                return
            self._thread = thread

    # -- the writer thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            with contextlib.suppress(Empty):
                while len(batch) < 500:
                    batch.append(self._queue.get_nowait())
            stop = any(item is _STOP for item in batch)
            items = [item for item in batch if item is not _STOP]
            self._write(items)
            if stop:
                with self._lock:
                    self._close_client()
                    self._thread = None
                    if not self._queue.empty():  # events queued behind the stop: a new thread
                        self._put_locked((None, None))
                return

    def _write(self, items: list[_Item]) -> None:
        events = [payload for payload, _ in items if payload is not None]
        if events:
            failed = self._insert(events)
            if failed:
                self.fallbacks += len(failed)
                try:
                    self._fallback(failed)
                except Exception:  # the fallback must not kill the writer
                    log.exception("audit fallback failed")
            with self._lock:
                self._depth -= len(events)
        for _, callback in items:
            if callback is not None:
                callback()

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
            self._client = MongoClient(
                self._uri,
                serverSelectionTimeoutMS=self._timeout_ms,
                connectTimeoutMS=self._timeout_ms,
                tz_aware=True,
            )
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


@atexit.register
def _close_all() -> None:
    for sink in list(_live):
        sink.close()
