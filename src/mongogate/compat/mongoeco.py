"""The embedded engine's internals (mongoeco 4.11; the ``embedded`` extra pins ``mongoeco==4.11.*``
and tests/test_compat.py pins each member used here).

``UnixProxyServer``: mongoeco's wire server on a Unix domain socket instead of a loopback TCP port.

A TCP port on 127.0.0.1 is open to every local user: before any login, mongoeco reads a whole
message of up to 48 MB (checksummed in pure Python on its only event loop) and keeps SCRAM
conversations for anyone, so one unauthenticated process could stall every tenant. A socket
inside the engine's 0700 data directory is reachable only by the directory's owner (and root):
the kernel refuses everyone else at ``connect``, before mongoeco sees a byte.

mongoeco 4.11 binds TCP only (``asyncio.start_server(host, port)`` in ``start``); this subclass
replaces that one call with ``asyncio.start_unix_server`` and keeps the rest of its lifecycle.
It reads and sets the proxy's private lifecycle (``_lifecycle_lock``, ``_server``,
``_owns_client``, ``_engine_connected``, ``_client._engine``, ``_accept_connection``,
``_diagnostics``, ``_update_diagnostic_resources``, ``_close_resources``) and calls the private
module's ``mongoeco.wire._lifecycle.finish_cleanup``, exactly as mongoeco's own ``start`` does.

``open_connections``: the proxy's ``_connections`` (mongoeco has no public count).

``FlatInsertEngine``: mongoeco's SQLite engine without a redundant whole-collection scan on insert.
Every ``insert_one`` / ``insert_many`` calls the private
``SQLiteEngine._validate_document_against_unique_indexes`` with ``scan_payload_id=True``, which
decodes every stored document to compare ``_id`` values by BSON equality. That scan exists for
numeric ids (``1``, ``1.0`` and ``Int64(1)`` are one ``_id`` but three storage keys); for a string
or an ObjectId the storage key (``repr`` of the canonical id) is exact, and the engine's own
SQL lookup of that key, which still runs, already refuses a duplicate (E11000). Measured at
10,000 documents of 1 KB: an insert by string ``_id`` 74.8 ms with the scan, 2.2 ms without
(2.3 ms at 1,000: flat); benchmarks/engine_writes.py. Numeric and compound ids keep the scan.

``SessionSafeEngine``: mongoeco's SQLite engine that rolls back a write whose session ended while
it ran. Every write runs in a write scope on the engine's one shared connection: ``BEGIN
IMMEDIATE``, the write, ``COMMIT``, and on an error the private ``SQLiteEngine._rollback_write``.
Both the write and that rollback first check the write's session; a session ended meanwhile (the
driver's ``endSessions`` when a client closes while its write is in flight: a worker stopped by
SIGTERM in the middle of an ``insert_many``) fails the write, and then fails the rollback too, so
the connection stayed inside the ``BEGIN IMMEDIATE`` for good. Every later write then ran in a
savepoint of that transaction (committed by nothing: lost if the engine stopped), and every
write's change dispatch, run on the engine's event loop, waited the SQLite busy timeout (5 s)
for the write lock: the engine answered one command per 5 s. Seen: the next worker registering
5,000 agents wrote nothing for 142 s (issue 38); reproduced at 1 restart in 4, and with the
rollback of an ended session done without it, 0 in 40 (docs/decisions/engine-writes.md). The
override rolls back as a write without a session (its own savepoint, or the transaction it
began); a session still in use keeps mongoeco's checks. It reads ``has_ended`` of mongoeco's
``ClientSession`` (pinned).

``FastIdEngine``: FlatInsertEngine that also reads a find of one document by a string or
ObjectId ``_id`` with the engine's own primary-key read (``_get_document_sync``: one SQL lookup
of the storage key, the TTL purge and ``apply_projection`` as the scan does) instead of the scan
reader (registered, opened, batched, closed), and runs it on the engine's own loop when the
engine's lock is free (a lookup of microseconds, where a worker job costs two thread switches on
a busy machine); when a write holds the lock it waits on a worker as before, so the loop never
blocks; and only when the TTL purge every read starts with would delete nothing (no TTL index, or
none of its entries due: the purge's own candidate query, ``TTL_DUE``, under the same lock), since
a purge is a write of any size (3,000 expired documents took 0.34 s on the loop, every ping waiting
as long). Only when nothing else could change the answer: outside a transaction (any session, any read
concern answers as the scan does: checked by a red-team pass), limit 1, no skip, sort,
hint, collation, text query or time limit, a filter of exactly
``{"_id": id}``, and a projection of inclusions, exclusions and ``$slice`` only (a positional or
``$elemMatch`` projection reads the filter). Anything else, numeric and compound ids included,
takes the original path. It reads and calls ``_lock``, ``_get_document_sync``,
``_record_operation_metadata``, ``_load_indexes``, ``_require_connection`` and
``_lookup_collection_id`` (pinned). Measured: a ``find_one`` by ``_id`` of a revision document
0.88 ms against 1.09-1.26 ms (p50 of 400, interleaved, a ``ping`` 0.36-0.47 ms); through a worker
without the scan reader it was no faster (1.01-1.22 ms); docs/decisions/recall-index.md.
"""

