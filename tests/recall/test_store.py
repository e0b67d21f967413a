"""Long-term memory on the real engine with the real wordllama model: remember, recall, forget."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import AsyncMongoClient

from mongogate.clock import ManualClock
from mongogate.config import LimitsSettings, LongTermSettings
from mongogate.errors import EmbeddingUnavailable, InvalidInput, NotFound, QuotaExceeded
from mongogate.recall.model import MemoryScope
from mongogate.recall.store import LongTermMemory
from tests.recall.conftest import BrokenEmbedder, OtherModel

pytestmark = pytest.mark.anyio

ACME = MemoryScope("acme")
GLOBEX = MemoryScope("globex")

FACTS = {
    "coffee": "The user likes their coffee black, without sugar.",
    "order": "Order AC-1042 was delayed by the carrier until Friday.",
    "cat": "The user's cat is called Miso and is afraid of thunder.",
    "train": "The user commutes to work by train every morning.",
    "lang": "The user prefers answers written in Portuguese.",
}


async def seed(
    ltm: LongTermMemory, scope: MemoryScope = ACME, namespace: str = "user/facts"
) -> dict[str, str]:
    ids = {}
    for key, text in FACTS.items():
        ids[key] = (await ltm.remember(scope, text, namespace=namespace, key=key)).id
    return ids


async def test_keyed_remember_creates_then_unchanged_then_updated_with_history(ltm: LongTermMemory) -> None:
    a = await ltm.remember(ACME, "likes tea", namespace="user/prefs", key="drink")
    assert (a.status, a.version, a.namespace, a.key) == ("created", 1, "user/prefs", "drink")
    again = await ltm.remember(ACME, "likes tea", namespace="user/prefs", key="drink")
    assert (again.id, again.status, again.version) == (a.id, "unchanged", 1)
    b = await ltm.remember(ACME, "likes coffee now", namespace="user/prefs", key="drink")
    assert (b.id, b.status, b.version) == (a.id, "updated", 2)
    h = await ltm.history(ACME, a.id)
    assert [(v.version, v.text) for v in h.versions] == [(1, "likes tea"), (2, "likes coffee now")]
    page = await ltm.list(ACME)
    assert [(m.text, m.version) for m in page.memories] == [("likes coffee now", 2)]


async def test_same_key_in_another_namespace_is_another_memory(ltm: LongTermMemory) -> None:
    a = await ltm.remember(ACME, "x", namespace="a", key="k")
    b = await ltm.remember(ACME, "x", namespace="b", key="k")
    assert a.id != b.id and b.status == "created"


async def test_without_key_the_same_text_is_one_memory(ltm: LongTermMemory) -> None:
    a = await ltm.remember(ACME, "The wifi password is on the fridge.")
    b = await ltm.remember(ACME, "The wifi password is on the fridge.")
    c = await ltm.remember(ACME, "The wifi password changed in May.")
    assert (a.status, b.status, c.status) == ("created", "unchanged", "created")
    assert a.id == b.id != c.id and a.namespace == "default" and a.key is None
    assert len((await ltm.list(ACME)).memories) == 2


async def test_metadata_change_with_the_same_text_is_a_new_version(ltm: LongTermMemory) -> None:
    a = await ltm.remember(ACME, "tea", key="drink", metadata={"source": "chat"})
    b = await ltm.remember(ACME, "tea", key="drink", metadata={"source": "form"})
    assert (b.status, b.version) == ("updated", 2)
    r = await ltm.recall(ACME, "tea", metadata={"source": "form"})
    assert [m.id for m in r.memories] == [a.id]
    assert (await ltm.recall(ACME, "tea", metadata={"source": "chat"})).memories == []


async def test_recall_finds_an_exact_identifier_and_a_paraphrase(ltm: LongTermMemory) -> None:
    ids = await seed(ltm)
    exact = await ltm.recall(ACME, "AC-1042")
    assert exact.memories[0].id == ids["order"] and exact.vector_path == "scan"
    meaning = await ltm.recall(ACME, "What is the name of my pet?", limit=3)
    assert ids["cat"] in [m.id for m in meaning.memories]
    scores = [m.score for m in exact.memories]
    assert all(s is not None for s in scores) and scores == sorted(scores, reverse=True)  # type: ignore[type-var]


@pytest.mark.parametrize("method", ["text", "vector", "fused"])
async def test_each_method_ranks_the_identifier_first(ltm: LongTermMemory, method: Any) -> None:
    ids = await seed(ltm)
    r = await ltm.recall(ACME, "order AC-1042", method=method)
    assert r.memories[0].id == ids["order"]


async def test_namespace_is_a_prefix_of_whole_segments(ltm: LongTermMemory) -> None:
    await ltm.remember(ACME, "fact one about work", namespace="user")
    await ltm.remember(ACME, "fact two about work", namespace="user/work")
    await ltm.remember(ACME, "fact three about work", namespace="user/work/old")
    await ltm.remember(ACME, "fact four about work", namespace="username")
    under = await ltm.recall(ACME, "work", namespace="user/work", limit=10)
    assert sorted(m.namespace for m in under.memories) == ["user/work", "user/work/old"]
    top = await ltm.recall(ACME, "work", namespace="user", limit=10)
    assert sorted(m.namespace for m in top.memories) == ["user", "user/work", "user/work/old"]
    listed = await ltm.list(ACME, namespace="user/work/old")
    assert [m.namespace for m in listed.memories] == ["user/work/old"]


async def test_forget_by_id_and_by_key_removes_history(ltm: LongTermMemory) -> None:
    a = await ltm.remember(ACME, "v1", namespace="n", key="k")
    await ltm.remember(ACME, "v2", namespace="n", key="k")
    assert await ltm.forget(ACME, namespace="n", key="k") is True
    assert await ltm.forget(ACME, namespace="n", key="k") is False
    assert await ltm.forget(ACME, id=a.id) is False
    assert await ltm.versions.count_documents({"memory_id": a.id}) == 0
    with pytest.raises(NotFound):
        await ltm.history(ACME, a.id)
    b = await ltm.remember(ACME, "keyless")
    assert await ltm.forget(ACME, id=b.id) is True
    assert await ltm.forget(ACME, id=b.id) is False


async def test_another_scope_sees_nothing(ltm: LongTermMemory) -> None:
    ids = await seed(ltm)
    assert (await ltm.recall(GLOBEX, "AC-1042")).memories == []
    assert (await ltm.list(GLOBEX)).memories == []
    with pytest.raises(NotFound):
        await ltm.history(GLOBEX, ids["order"])
    assert await ltm.forget(GLOBEX, id=ids["order"]) is False
    assert await ltm.forget(GLOBEX, namespace="user/facts", key="order") is False
    other = await ltm.remember(GLOBEX, FACTS["order"], namespace="user/facts", key="order")
    assert other.status == "created" and other.id != ids["order"]
    subject = await ltm.remember(
        MemoryScope("acme", "alice"), FACTS["order"], namespace="user/facts", key="order"
    )
    assert subject.status == "created"
    assert (await ltm.history(ACME, ids["order"])).versions[0].text == FACTS["order"]


async def test_list_pages_newest_first_with_an_opaque_cursor(ltm: LongTermMemory, clock: ManualClock) -> None:
    made = []
    for i in range(7):
        made.append((await ltm.remember(ACME, f"memory number {i}")).id)
        clock.advance(1)
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        page = await ltm.list(ACME, limit=3, cursor=cursor)
        seen += [m.id for m in page.memories]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == list(reversed(made))
    with pytest.raises(InvalidInput, match="cursor"):
        await ltm.list(ACME, cursor="not-a-cursor")


async def test_quota_refuses_a_new_memory_and_writes_nothing(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str, embedder: BrokenEmbedder
) -> None:
    ltm = LongTermMemory(mongo[db_name], LongTermSettings(max_per_scope=2), embedder)
    await ltm.ensure_indexes()
    await ltm.remember(ACME, "one", key="a")
    await ltm.remember(ACME, "two")
    with pytest.raises(QuotaExceeded, match="max_per_scope"):
        await ltm.remember(ACME, "three")
    assert await ltm.memories.count_documents({}) == 2
    assert (await ltm.remember(ACME, "one again", key="a")).status == "updated"  # not a new memory
    assert (await ltm.remember(GLOBEX, "three")).status == "created"  # quotas are per scope


async def test_ttl_sets_expires_at_and_hides_expired_memories(
    ltm: LongTermMemory, clock: ManualClock
) -> None:
    a = await ltm.remember(ACME, "temporary door code 4471", key="door", ttl_days=2)
    doc = await ltm.memories.find_one({"_id": a.id})
    assert doc is not None and doc["expires_at"] is not None
    assert (await ltm.recall(ACME, "4471")).memories
    clock.advance(2 * 86_400 + 1)
    assert (await ltm.recall(ACME, "4471")).memories == []
    assert (await ltm.list(ACME)).memories == []
    with pytest.raises(NotFound):
        await ltm.history(ACME, a.id)
    again = await ltm.remember(ACME, "temporary door code 4471", key="door")
    assert again.status == "created" and again.version == 1
    info = await ltm.memories.index_information()
    assert info["expires_at_ttl"]["expireAfterSeconds"] == 0


async def test_embedder_failure_stores_nothing_and_recall_falls_back_to_terms(
    ltm: LongTermMemory, embedder: BrokenEmbedder
) -> None:
    await ltm.remember(ACME, "invoice INV-77 is paid")
    embedder.broken = True
    with pytest.raises(EmbeddingUnavailable) as e:
        await ltm.remember(ACME, "something new")
    assert e.value.retryable and e.value.code == "embedding_unavailable"
    assert await ltm.memories.count_documents({}) == 1
    r = await ltm.recall(ACME, "INV-77")
    assert r.vector_path == "unavailable" and [m.text for m in r.memories] == ["invoice INV-77 is paid"]
    with pytest.raises(EmbeddingUnavailable):
        await ltm.recall(ACME, "INV-77", method="vector")


async def test_vectors_of_another_model_are_never_compared(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str, ltm: LongTermMemory
) -> None:
    ids = await seed(ltm)
    other = LongTermMemory(mongo[db_name], ltm.settings, OtherModel())
    assert (await other.recall(ACME, "What is my pet called?", method="vector")).memories == []
    fused = await other.recall(ACME, "AC-1042")  # exact terms still find it
    assert [m.id for m in fused.memories] == [ids["order"]]


async def test_response_is_cut_at_the_byte_cap(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str, embedder: BrokenEmbedder
) -> None:
    ltm = LongTermMemory(mongo[db_name], LongTermSettings(max_response_bytes=2048, min_score=0.0), embedder)
    await ltm.ensure_indexes()
    for i in range(6):
        await ltm.remember(ACME, f"shared word {i} " + "x" * 500)
    r = await ltm.recall(ACME, "shared", limit=6)
    assert r.truncated > 0 and len(r.memories) + r.truncated == 6
    page = await ltm.list(ACME, limit=6)
    assert page.truncated > 0 and page.next_cursor is not None
    rest = await ltm.list(ACME, limit=6, cursor=page.next_cursor)
    assert len(page.memories) + len(rest.memories) <= 6


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("empty text", {"text": ""}, "text"),
    ("text too long", {"text": "x" * 2000}, "max_text_bytes"),
    ("lone surrogate", {"text": "a\ud800"}, "surrogate"),
    ("control char in namespace", {"namespace": "user/\x07bell"}, "namespace"),
    ("NUL in namespace", {"namespace": "a\x00b"}, "namespace"),
    ("empty segment", {"namespace": "a//b"}, "namespace"),
    ("too deep", {"namespace": "/".join("a" * 9)}, "segments"),
    ("space", {"namespace": "my notes"}, "namespace"),
    ("key with newline", {"key": "a\nb"}, "control"),
    ("key too long", {"key": "k" * 201}, "key"),
    ("NaN", {"metadata": {"score": float("nan")}}, "metadata.score"),
    ("Infinity deep", {"metadata": {"a": {"b": [1, float("inf")]}}}, "metadata.a.b[1]"),
    ("dollar key", {"metadata": {"$where": 1}}, "cannot be stored"),
    ("dotted key", {"metadata": {"a.b": 1}}, "cannot be stored"),
    ("too deep metadata", {"metadata": {"a": {"b": {"c": {"d": {"e": 1}}}}}}, "metadata_max_depth"),
    ("too many keys", {"metadata": {f"k{i}": i for i in range(65)}}, "metadata_max_keys"),
    ("huge int", {"metadata": {"n": 2**70}}, "64-bit"),
    ("ttl zero", {"ttl_days": 0}, "ttl_days"),
    ("ttl bool", {"ttl_days": True}, "ttl_days"),
]


@pytest.mark.parametrize(("case", "args", "said"), BAD, ids=[b[0] for b in BAD])
async def test_bad_remember_arguments_are_refused_before_any_write(
    ltm: LongTermMemory, case: str, args: dict[str, Any], said: str
) -> None:
    call = {"text": "a fact", **args}
    text = call.pop("text")
    with pytest.raises(InvalidInput, match=said.replace("[", r"\[").replace("$", r"\$")):
        await ltm.remember(ACME, text, **call)
    assert await ltm.memories.count_documents({}) == 0


BAD_RECALL: list[tuple[str, dict[str, Any], str]] = [
    ("empty query", {"query": " "}, "query"),
    ("long query", {"query": "q" * 201}, "max_query_chars"),
    ("limit zero", {"limit": 0}, "limit"),
    ("limit over", {"limit": 21}, "limit"),
    ("bad namespace", {"namespace": "a\tb"}, "namespace"),
    ("nested filter", {"metadata": {"a": {"b": 1}}}, "exact match"),
    ("NaN filter", {"metadata": {"a": float("nan")}}, "metadata.a"),
]


@pytest.mark.parametrize(("case", "args", "said"), BAD_RECALL, ids=[b[0] for b in BAD_RECALL])
async def test_bad_recall_arguments_are_refused(
    ltm: LongTermMemory, case: str, args: dict[str, Any], said: str
) -> None:
    call = {"query": "anything", **args}
    query = call.pop("query")
    with pytest.raises(InvalidInput, match=said):
        await ltm.recall(ACME, query, **call)


async def test_forget_needs_id_or_namespace_and_key(ltm: LongTermMemory) -> None:
    with pytest.raises(InvalidInput, match="needs id"):
        await ltm.forget(ACME)
    with pytest.raises(InvalidInput, match="not both"):
        await ltm.forget(ACME, id="x", key="k")


def test_limits_default_is_the_shared_metadata_bounds() -> None:
    assert LimitsSettings().metadata_max_keys == 64


async def test_forget_interrupted_before_the_history_is_finished_by_the_next_forget(
    ltm: LongTermMemory,
) -> None:
    a = await ltm.remember(ACME, "v1", key="k")
    await ltm.remember(ACME, "v2", key="k")

    def crash(point: str) -> None:
        if point == "forget.after_memory":
            raise KeyboardInterrupt  # the process stops here: the memory is gone, its history not yet

    ltm.fault = crash
    with pytest.raises(KeyboardInterrupt):
        await ltm.forget(ACME, id=a.id)
    ltm.fault = None
    assert await ltm.versions.count_documents({"memory_id": a.id}) == 1
    assert await ltm.forget(ACME, id=a.id) is False  # already gone, and now its history too
    assert await ltm.versions.count_documents({"memory_id": a.id}) == 0


def test_scope_rule_tenant_or_subject() -> None:
    from mongogate.errors import AuthError
    from mongogate.recall.model import TENANT_OWNER, scope_for

    assert scope_for("tenant", "acme", "alice") == MemoryScope("acme")
    assert scope_for("tenant", "acme", "alice").owner == TENANT_OWNER
    assert scope_for("subject", "acme", "alice") == MemoryScope("acme", "alice")
    with pytest.raises(AuthError):  # would read as the tenant-wide owner
        scope_for("subject", "acme", TENANT_OWNER)


async def test_ensure_indexes_is_idempotent(ltm: LongTermMemory) -> None:
    before = await ltm.memories.index_information()
    await ltm.ensure_indexes()
    assert await ltm.memories.index_information() == before
    # uniqueness is the derived `_id` (recall/ids.py): no other unique index, on either collection
    assert [n for n, i in before.items() if i.get("unique") and n != "_id_"] == []
    assert [
        n for n, i in (await ltm.versions.index_information()).items() if i.get("unique") and n != "_id_"
    ] == []


async def test_history_is_cut_to_the_newest_versions_within_the_byte_cap(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str, embedder: BrokenEmbedder
) -> None:
    ltm = LongTermMemory(mongo[db_name], LongTermSettings(max_response_bytes=4096), embedder)
    await ltm.ensure_indexes()
    m = None
    for i in range(1, 7):
        m = await ltm.remember(ACME, f"version {i} " + "y" * 1000, key="big")
    assert m is not None and m.version == 6
    h = await ltm.history(ACME, m.id)
    assert 1 <= len(h.versions) < 6 and h.truncated == 6 - len(h.versions)
    assert [v.version for v in h.versions] == list(range(7 - len(h.versions), 7))  # newest, oldest first


async def test_liveness_hides_every_expired_memory_and_keeps_those_without_expiry(
    ltm: LongTermMemory, clock: ManualClock
) -> None:
    """The liveness filter: a memory past its TTL is never returned by any read, one with a null
    expiry or no expires_at field at all (a document written before the field existed) always
    is. Fails with the one-clause filter `{expires_at: {$not: {$lte: now}}}` (mongoeco's `$lte` on
    a date matches null)."""
    soon = await ltm.remember(ACME, "parking permit 7731 in bay C", ttl_days=1)
    later = await ltm.remember(ACME, "parking permit 7731 renewal in bay D", ttl_days=3)
    never = await ltm.remember(ACME, "parking permit 7731 archive in bay E")
    bare = await ltm.remember(ACME, "parking permit 7731 origin in bay F")
    await ltm.memories.update_one({"_id": bare.id}, {"$unset": {"expires_at": ""}})
    clock.advance(86_400)  # exactly at the first TTL: expired
    want = {later.id, never.id, bare.id}
    for method in ("fused", "text", "vector"):
        got = await ltm.recall(ACME, "parking permit 7731", limit=10, method=method)
        assert {m.id for m in got.memories} == want, method
    assert {m.id for m in (await ltm.list(ACME)).memories} == want
    with pytest.raises(NotFound):
        await ltm.history(ACME, soon.id)
    assert (await ltm.history(ACME, bare.id)).versions[-1].text.endswith("bay F")
    clock.advance(2 * 86_400)
    assert {m.id for m in (await ltm.list(ACME)).memories} == {never.id, bare.id}
    assert await ltm.memories.count_documents(ltm.scoped(ACME, None, clock.now())) == 2


@pytest.mark.parametrize("key", ["door", None])
async def test_remembering_the_same_text_with_a_new_ttl_applies_the_new_ttl(
    ltm: LongTermMemory, clock: ManualClock, key: str | None
) -> None:
    """Broke before: the repeat was `unchanged` and kept the old expiry, so "remember this for 30
    more days" lost the memory when the first TTL fired. The status stays `unchanged` (same text,
    same version, no history entry); the expiry is the one the last remember named."""
    a = await ltm.remember(ACME, "door code 4471", key=key, ttl_days=1)
    clock.advance(12 * 3600)
    again = await ltm.remember(ACME, "door code 4471", key=key, ttl_days=30)
    assert (again.id, again.status, again.version) == (a.id, "unchanged", 1)
    clock.advance(2 * 86_400)  # past the first TTL
    assert [m.id for m in (await ltm.recall(ACME, "4471")).memories] == [a.id]
    assert [v.version for v in (await ltm.history(ACME, a.id)).versions] == [1]
    clock.advance(27 * 86_400 + 12 * 3600)  # 30 days after the first remember: 12 hours left
    assert [m.id for m in (await ltm.list(ACME)).memories] == [a.id]
    clock.advance(12 * 3600)
    assert (await ltm.list(ACME)).memories == []


async def test_the_same_text_without_ttl_makes_the_memory_permanent_like_an_update_does(
    ltm: LongTermMemory, clock: ManualClock
) -> None:
    """The last remember decides the expiry whatever its status: without ttl_days the memory no
    longer expires, as an `updated` one already did (and a retry of either call ends the same)."""
    a = await ltm.remember(ACME, "door code 4471", key="door", ttl_days=1)
    again = await ltm.remember(ACME, "door code 4471", key="door")
    assert (again.status, again.version) == ("unchanged", 1)
    clock.advance(10 * 86_400)
    assert [m.id for m in (await ltm.list(ACME)).memories] == [a.id]
    doc = await ltm.memories.find_one({"_id": a.id})
    assert doc is not None and doc["expires_at"] is None
