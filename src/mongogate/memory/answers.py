"""The commit point of a turn's final answer: one conditional update of the session document.

Why here and not in the message insert: "is this lease still the owner?" and "store the
answer" must be one atomic step, and MongoDB makes a single-document update atomic on every
deployment (no transaction needed). The update checks the lease, releases it, takes the
answer's sequence number from the session's counter and appends the answer to
`session.pending`, all at once. `settle` then writes the answer as an ordinary message and
pulls it from `pending`. A process that dies between the two leaves it in `pending`, and the
next writer of the session's document (`begin_turn`, `append`, `end_turn`) settles it first,
so a committed answer is never lost and never lands twice. `pending` is a list so that
concurrent commits (plain appends of answers of different turns) never wait for each other.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pymongo import ReturnDocument
from pymongo.errors import PyMongoError

from mongogate.errors import Conflict, StorageError
from mongogate.memory.gate import SESSION_STATE, refusal, write_gate
from mongogate.memory.keys import answer_key
from mongogate.memory.model import AppendResult, key_conflict, session_not_found
from mongogate.values import Doc

if TYPE_CHECKING:  # store.py calls into this module: the type only, no import cycle
    from mongogate.memory.store import MemoryStore

log = logging.getLogger(__name__)


def _literal(value: object) -> Doc:
    # Pipeline updates read "$x" strings as field paths: caller text must never be one.
    return {"$literal": value}


async def commit_answer(
    store: MemoryStore, tenant: str, sid: str, tid: str, text: str, *, lease_id: str | None
) -> AppendResult:
    """Store `tid`'s answer if the lease gate lets the caller (`memory/gate.py`): with
    `lease_id`, only while that lease owns the session for this turn; without one (plain
    `append`), only while the session is free or its expired lease belongs to another turn.

    Raises the gate's error (`lease_lost`, `lease_busy`, `conflict`, `invalid_input`) when
    refused, or `conflict` when the key already holds other text.
    """
    key = answer_key(tid)
    next_seq = {"$add": ["$next_seq", 1]}
    pending = {
        "key": _literal(key),
        "turn_id": _literal(tid),
        "content": _literal(text),
        "lease_id": _literal(lease_id),
        "seq": next_seq,
        "at": _literal(store.clock.now()),
    }
    queued = {"$concatArrays": [{"$ifNull": ["$pending", []]}, [pending]]}
    update: Doc = {"next_seq": next_seq, "pending": queued, "last_activity": pending["at"]}
    if lease_id is not None:  # committing ends the turn: the lease is released in the same step
        update |= {"locked_by": None, "locked_until": None, "lease_turn": None}
    doc = await gated_update(
        store,
        tenant,
        sid,
        tid,
        lease_id,
        [{"$set": update}],
        {"pending": 1, "next_seq": 1},
        what=f"could not store the answer of turn {tid!r}",
        final_answer=lease_id is None,
    )
    store.at("answer.after_commit")
    mine = next(p for p in doc["pending"] if p["seq"] == doc["next_seq"])
    status, seq = await settle(store, tenant, sid, mine, raise_conflict=True)
    return AppendResult(status, key, seq)


async def gated_update(
    store: MemoryStore,
    tenant: str,
    sid: str,
    tid: str,
    lease_id: str | None,
    update: Doc | list[Doc],
    projection: Doc,
    *,
    what: str,
    final_answer: bool = False,
) -> Doc:
    """Apply `update` to the session only if the lease gate (`memory/gate.py`) lets this writer
    write for `tid` now; the session after the update, or the gate's error saying why not.

    Every message write numbers itself through here, so "may I write?" and "my seq" are one
    atomic step. A refusal first settles answers a crashed writer left on the session.
    """
    for _ in range(3):
        now = store.clock.now()
        try:
            doc = await store.sessions.find_one_and_update(
                {"_id": sid, "tenant": tenant, **write_gate(tid, lease_id, now, final_answer=final_answer)},
                update,
                projection=projection,
                return_document=ReturnDocument.AFTER,
            )
            current = None
            if doc is None:
                current = await store.sessions.find_one({"_id": sid, "tenant": tenant}, SESSION_STATE)
        except PyMongoError as e:
            raise StorageError(what) from e
        if doc is not None:
            return doc
        if current is None:
            raise session_not_found(sid)
        await settle_all(store, tenant, sid, current)  # e.g. this lease's own crashed commit
        refused = refusal(current, sid, tid, lease_id, now, final_answer=final_answer)
        if refused is not None:
            raise refused
    raise StorageError(f"{what} (its lease kept changing)", 1)


async def settle_all(store: MemoryStore, tenant: str, sid: str, session: Doc) -> None:
    """Settle every committed answer still parked on the session (a crashed writer's)."""
    for pending in session.get("pending") or []:
        await settle(store, tenant, sid, pending)


async def settle(
    store: MemoryStore, tenant: str, sid: str, pending: Doc, *, raise_conflict: bool = False
) -> tuple[str, int]:
    """Write a committed answer as a message (idempotent by key), then clear `pending`.

    Settling on behalf of another (crashed) writer never fails the caller: a conflict there
    means the key already holds an answer, which stands, and is only logged.
    """
    doc: Doc = {
        "session_id": sid,
        "tenant": tenant,
        "key": pending["key"],
        "seq": int(pending["seq"]),
        "turn_id": pending["turn_id"],
        "role": "assistant",
        "call_id": None,
        "content": pending["content"],
        "created_at": pending.get("at") or store.clock.now(),
        "lease_id": pending.get("lease_id"),
    }
    try:
        result = await store.insert_message(doc)
        if result == ("duplicate", int(pending["seq"])):
            result = ("inserted", int(pending["seq"]))  # our own commit, settled by a concurrent reader
    except Conflict:
        result = None
    store.at("answer.after_write")
    try:
        await store.sessions.update_one(
            {"_id": sid}, {"$pull": {"pending": {"key": pending["key"], "seq": pending["seq"]}}}
        )
    except PyMongoError as e:  # the next writer settles it again (the insert is idempotent)
        log.warning("could not clear the settled answer of session %s: %s", sid, type(e).__name__)
    if result is None:
        if raise_conflict:
            raise key_conflict(pending["key"])
        log.warning("session %s: committed answer %s conflicts with the stored one", sid, pending["key"])
        return "duplicate", int(pending["seq"])
    return result
