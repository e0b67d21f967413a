"""Sessions and messages: one document per message, keyed by the work, numbered by `$inc`.

No code path reads a history, changes it in memory and writes it back: every write is
an insert of one message or a single-document atomic update of the session. A turn's
final answer is the exception that proves the rule: it is committed on the session
document first (see `memory/repository.py`), so "who answered" is decided in one place.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from pymongo import ASCENDING, DESCENDING
from pymongo.errors import PyMongoError

from mongogate import progress
from mongogate.errors import StorageError
from mongogate.indexes import IndexModel, ensure_indexes, held_indexes
from mongogate.keyed import retire_unique_once
from mongogate.memory import documents as md
from mongogate.memory import items
from mongogate.memory.compaction import Compacted, compact, ensure_summary_indexes, latest_summary, summary_of
from mongogate.memory.documents import MessageDoc
from mongogate.memory.keys import check_role, message_id, message_key
from mongogate.memory.model import (
    AppendResult,
    Context,
    Message,
    key_conflict,
    message_shape,
    session_not_found,
    summary_shape,
)
from mongogate.memory.repository import LEGACY_UNIQUE, SessionRepository
from mongogate.memory.sessions import (
    Erased,
    SessionPage,
    delete_session,
    ensure_session_indexes,
    list_sessions,
)
from mongogate.migrations import MESSAGE_IDS, SESSION_ACTIVITY, Migrations
from mongogate.values import ByteBudget, Doc, bson, check_int, reply_batch, wire_bytes

log = logging.getLogger(__name__)

__all__ = [
    "LEGACY_UNIQUE",
    "AppendResult",
    "Context",
    "MemoryStore",
    "Message",
    "key_conflict",
    "session_not_found",
]


class MemoryStore(SessionRepository):
    """Messages, context windows, listing and erasing, over the session repository's collections."""

    async def ensure_indexes(self, migrations: Migrations | None = None) -> None:
        """``migrations``: the one-time steps done (mongogate/migrations.py), shared by the caller's
        other services so the marker is read once; None: read here."""
        migrations = migrations or Migrations(self.db)
        try:
            # each collection's indexes read once, for every step below (mongogate/indexes.py)
            held = {
                c: await held_indexes(self.db[c])
                for c in ("sessions", "messages", "summaries", md.MESSAGE_INDEX)
            }
            await ensure_indexes(
                self.sessions, [IndexModel([("tenant", ASCENDING)], name="tenant")], held["sessions"]
            )
            # Uniqueness is the derived `_id` (`memory/keys.py` `message_id`); the previous
            # version's (session_id, key) unique index stays only while its messages do. It is
            # also the back-fill's sign (memory/sessions.py): un-recorded before it may be dropped.
            if LEGACY_UNIQUE in held["messages"]:
                await migrations.reopen(SESSION_ACTIVITY)
            self.legacy_messages = await retire_unique_once(
                self.messages, LEGACY_UNIQUE, held["messages"], migrations, MESSAGE_IDS
            )
            seq = IndexModel([("session_id", ASCENDING), ("seq", DESCENDING)], name="session_seq_desc")
            await ensure_indexes(self.messages, [seq], held["messages"])
        except PyMongoError as e:
            raise StorageError("could not create the memory indexes") from e
        await ensure_summary_indexes(self, migrations, held["summaries"])  # compaction (memory/compaction.py)
        await ensure_session_indexes(self, migrations, held)  # listing and retention (memory/sessions.py)

    def check_limit(self, limit: object) -> int:
        return check_int(
            limit,
            "limit",
            1,
            self.settings.max_context_limit,
            default=self.settings.default_context_limit,
            hint="messages; memory.max_context_limit",
        )

    async def list_sessions(
        self, tenant: str, limit: object = None, cursor: object = None, budget: ByteBudget | None = None
    ) -> SessionPage:
        return await list_sessions(self, tenant, limit, cursor, budget)

    async def delete_session(self, tenant: str, session_id: object) -> Erased:
        return await delete_session(self, tenant, session_id)

    async def has_message(self, tenant: str, session_id: str, seq: int) -> bool:
        """Whether `tenant`'s session `session_id` holds a message numbered `seq` (a memory's
        `source`): one equality read on the (session_id, seq) index, checked against the tenant,
        so another tenant's (or subject's) session reads as missing."""
        try:
            found = await self.messages.find_one({"session_id": session_id, "seq": seq}, {"tenant": 1})
        except PyMongoError as e:
            raise StorageError("could not read the source message") from e
        return found is not None and found.get("tenant") == tenant

    # ---------------------------------------------------------------- sessions of items

    async def add_items(
        self, tenant: str, sid: str, contents: Sequence[tuple[str, str]], *, turn: str, new: Doc, name: str
    ) -> None:
        """Items ((role, content) each) as the session's next messages, one block of its counter
        (`memory/items.py`; the OpenAI Agents session)."""
        await items.add(self, tenant, sid, contents, turn=turn, new=new, name=name)

    async def latest_items(self, tenant: str, sid: str, n: int | None, *, name: str) -> list[str]:
        """The newest `n` items' contents (None: all of them), oldest first, each database reply
        holding at most what fits under the wire limit at the largest a message can be."""
        batch = reply_batch(self._max_message_bson(), n or 1 << 30, wire_bytes(self.db))
        return await items.latest(self, tenant, sid, n, batch=batch, name=name)

    async def pop_item(self, tenant: str, sid: str, *, name: str) -> str | None:
        return await items.pop(self, tenant, sid, name=name)

    async def clear_items(self, tenant: str, sid: str, *, name: str) -> None:
        await items.clear(self, tenant, sid, name=name)

    async def append(
        self,
        tenant: str,
        session_id: object,
        turn_id: object,
        role: object,
        content: object,
        call_id: object = None,
        *,
        lease_id: object = None,
    ) -> AppendResult:
        """Insert one message. A repeat of the same key and content is `duplicate`, never a second copy.

        Two round trips on the common path (the seq, the insert); the derived `_id` detects a
        repeat. The seq's update carries the lease gate (`memory/gate.py`), so a writer that lost
        the session lands nothing; under a lease it is one update by `_id` (`fenced.number`) that
        also drops the previous turn's parked answer, so the first append of a turn costs 2 too.
        Without a lease, a parked answer is written in the message's insert and then pulled (3).
        A turn's final answer (`assistant` without `call_id`) goes through the session's commit
        point. (docs/decisions/turn-write-path.md)
        """
        sid = self.check_id(session_id, "session_id")
        tid = self.check_id(turn_id, "turn_id")
        cid = None if call_id is None else self.check_id(call_id, "call_id")
        lid = None if lease_id is None else self.check_id(lease_id, "lease_id")
        kind = check_role(role)
        key = message_key(tid, kind, cid)
        text = self.check_text(content, "content")
        if kind == "assistant" and cid is None:  # the commit point lives in repository.py
            return await self.commit_answer(tenant, sid, tid, text, lease_id=lid)
        # The numbering is the tenant check and the lease gate as well.
        if lid is not None:  # by `_id` alone; drops the parked answers the lease vouches for
            session = await self.number_leased(tenant, sid, tid, lid)
        else:
            session = await self.gated_update(
                tenant,
                sid,
                tid,
                lid,
                {"$inc": {md.NEXT_SEQ: 1}, "$set": {md.LAST_ACTIVITY: self.clock.now()}},
                {md.NEXT_SEQ: 1, md.PENDING: 1},
                what=f"could not append to session {sid!r}",
            )
        self.at("append.after_seq")
        doc: MessageDoc = {
            "_id": message_id(sid, key),
            "session_id": sid,
            "tenant": tenant,
            "key": key,
            "seq": int(session[md.NEXT_SEQ]),
            "turn_id": tid,
            "role": kind,
            "call_id": cid,
            "content": text,
            "created_at": self.clock.now(),
        }
        pending = session.get(md.PENDING) or []
        if pending:  # answers parked by a turn's commit: written in the same insert
            status, seq = await self.settle_with(tenant, sid, pending, bson(doc))
        else:
            status, seq = await self.insert_message(bson(doc))
        return AppendResult(status, key, seq)

    async def load_context(
        self,
        tenant: str,
        session_id: object,
        limit: object = None,
        budget: ByteBudget | None = None,
        *,
        include_summarized: bool = False,
    ) -> Context:
        """The session's newest summary and the last `limit` messages after it, cut so the window
        starts at a user message (never mid-turn); within `budget` (the response byte cap), if
        given. `include_summarized`: the raw window, summarised messages included."""
        n = self.check_limit(limit)
        sid = self.check_id(session_id, "session_id")
        return await self.context(tenant, sid, n, budget, include_summarized=include_summarized)

    async def compact_context(
        self,
        tenant: str,
        session_id: object,
        through_seq: object,
        summary: object,
        lease_id: object = None,
        *,
        author: str | None = None,
    ) -> Compacted:
        """Store the model's summary; `author` (the caller's authenticated subject) goes with it
        wherever it is returned."""
        return await compact(self, tenant, session_id, through_seq, summary, lease_id, author=author)

    async def context(
        self,
        tenant: str,
        sid: str,
        n: int,
        budget: ByteBudget | None = None,
        *,
        include_summarized: bool = False,
        session: Doc | None = None,
    ) -> Context:
        """Summary + window: the newest summary (taken from `budget` first), then the newest `n`
        messages after its `through_seq` (all of them with `include_summarized`), and whether the
        unsummarised part calls for a compaction (`memory.compact_after_bytes`).

        `session`: the session document a lease take just returned; its published summary is
        used instead of a lookup (one round trip fewer in `begin_turn`)."""
        summary = summary_of(session) if session is not None else await latest_summary(self, tenant, sid)
        through = summary.through_seq if summary is not None else 0
        if summary is not None and budget is not None:
            budget.take(summary_shape(summary))  # the first item always goes out
        after = 0 if include_summarized else through
        ctx = await self.window(tenant, sid, n, budget, after=after, checked=session is not None)
        size = sum(len(m.content.encode("utf-8")) for m in ctx.messages if m.seq > through)
        advised = size > self.settings.compact_after_bytes or (ctx.truncated and not include_summarized)
        return dataclasses.replace(ctx, summary=summary, unsummarized_bytes=size, compaction_advised=advised)

    async def window(
        self,
        tenant: str,
        session_id: str,
        n: int,
        budget: ByteBudget | None = None,
        *,
        after: int = 0,
        checked: bool = False,
    ) -> Context:
        """The newest `n` messages through the (session, seq desc) index, oldest first, starting at
        a user message: the partial oldest turn is left out (`truncated`).

        - Too small a window: when the newest turn alone is longer than `n` messages, the window
          is widened back to that turn's user message (the newest whole turn, `truncated`), at most
          `memory.max_context_limit` messages in all.
        - `budget`: the newest messages that fit; older ones are left out (`size_capped`,
          `truncated`). Reading stops there, in replies no larger than the cap. If not even the
          newest turn's start fits, the window holds the newest messages that do (mid-turn).
        - `after`: only messages with a larger seq (those after a summary).
        Messages carry the tenant, so a non-empty session costs one query; only an empty window
        looks the session up, to tell a missing (or another tenant's) session from an empty one.
        `checked`: the caller has just read the session as this tenant's (a lease take), so the
        messages are read by session alone (session ids are unique across tenants).

        The messages are read whole, without a projection: on the embedded engine a projection
        costs more per document than the few fields it leaves out (0.5 ms of 4.9 per window of 41,
        with the tenant test; docs/decisions/turn-write-path.md).
        """
        query: Doc = {"session_id": session_id} if checked else {"session_id": session_id, "tenant": tenant}
        if after:
            query["seq"] = {"$gt": after}
        try:
            newest, more = await self._read_back(query, n, budget)
            if not newest and not more and not checked:
                exists = await self.sessions.find_one({"_id": session_id, "tenant": tenant}, {"_id": 1})
                if exists is None:
                    raise session_not_found(session_id)
            window, first_user, more = await self._widened(query, newest[::-1], more, budget)
        except PyMongoError as e:
            raise StorageError("could not load the context") from e
        if first_user:  # the oldest turn in the window is partial: leave it out
            more = True
            window = window[first_user:]
        return Context(
            messages=[Message.from_doc(d) for d in window],
            truncated=more,
            size_capped=budget is not None and budget.capped,
        )

    async def _widened(
        self, query: Doc, window: list[Doc], more: bool, budget: ByteBudget | None
    ) -> tuple[list[Doc], int | None, bool]:
        """The window (oldest first), the place of its first user message, and whether older
        messages were left out: widened back to the newest turn's user message when no user message
        is in it, older ones exist, and the limit and the budget leave room."""
        first_user = next((i for i, d in enumerate(window) if d["role"] == "user"), None)
        room = self.settings.max_context_limit - len(window)
        if first_user is None and more and window and room > 0 and not (budget and budget.capped):
            older = {**query, "seq": {**query.get("seq", {}), "$lt": window[0]["seq"]}}
            start, more = await self._read_back(older, room, budget, until_user=True)
            window = start[::-1] + window
            first_user = 0 if start and start[-1]["role"] == "user" else None
        return window, first_user, more

    async def _read_back(
        self, query: Doc, count: int, budget: ByteBudget | None, *, until_user: bool = False
    ) -> tuple[list[Doc], bool]:
        """Up to `count` messages matching `query`, newest first, each taken from `budget`; with
        `until_user`, up to and including the first user message. True when older matching
        messages were left out (beyond `count`, by the budget, or before that user message)."""
        batch = reply_batch(self._max_message_bson(), count + 1, wire_bytes(self.db))
        cursor = self.messages.find(query, sort=[("seq", DESCENDING)], limit=count + 1, batch_size=batch)
        out: list[Doc] = []
        try:
            async for d in cursor:
                if len(out) == count or (until_user and out and out[-1]["role"] == "user"):
                    return out, True
                if budget is not None and not budget.take(message_shape(d)):
                    return out, True
                out.append(d)
                if len(out) % batch == 0:  # a reply read: to the client that asked (mongogate.progress)
                    await progress.step(len(out), count, "reading the session's messages")
        finally:
            await cursor.close()
        return out, False

    def _max_message_bson(self) -> int:
        """The largest a stored message can be in a reply (its text, its key and ids, its fields)."""
        return self.settings.max_message_bytes + 6 * self.settings.max_id_length + 256
