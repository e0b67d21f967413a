"""`MongogateSaver`: a LangGraph checkpointer whose threads are fenced by mongogate's run leases.

Checkpoints and pending writes are documents in `lg_checkpoints` and `lg_writes`, every one
carrying the tenant, and every query filters on it first: another tenant's thread looks like
none. The first `get_tuple` or write of a thread takes the lease of the run
``langgraph-<sha256(thread_id)>`` (`runs/service.py`) and this saver keeps it, extended in the
background, until it closes or `release(thread_id)`: a graph run in another process that
resumes the same thread meanwhile fails with `[lease_busy]` at its first `get_tuple`, before any
node runs. The holder may still resume from any earlier checkpoint (time travel). `list` takes
no lease: it only reads.

A thread id is 1 to `MAX_THREAD_ID_CHARS` characters without NUL (anything else is refused with
`[invalid_input]` before any lease or write). A document's `_id` joins its parts (tenant, thread,
namespace, checkpoint, ...) with U+001F, each part's U+001E and U+001F escaped first (as U+001E
"0" and U+001E "1"): thread "x<US>b" in namespace "c" and thread "x" in namespace "b<US>c" are two
keys (they were one, and the second put replaced the first's checkpoint). A part holding neither
character, as every id stored before did in practice, keys exactly as before.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import random
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

from bson import Binary
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from pymongo import ASCENDING, DESCENDING
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError

from mongogate.assembly import checkpoints
from mongogate.bridge import Bridge, check_tenant, settings_for
from mongogate.clock import SYSTEM_CLOCK, Clock
from mongogate.config import Settings
from mongogate.errors import InvalidInput, LeaseLost, MongogateError
from mongogate.values import Doc, shown

#: the longest thread id a saver accepts (ids are keys, logged and sent with every query)
MAX_THREAD_ID_CHARS = 512
_SEP, _ESC = "\x1f", "\x1e"
_ESCAPED = str.maketrans({_ESC: _ESC + "0", _SEP: _ESC + "1"})


def run_id_of(thread_id: str) -> str:
    """The run that fences a thread: any thread id (':' included) maps to a valid run id."""
    return "langgraph-" + hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def _key(*parts: str) -> str:
    """The parts joined by U+001F, each escaped first, so no two lists of parts share a key."""
    return _SEP.join(part.translate(_ESCAPED) for part in parts)


def thread_of(conf: Any) -> str:
    """The configured thread id as stored: refused when empty, holding NUL, or over-long."""
    raw = conf.get("thread_id") if hasattr(conf, "get") else None
    thread_id = "" if raw is None else str(raw)
    if not thread_id or "\x00" in thread_id or len(thread_id) > MAX_THREAD_ID_CHARS:
        raise InvalidInput(
            f"thread_id {shown(thread_id)} ({len(thread_id)} characters) is not a thread id: give "
            f"1 to {MAX_THREAD_ID_CHARS} characters without NUL in config['configurable']['thread_id']"
        )
    return thread_id


class MongogateSaver(BaseCheckpointSaver[str]):
    """Sync and async LangGraph checkpointer on mongogate. Open with `MongogateSaver.open(...)`."""

    def __init__(self, bridge: Bridge, tenant: str, *, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__()
        self._bridge = bridge
        self.tenant = tenant
        self._runs = checkpoints(bridge.settings, bridge.db.memory, clock=clock)
        db = bridge.db.memory
        self._cps: AsyncCollection[Doc] = db["lg_checkpoints"]
        self._writes: AsyncCollection[Doc] = db["lg_writes"]
        #: thread_id -> the lease id this saver holds on its run
        self._held: dict[str, str] = {}
        #: one acquire at a time per thread (parallel writes of one step share the first's lease)
        self._taking: dict[str, asyncio.Lock] = {}
        self._beat: concurrent.futures.Future[None] | None = None

    @classmethod
    @contextlib.contextmanager
    def open(
        cls,
        config: str | Path | Settings | None = None,
        *,
        tenant: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> Iterator[MongogateSaver]:
        """A saver on the database of `config` (a file, `Settings`, or None for $MONGOGATE_CONFIG).

        `clock` decides lease expiry (tests pass a `ManualClock`)."""
        settings = settings_for(config)
        who = check_tenant(tenant, settings)
        bridge = Bridge(settings)
        bridge.open(_indexes)
        saver = cls(bridge, who, clock=clock)
        saver._beat = bridge.spawn(saver._heartbeat())
        try:
            yield saver
        finally:
            bridge.close(saver._let_go)

    # ------------------------------------------------------------------ the fence

    async def _hold(self, thread_id: str, *, writing: bool = False) -> None:
        """Take the thread's lease, or (before a write) check that this saver still holds it."""
        async with self._taking.setdefault(thread_id, asyncio.Lock()):
            lease_id = self._held.get(thread_id)
            if lease_id is None:
                lease = await self._runs.acquire(self.tenant, run_id_of(thread_id))
                self._held[thread_id] = lease.lease_id
            elif writing:
                try:  # extends it too; a lease that expired and was taken over refuses the write
                    await self._runs.heartbeat(self.tenant, run_id_of(thread_id), lease_id)
                except LeaseLost:
                    self._held.pop(thread_id, None)
                    raise

    async def _heartbeat(self) -> None:
        every = self._bridge.settings.memory.lease_ms / 3000
        while True:
            await asyncio.sleep(every)
            for thread_id, lease_id in list(self._held.items()):
                try:
                    await self._runs.heartbeat(self.tenant, run_id_of(thread_id), lease_id)
                except (LeaseLost, MongogateError):
                    self._held.pop(thread_id, None)  # taken over: the next use takes it again or fails

    async def _let_go(self) -> None:
        if self._beat is not None:
            self._beat.cancel()
        for thread_id in list(self._held):
            await self._release(thread_id)

    async def _release(self, thread_id: str) -> None:
        lease_id = self._held.pop(thread_id, None)
        if lease_id is not None:
            with contextlib.suppress(MongogateError):
                await self._runs.release(self.tenant, run_id_of(thread_id), lease_id)

    def release(self, thread_id: str) -> None:
        """Let another process resume `thread_id` now (closing the saver releases every thread)."""
        self._bridge.call(self._release(thread_of({"thread_id": thread_id})))

    async def arelease(self, thread_id: str) -> None:
        await self._bridge.acall(self._release(thread_of({"thread_id": thread_id})))

    # ------------------------------------------------------------------ on the bridge's loop

    async def _get(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        thread_id = thread_of(conf)
        ns = conf.get("checkpoint_ns", "")
        await self._hold(thread_id)
        match: Doc = {"tenant": self.tenant, "thread_id": thread_id, "checkpoint_ns": ns}
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id:
            match["checkpoint_id"] = checkpoint_id
        doc = await self._cps.find_one(match, sort=[("checkpoint_id", DESCENDING)])
        return None if doc is None else await self._tuple(doc)

    async def _tuple(self, doc: Doc) -> CheckpointTuple:
        thread_id, ns, cid = doc["thread_id"], doc["checkpoint_ns"], doc["checkpoint_id"]
        writes = self._writes.find(
            {"tenant": self.tenant, "thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid},
            sort=[("seq", ASCENDING), ("idx", ASCENDING)],
        )
        pending = [
            (w["task_id"], w["channel"], self.serde.loads_typed((w["type"], bytes(w["value"]))))
            async for w in writes
        ]
        parent = doc.get("parent_checkpoint_id")
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}},
            checkpoint=self.serde.loads_typed((doc["type"], bytes(doc["checkpoint"]))),
            metadata=self.serde.loads_typed((doc["meta_type"], bytes(doc["metadata"]))),
            parent_config=(
                {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}}
                if parent
                else None
            ),
            pending_writes=pending,
        )

    async def _list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> list[CheckpointTuple]:
        match: Doc = {"tenant": self.tenant}
        if config is not None:
            conf = config["configurable"]
            if conf.get("thread_id") is not None:
                match["thread_id"] = thread_of(conf)
            if conf.get("checkpoint_ns") is not None:
                match["checkpoint_ns"] = conf["checkpoint_ns"]
            if checkpoint_id := get_checkpoint_id(config):
                match["checkpoint_id"] = checkpoint_id
        if before is not None and (before_id := get_checkpoint_id(before)):
            match["checkpoint_id"] = {"$lt": before_id}
        out: list[CheckpointTuple] = []
        if limit is not None and limit <= 0:
            return out
        async for doc in self._cps.find(match, sort=[("checkpoint_id", DESCENDING)]):
            tup = await self._tuple(doc)
            if filter and not all(tup.metadata.get(k) == v for k, v in filter.items()):
                continue
            out.append(tup)
            if limit is not None and len(out) >= limit:
                break
        return out

    async def _put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
    ) -> RunnableConfig:
        conf = config["configurable"]
        thread_id = thread_of(conf)
        ns = conf.get("checkpoint_ns", "")
        await self._hold(thread_id, writing=True)
        ctype, cbytes = self.serde.dumps_typed(checkpoint)
        mtype, mbytes = self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))
        doc: Doc = {
            "tenant": self.tenant,
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint["id"],
            "parent_checkpoint_id": conf.get("checkpoint_id"),
            "type": ctype,
            "checkpoint": Binary(cbytes),
            "meta_type": mtype,
            "metadata": Binary(mbytes),
        }
        _id = _key(self.tenant, thread_id, ns, checkpoint["id"])
        await put_doc(self._cps, _id, doc, replace=True)
        return {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}
        }

    async def _put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> None:
        conf = config["configurable"]
        thread_id = thread_of(conf)
        ns = conf.get("checkpoint_ns", "")
        cid = conf["checkpoint_id"]
        await self._hold(thread_id, writing=True)
        seq = time.time_ns()  # orders this call's writes after earlier calls' (ties: by idx)
        for i, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, i)
            vtype, vbytes = self.serde.dumps_typed(value)
            doc: Doc = {
                "tenant": self.tenant,
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": cid,
                "task_id": task_id,
                "task_path": task_path,
                "idx": idx,
                "seq": seq,
                "channel": channel,
                "type": vtype,
                "value": Binary(vbytes),
            }
            _id = _key(self.tenant, thread_id, ns, cid, task_id, str(idx))
            # special channels (errors, interrupts) replace what a retry wrote; a regular write,
            # once stored, stays as it was
            await put_doc(self._writes, _id, doc, replace=idx < 0)

    async def _delete(self, thread_id: str) -> None:
        await self._hold(thread_id, writing=True)
        match = {"tenant": self.tenant, "thread_id": thread_id}
        await self._writes.delete_many(match)
        await self._cps.delete_many(match)
        await self._release(thread_id)

    # ------------------------------------------------------------------ the interface

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._bridge.call(self._get(config))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._bridge.acall(self._get(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        yield from self._bridge.call(self._list(config, filter, before, limit))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for tup in await self._bridge.acall(self._list(config, filter, before, limit)):
            yield tup

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._bridge.call(self._put(config, checkpoint, metadata))

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._bridge.acall(self._put(config, checkpoint, metadata))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self._bridge.call(self._put_writes(config, writes, task_id, task_path))

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await self._bridge.acall(self._put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._bridge.call(self._delete(thread_of({"thread_id": thread_id})))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._bridge.acall(self._delete(thread_of({"thread_id": thread_id})))

    def get_next_version(self, current: str | None, channel: None) -> str:
        """As langgraph's InMemorySaver: a zero-padded counter and a random tie-breaker."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"


async def put_doc(coll: AsyncCollection[Doc], _id: str, doc: Doc, *, replace: bool) -> None:
    """Store `doc` under `_id`: an insert (flat on the embedded engine, where an upsert that matches
    nothing scans the collection); when the `_id` is taken, `replace` overwrites it by `_id`,
    otherwise the stored document stays. A replace that finds it gone (the thread deleted in
    between) inserts again."""
    for _ in range(3):
        try:
            await coll.insert_one({"_id": _id, **doc})
            return
        except DuplicateKeyError:
            if not replace or (await coll.replace_one({"_id": _id}, doc)).matched_count:
                return


async def _indexes(bridge: Bridge) -> None:
    m = bridge.db.memory
    await checkpoints(bridge.settings, m).ensure_indexes()
    fields = [("tenant", ASCENDING), ("thread_id", ASCENDING), ("checkpoint_ns", ASCENDING)]
    await m["lg_checkpoints"].create_index(
        [*fields, ("checkpoint_id", DESCENDING)], name="tenant_thread_ns_id"
    )
    await m["lg_writes"].create_index([*fields, ("checkpoint_id", ASCENDING)], name="tenant_thread_ns_id")
