"""The session document's fenced writes as update pipelines addressed by `_id` alone.

Why `_id` alone (docs/decisions/turn-write-path.md): the embedded engine serves an update whose
filter is `{_id}` in the same time at 1,000 and 10,000 documents, while a filter with any second
field (`tenant`, `locked_by`, an `$or` of lease states) scans the collection (12.9 -> 104 ms for
the old lease take). So every condition of the lease gate moves into the update itself
(`leases.keep_unless`: the new fields merged in when `ok`, else the document unchanged), and the
caller reads the outcome from the document returned after the update (a unique lease id, a
per-call nonce or, for `number`, the lease fields it leaves alone say whether it applied). The
same pipelines are standard MongoDB (4.2+), where they are as atomic as the filtered updates were.

`ok` always includes `tenant == caller's tenant`: a session of another tenant is never changed,
and the caller treats its document as not found (only lease fields are projected).
"""

from __future__ import annotations

from datetime import datetime

from mongogate.leases import field_or_null, free, keep_unless, literal, same
from mongogate.memory import documents as md
from mongogate.values import Doc


def answered(tid: str, digest: str) -> Doc:
    """The last fenced turn of the session is this turn, with this text: its answer is committed."""
    return {"$and": [same(md.ANSWERED_TURN, tid), same(md.ANSWERED_TEXT, digest)]}


def take(tenant: str, tid: str, digest: str, lease_id: str, now: datetime, until: datetime) -> list[Doc]:
    """Take the lease (free, expired, or this same turn and text: a retry takes it over) and number
    the turn's user message, unless the turn is already answered. `lease_prev` keeps the lease as it
    was, so a take that turns out to have nothing to do can give it back; `lease_seq` is the user
    message's seq: every answer pending below it is written by this take's begin_turn before it
    returns the lease, so the commit of this lease may drop them."""
    mine = {"$and": [same(md.LEASE_TURN, tid), same(md.LEASE_TEXT, digest)]}
    ok = {
        "$and": [
            same("tenant", tenant),
            {"$cond": [answered(tid, digest), False, True]},
            {"$or": [free(now), mine]},
        ]
    }
    seq = {"$add": [{"$ifNull": ["$next_seq", 0]}, 1]}
    prev = {
        name: field_or_null(name) for name in (md.LOCKED_BY, md.LOCKED_UNTIL, md.LEASE_TURN, md.LEASE_TEXT)
    }
    return [
        keep_unless(
            ok,
            {
                md.LEASE_PREV: prev,
                md.LOCKED_BY: literal(lease_id),
                md.LOCKED_UNTIL: literal(until),
                md.LEASE_TURN: literal(tid),
                md.LEASE_TEXT: literal(digest),
                md.NEXT_SEQ: seq,
                md.LEASE_SEQ: seq,
                md.LAST_ACTIVITY: literal(now),
            },
        )
    ]


def owns(tenant: str, tid: str, lease_id: str) -> Doc:
    return {"$and": [same("tenant", tenant), same(md.LOCKED_BY, lease_id), same(md.LEASE_TURN, tid)]}


def renew(tenant: str, tid: str, lease_id: str, until: datetime) -> list[Doc]:
    return [keep_unless(owns(tenant, tid, lease_id), {md.LOCKED_UNTIL: literal(until)})]


def give_back(lease_id: str, previous: Doc) -> list[Doc]:
    ok = same(md.LOCKED_BY, lease_id)
    return [keep_unless(ok, {name: literal(value) for name, value in previous.items()})]


def unsettled() -> Doc:
    """The parked answers a write under the lease cannot vouch for: those numbered after its take
    (seq above `lease_seq`). Every answer parked at the take was stored by that lease's begin_turn
    before it returned the lease id, so a write with that id proves them stored and drops them."""
    settled = {"$ifNull": ["$lease_seq", -1]}  # a lease taken by an older version: keep everything
    return {"$filter": {"input": {"$ifNull": ["$pending", []]}, "cond": {"$gt": ["$$this.seq", settled]}}}


def number(tenant: str, tid: str, lease_id: str, now: datetime) -> list[Doc]:
    """A message appended under the lease (a tool call or result): while `lease_id` owns the session
    for `tid`, take the next seq and drop the parked answers the lease vouches for (`unsettled`).
    The update changes none of the fields `ok` tests, so the returned document passes `owns` if and
    only if this update applied."""
    seq = {"$add": [{"$ifNull": ["$next_seq", 0]}, 1]}
    fields = {md.NEXT_SEQ: seq, md.PENDING: unsettled(), md.LAST_ACTIVITY: literal(now)}
    return [keep_unless(owns(tenant, tid, lease_id), fields)]


def commit(tenant: str, tid: str, lease_id: str, entry: Doc, nonce: str, now: datetime) -> list[Doc]:
    """End the turn: while `lease_id` owns it, number the answer, park it in `pending`, release the
    lease, and drop the answers this lease's begin_turn wrote (`unsettled`); `commit_nonce` says
    which call's commit the returned document holds."""
    ok = owns(tenant, tid, lease_id)
    seq = {"$add": [{"$ifNull": ["$next_seq", 0]}, 1]}
    kept = unsettled()
    parked = {**{k: literal(v) for k, v in entry.items()}, "seq": seq}
    return [
        keep_unless(
            ok,
            {
                md.NEXT_SEQ: seq,
                md.PENDING: {"$concatArrays": [kept, [parked]]},
                md.LOCKED_BY: None,
                md.LOCKED_UNTIL: None,
                md.LEASE_TURN: None,
                md.LEASE_SEQ: None,
                md.ANSWERED_TURN: literal(tid),
                md.ANSWERED_TEXT: field_or_null(md.LEASE_TEXT),
                md.COMMIT_NONCE: literal(nonce),
                md.LAST_ACTIVITY: literal(now),
            },
        )
    ]
