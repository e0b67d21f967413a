"""Property: over three tenants x two subjects (scope "subject"), random remember / recall / list /
forget / history calls never return or touch another scope's memory.

Each example runs against the real engine and model, with tenant names of its own, and checks
every answer against a model of what each scope holds; at the end each scope's memories are
exactly the model's (nothing of theirs was changed or erased by another scope's calls).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pymongo import AsyncMongoClient

from mongogate.config import LongTermSettings
from mongogate.errors import NotFound
from mongogate.recall.embedding import LocalEmbedder
from mongogate.recall.model import MemoryScope
from mongogate.recall.store import LongTermMemory

SCOPES = [(t, s) for t in range(3) for s in range(2)]
WORDS = ["apple pie recipe", "blue car AC-7", "meeting at noon", "apple orchard", "car keys"]
NAMESPACES = ["a", "a/b", "c"]
KEYS = [None, "k1", "k2"]

scope_ix = st.integers(0, len(SCOPES) - 1)
op = st.one_of(
    st.tuples(
        st.just("remember"),
        scope_ix,
        st.sampled_from(WORDS),
        st.sampled_from(NAMESPACES),
        st.sampled_from(KEYS),
    ),
    st.tuples(st.just("recall"), scope_ix, st.sampled_from(WORDS), st.sampled_from([None, *NAMESPACES])),
    st.tuples(st.just("list"), scope_ix, st.sampled_from([None, *NAMESPACES])),
    st.tuples(st.just("forget_id"), scope_ix, st.integers(0, 1000)),
    st.tuples(st.just("forget_key"), scope_ix, st.sampled_from(NAMESPACES), st.sampled_from(["k1", "k2"])),
    st.tuples(st.just("history"), scope_ix, st.integers(0, 1000)),
)


@dataclass
class Held:
    namespace: str
    key: str | None
    texts: list[str] = field(default_factory=list)


@dataclass
class World:
    ltm: LongTermMemory
    scopes: list[MemoryScope]
    held: list[dict[str, Held]]
    ever: list[str] = field(default_factory=list)  # every id seen, of any scope, to aim calls at

    def owner_of(self, mid: str) -> int | None:
        return next((i for i, h in enumerate(self.held) if mid in h), None)

    def pick(self, n: int) -> str:
        return self.ever[n % len(self.ever)] if self.ever else uuid.uuid4().hex

    async def step(self, o: tuple[Any, ...]) -> None:
        kind, i = o[0], o[1]
        scope, mine = self.scopes[i], self.held[i]
        if kind == "remember":
            _, _, text, ns, key = o
            r = await self.ltm.remember(scope, text, namespace=ns, key=key)
            same = next(
                (
                    m
                    for m, h in mine.items()
                    if h.namespace == ns and h.key == key and (key or h.texts[-1] == text)
                ),
                None,
            )
            if same is None:
                assert r.status == "created" and self.owner_of(r.id) is None
                mine[r.id] = Held(ns, key, [text])
                self.ever.append(r.id)
            else:
                assert r.id == same
                changed = mine[same].texts[-1] != text
                assert r.status == ("updated" if changed else "unchanged")
                if changed:
                    mine[same].texts.append(text)
                assert r.version == len(mine[same].texts)
        elif kind == "recall":
            got = await self.ltm.recall(scope, o[2], namespace=o[3], limit=10)
            assert {m.id for m in got.memories} <= set(mine)
            for m in got.memories:
                assert m.text == mine[m.id].texts[-1]
        elif kind == "list":
            page = await self.ltm.list(scope, namespace=o[2], limit=100)
            expected = {
                m for m, h in mine.items() if o[2] is None or (h.namespace + "/").startswith(o[2] + "/")
            }
            assert {m.id for m in page.memories} == expected
        elif kind == "forget_id":
            mid = self.pick(o[2])
            deleted = await self.ltm.forget(scope, id=mid)
            assert deleted == (mid in mine)
            mine.pop(mid, None)
        elif kind == "forget_key":
            deleted = await self.ltm.forget(scope, namespace=o[2], key=o[3])
            hit = next((m for m, h in mine.items() if h.namespace == o[2] and h.key == o[3]), None)
            assert deleted == (hit is not None)
            if hit is not None:
                del mine[hit]
        elif kind == "history":
            mid = self.pick(o[2])
            try:
                h = await self.ltm.history(scope, mid)
            except NotFound:
                assert mid not in mine
            else:
                assert [v.text for v in h.versions] == mine[mid].texts

    async def final_check(self) -> None:
        for scope, mine in zip(self.scopes, self.held, strict=True):
            page = await self.ltm.list(scope, limit=100)
            assert {m.id: m.text for m in page.memories} == {m: h.texts[-1] for m, h in mine.items()}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=14))
def test_no_scope_ever_sees_or_touches_another(engine_uri: str, ops: list[tuple[Any, ...]]) -> None:
    run = uuid.uuid4().hex[:8]

    async def main() -> None:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(engine_uri, tz_aware=True)
        try:
            ltm = LongTermMemory(
                client["t_recall_property"], LongTermSettings(scope="subject"), LocalEmbedder()
            )
            await ltm.ensure_indexes()
            scopes = [MemoryScope(f"{run}-tenant{t}", f"subject{s}") for t, s in SCOPES]
            world = World(ltm, scopes, [{} for _ in scopes])
            for o in ops:
                await world.step(o)
            await world.final_check()
        finally:
            await client.close()

    anyio.run(main)