from __future__ import annotations

import asyncio
import datetime
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bson import ObjectId
from mongoeco.engines.sqlite import SQLiteEngine
from mongoeco.wire import AsyncMongoEcoProxyServer
from mongoeco.wire._lifecycle import finish_cleanup

#: the private member FlatInsertEngine overrides (pinned in tests/test_compat.py)
UNIQUE_CHECK = "_validate_document_against_unique_indexes"
#: where every write scope begins its transaction (`BEGIN IMMEDIATE`, or a savepoint): the tests'
#: failpoint for a write held inside its transaction (pinned in tests/test_compat.py)
BEGIN_WRITE = "_begin_write"
#: the candidate query of SQLiteEngine._purge_expired_documents_sync (pinned in tests/test_compat.py)
TTL_DUE = "SELECT 1 FROM ttl_index_entries WHERE collection_id = ? AND expires_at_epoch_ms <= ? LIMIT 1"


class SessionSafeEngine(SQLiteEngine):
    """SQLiteEngine that rolls back a write whose session ended while it ran (module docstring),
    instead of leaving the shared connection inside its transaction."""

    def _rollback_write(self, conn: Any, context: Any) -> None:
        if context is not None and getattr(context, "has_ended", False):
            context = None  # its client is gone: undo the write as one without a session
        super()._rollback_write(conn, context)


class FlatInsertEngine(SessionSafeEngine):
    """SQLiteEngine whose inserts by a string or ObjectId ``_id`` skip the payload scan (module
    docstring): an insert then costs the same at 10,000 documents as at 1,000."""

    def _validate_document_against_unique_indexes(
        self,
        db_name: str,
        coll_name: str,
        document: Any,
        *,
        exclude_storage_key: str | None = None,
        skip_id_check: bool = False,
        scan_payload_id: bool = False,
    ) -> None:
        if scan_payload_id and isinstance(document.get("_id"), (str, ObjectId)):
            scan_payload_id = False
        super()._validate_document_against_unique_indexes(
            db_name,
            coll_name,
            document,
            exclude_storage_key=exclude_storage_key,
            skip_id_check=skip_id_check,
            scan_payload_id=scan_payload_id,
        )


def by_id(semantics: Any, context: object) -> str | ObjectId | None:
    """The `_id` of a find the primary-key read answers exactly as the scan would (module
    docstring), else None."""
    operation = semantics.operation_context
    plain = (
        operation is not None
        and operation.session is context  # mongoeco 4.11 passes the read's own session: a read
        # whose operation names another one takes the scan
        and not getattr(context, "in_transaction", False)
        and semantics.limit == 1
        and not semantics.skip
        and semantics.sort is None
        and semantics.hint is None
        and semantics.collation is None
        and semantics.text_query is None
        and semantics.max_time_ms is None
        and plain_projection(semantics.projection)
    )
    f = semantics.filter_spec
    if not plain or not isinstance(f, dict) or len(f) != 1:
        return None
    doc_id = f.get("_id")
    return doc_id if isinstance(doc_id, (str, ObjectId)) else None


