"""Database failures a retry soon cannot fix, told apart from those it can, and what readiness makes of them.

Every driver error reaches a tool as a `StorageError` wrapping it (`from e`); `classify` looks at
that cause once, where the tool answers (`tools/base.py`):
- a reply larger than the wire limit (the driver's `ProtocolError`, "larger than server max message
  size") -> `ReplyTooLarge`, not retryable, naming the limit;
- a write the database refuses because its disk is full or its storage is read-only (SQLite's
  "database or disk is full" / "readonly database" from the embedded engine, MongoDB's
  `OutOfDiskSpace` (14031), "No space left on device", an Atlas space quota) -> `WriteRefused`,
  not retryable, and `WriteHealth` turns `/readyz` to 503 until a write succeeds again.
Everything else stays a retryable `StorageError`. The driver gives these facts only as text, so
the words matched are listed here, once.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pymongo.errors import OperationFailure, ProtocolError, PyMongoError

from mongogate.errors import ReplyTooLarge, StorageError, WriteRefused

if TYPE_CHECKING:
    from pymongo.asynchronous.database import AsyncDatabase

    from mongogate.values import Doc

log = logging.getLogger(__name__)

_WIRE_LIMIT = re.compile(r"larger than server max message size \((\d+)\)")
_DISK_FULL = ("database or disk is full", "no space left on device", "space quota", "disk is full")
_READ_ONLY = ("readonly database", "read-only file system")
#: MongoDB's OutOfDiskSpace
_DISK_FULL_CODES = frozenset({14031})
#: the readiness probe's document: about the size of a small message, so a nearly full disk fails it
PROBE_PAD = 64 * 1024
PROBE_COLLECTION = "mongogate_write_probe"


def refusal_reason(cause: BaseException) -> str | None:
    """Why the database refuses writes for good ("its disk is full"...), or None for other failures."""
    if not isinstance(cause, PyMongoError):
        return None
    text = str(cause).lower()
    code = cause.code if isinstance(cause, OperationFailure) else None
    if code in _DISK_FULL_CODES or any(words in text for words in _DISK_FULL):
        return "its disk is full"
    if any(words in text for words in _READ_ONLY):
        return "its storage is read-only"
    return None


def classify(err: StorageError) -> StorageError:
    """The error a caller should see for `err`: `ReplyTooLarge`, `WriteRefused`, or `err` itself."""
    if isinstance(err, ReplyTooLarge | WriteRefused):
        return err
    cause = err.__cause__
    if isinstance(cause, ProtocolError) and (m := _WIRE_LIMIT.search(str(cause))):
        out: StorageError = ReplyTooLarge(err.what, int(m.group(1)))
    elif cause is not None and (why := refusal_reason(cause)) is not None:
        out = WriteRefused(err.what, why)
    else:
        return err
    out.__cause__ = cause
    return out


class WriteHealth:
    """Whether this server's writes are being refused for good (disk full, read-only storage).

    Set by a tool call that got a `WriteRefused`; cleared by the next write that succeeds, a tool
    call or the readiness probe (`probe`), which `/readyz` runs only while refused, so a server
    that the load balancer took out of rotation can come back by itself.
    """

    def __init__(self) -> None:
        self.refused: str | None = None
        self.since: datetime | None = None

    def refuse(self, why: str) -> None:
        if self.refused is None:
            log.error("the database refuses writes (%s): /readyz answers 503 until a write succeeds", why)
            self.since = datetime.now(UTC)
        self.refused = why

    def recovered(self) -> None:
        if self.refused is not None:
            log.warning("writes succeed again (refused since %s): /readyz is ready", self.since)
        self.refused = self.since = None

    async def probe(self, db: AsyncDatabase[Doc]) -> bool:
        """One small write (about `PROBE_PAD` bytes) to see whether writes succeed again."""
        try:
            await db[PROBE_COLLECTION].update_one(
                {"_id": "readyz"}, {"$set": {"at": datetime.now(UTC), "pad": "x" * PROBE_PAD}}, upsert=True
            )
        except PyMongoError as e:
            why = refusal_reason(e)
            if why is not None:
                self.refused = why
            log.info("readiness write probe failed: %s", type(e).__name__)
            return False
        self.recovered()
        return True