def plain_projection(projection: object) -> bool:
    """None, or only inclusions, exclusions and `$slice` (none reads the filter)."""
    if projection is None:
        return True
    if not isinstance(projection, dict):
        return False
    for key, value in projection.items():
        if not isinstance(key, str) or "$" in key:
            return False
        if isinstance(value, dict):
            if set(value) != {"$slice"}:
                return False
        elif not isinstance(value, (bool, int)):
            return False
    return True


class FastIdEngine(FlatInsertEngine):
    """FlatInsertEngine whose finds of one document by a string or ObjectId `_id` take the
    engine's primary-key read (module docstring)."""

    #: False: every find takes mongoeco's scan (benchmarks/recall_call_path.py compares the two)
    primary_key_reads = True

    def scan_find_semantics(
        self, db_name: str, coll_name: str, semantics: Any, *, context: Any = None
    ) -> Any:
        doc_id = by_id(semantics, context) if self.primary_key_reads else None
        if doc_id is None:
            return super().scan_find_semantics(db_name, coll_name, semantics, context=context)
        return self._one(db_name, coll_name, doc_id, semantics, context)

    async def _one(
        self, db_name: str, coll_name: str, doc_id: Any, semantics: Any, context: Any
    ) -> AsyncIterator[Any]:
        self._record_operation_metadata(  # as the scan does: the session's last operation
            context, operation="scan_collection", comment=semantics.comment, max_time_ms=None, hint=None
        )
        operation = semantics.operation_context
        doc: Any = None
        on_loop = self._lock.acquire(blocking=False)
        if on_loop:
            try:  # the lock was free: a lookup of microseconds, no hop to a worker and back
                on_loop = self._nothing_to_purge(db_name, coll_name, operation)
                if on_loop:
                    doc = self._get_document_sync(
                        db_name, coll_name, doc_id, semantics.projection, operation_context=operation
                    )
            finally:
                self._lock.release()
        if not on_loop:  # a write holds the engine, or the read's TTL purge would delete: a worker
            doc = await self.get_document(
                db_name, coll_name, doc_id, projection=semantics.projection, operation_context=operation
            )
        if doc is not None:
            yield doc

    def _nothing_to_purge(self, db_name: str, coll_name: str, operation: Any) -> bool:
        """The TTL purge every read starts with would delete nothing: no TTL index, or none of its
        entries due by the read's own clock (the purge's candidate query, under the same lock). A
        purge is a write of any size (3,000 expired documents: 0.34 s), never on the loop."""
        try:
            if not any(
                index.expire_after_seconds is not None for index in self._load_indexes(db_name, coll_name)
            ):
                return True
            conn = self._require_connection(operation.session)
            collection_id = self._lookup_collection_id(conn, db_name, coll_name)
        except Exception:  # the worker's read raises what the engine raises
            return False
        if collection_id is None:
            return True
        cutoff = int(operation.expressions.now.replace(tzinfo=datetime.UTC).timestamp() * 1_000)
        return conn.execute(TTL_DUE, (collection_id, cutoff)).fetchone() is None


class UnixProxyServer(AsyncMongoEcoProxyServer):  # type: ignore[misc]
    """Serve the wire protocol on ``path`` (made 0600; a stale socket there is replaced, and removed
    again on close)."""

    def __init__(self, path: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = path

    async def start(self) -> Any:
        async with self._lifecycle_lock:
            if self._server is not None:  # type: ignore[has-type]
                return self.path
            try:
                if self._owns_client:
                    self._engine_connected = True
                    await self._client._engine.connect()
                server = await asyncio.start_unix_server(
                    self._accept_connection, path=str(self.path), start_serving=False
                )
                self._server = server
                os.chmod(self.path, 0o600)  # the directory (0700) already keeps others out
                await server.start_serving()
                self._diagnostics.record("server_started")
                self._update_diagnostic_resources()
            except BaseException as error:
                try:
                    await finish_cleanup(self._close_resources())
                except BaseException as cleanup_error:
                    error.add_note(f"proxy startup cleanup failed: {cleanup_error}")
                raise
            return self.path


def open_connections(server: Any) -> int:
    """Client connections the proxy server holds open (``_connections``: no public count)."""
    return len(server._connections)
