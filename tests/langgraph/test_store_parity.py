"""MongogateStore against LangGraph's own `InMemoryStore`: the same calls, the same answers.

put/get/delete/search/list_namespaces, filters with every operator LangGraph defines, the index
configuration (which fields are embedded, `index=False`), large values. Where the answers differ
on purpose (docs/frameworks.md, "What differs from InMemoryStore"), the test says so: a listing
is newest first here (InMemoryStore: insertion order), so listings compare as sets; a range
operator matches numbers only here where InMemoryStore raises on what `float()` refuses.
TTL, which InMemoryStore does not support, is in test_store_ttl.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

pytest.importorskip("langgraph.store.memory", reason="needs the extra: pip install 'mongogate[langgraph]'")

from langgraph.store.base import BaseStore, IndexConfig
from langgraph.store.memory import InMemoryStore

from mongogate.errors import InvalidInput
from mongogate.langgraph import MongogateStore
from mongogate.recall import LocalEmbedder
from tests.conftest import make_settings

NUMBERS = {
    f"k{i}": {"n": n, "kind": "ab"[i % 2], "flag": i % 3 == 0}
    for i, n in enumerate([0, 1, 2.5, 3, 4, 5, 7.25, 10])
}

FILTERS: list[dict[str, Any]] = [
    {"n": {"$gt": 3}},
    {"n": {"$gte": 3}},
    {"n": {"$lt": 3}},
    {"n": {"$lte": 3}},
    {"n": {"$eq": 3}},
    {"n": {"$ne": 3}},
    {"n": {"$gt": 1, "$lte": 5}},
    {"n": {"$gte": 2.5, "$ne": 4}},
    {"n": 3},
    {"n": 3.0},
    {"kind": "a", "n": {"$lt": 5}},
    {"kind": {"$ne": "a"}},
    {"kind": {"$eq": "b"}, "flag": True},
    {"flag": {"$ne": True}},
    {"n": {"$gt": 100}},
    {"missing": None},
    {"missing": {"$ne": 1}},
]


def keys(found: list[Any]) -> list[str]:
    return sorted(f.key for f in found)


@pytest.fixture
def ours(engine_uri: str, db_name: str, tmp_path: Path) -> Any:
    with MongogateStore.open(make_settings(engine_uri, db_name, tmp_path), tenant="acme") as store:
        yield store


def put_both(stores: tuple[BaseStore, ...], ns: tuple[str, ...], items: dict[str, dict[str, Any]]) -> None:
    for store in stores:
        for key, value in items.items():
            store.put(ns, key, value)


@pytest.mark.parametrize("filt", FILTERS, ids=[json.dumps(f) for f in FILTERS])
def test_filters_with_every_operator_answer_as_in_memory_store(
    ours: MongogateStore, filt: dict[str, Any]
) -> None:
    """Before (issue 40): `filter={"n": {"$gt": 3}}` raised "[invalid_input] ... key '$gt'
    cannot be stored"; now each LangGraph operator selects what InMemoryStore selects, listed and
    ranked by a query alike."""
    theirs = InMemoryStore()
    put_both((ours, theirs), ("nums",), NUMBERS)
    expected = keys(theirs.search(("nums",), filter=filt, limit=50))
    assert keys(ours.search(("nums",), filter=filt, limit=50)) == expected
    assert keys(ours.search(("nums",), query="a number", filter=filt, limit=20)) == expected


def test_where_in_memory_store_raises_a_range_matches_numbers_only(ours: MongogateStore) -> None:
    """InMemoryStore compares float(value) and raises on a missing key, null, a list or text;
    here a range matches numbers (or strings with a string bound) and nothing else, the same in
    the database as in recall's in-process index."""
    mixed: dict[str, dict[str, Any]] = {
        "none": {"n": None},
        "absent": {"other": 1},
        "text": {"n": "5"},
        "bool": {"n": True},
        "list": {"n": [1, 7]},
        "four": {"n": 4},
        "word": {"n": "kiwi"},
    }
    theirs = InMemoryStore()
    put_both((ours, theirs), ("mixed",), mixed)
    with pytest.raises((TypeError, ValueError)):
        theirs.search(("mixed",), filter={"n": {"$gt": 3}})
    for query in (None, "n"):
        assert keys(ours.search(("mixed",), query=query, filter={"n": {"$gt": 3}})) == ["four"]
        assert keys(ours.search(("mixed",), query=query, filter={"n": {"$gte": "k"}})) == ["word"]
        # equality where InMemoryStore answers too: the same answer
        for same in ({"n": {"$ne": 4}}, {"n": {"$eq": None}}, {"n": "5"}, {"n": {"$ne": "5"}}):
            assert keys(ours.search(("mixed",), query=query, filter=same)) == keys(
                theirs.search(("mixed",), filter=same)
            ), same
        # MongoDB's equality, not Python's: 1 is not True, and a list holding 1 equals 1
        assert keys(ours.search(("mixed",), query=query, filter={"n": 1})) == ["list"]
        assert keys(theirs.search(("mixed",), filter={"n": 1})) == ["bool"]


@pytest.mark.parametrize(
    ("filt", "says"),
    [
        ({"n": {"$in": [1, 2]}}, "not one of LangGraph's operators"),
        ({"n": {"$gt": True}}, "a range compares with a number or a string"),
        ({"n": {"$gt": 1, "$lt": "z"}}, "use one kind"),
        ({"n": {"a": 1}}, "matches top-level values"),
        ({"n": [1, 2]}, "matches top-level values"),
        ({"mongogate:unindexed": True}, "mongogate's own"),
    ],
)
def test_a_filter_it_cannot_answer_is_a_clear_error(
    ours: MongogateStore, filt: dict[str, Any], says: str
) -> None:
    with pytest.raises(InvalidInput, match=says):
        ours.search(("nums",), filter=filt)


def test_put_get_delete_and_namespaces_answer_as_in_memory_store(ours: MongogateStore) -> None:
    theirs = InMemoryStore()
    data: dict[tuple[str, ...], dict[str, dict[str, Any]]] = {
        ("users", "ana"): {
            "diet": {"text": "vegetarian", "tags": ["food"]},
            "pet": {"name": "Bruno", "age": 3},
        },
        ("users", "bob"): {
            "pet": {"name": "Rex", "nested": {"a": [1, {"b": None}]}},
            "diet": {"text": "anything"},
        },
        ("docs",): {"d1": {"title": "Guide", "n": 1.5}},
        ("docs", "drafts", "2025"): {"d2": {"title": "Draft"}},
    }
    for ns, items in data.items():
        put_both((ours, theirs), ns, items)
    put_both((ours, theirs), ("users", "ana"), {"pet": {"name": "Bruno", "age": 4}})  # an update
    for store in (ours, theirs):
        store.delete(("users", "bob"), "pet")
        store.delete(("users", "bob"), "never-there")

    def got(store: BaseStore, ns: tuple[str, ...], key: str) -> Any:
        item = store.get(ns, key)
        return None if item is None else (item.namespace, item.key, item.value)

    for ns, items in data.items():
        for key in items:
            assert got(ours, ns, key) == got(theirs, ns, key)
    assert got(ours, ("users", "bob"), "pet") is None
    for kwargs in (
        {},
        {"prefix": ("users",)},
        {"suffix": ("2025",)},
        {"prefix": ("docs", "*")},
        {"max_depth": 1},
        {"max_depth": 2},
        {"limit": 1, "offset": 1},
        {"prefix": ("nobody",)},
    ):
        assert ours.list_namespaces(**kwargs) == theirs.list_namespaces(**kwargs), kwargs
    for prefix in ((), ("users",), ("docs",), ("docs", "drafts")):
        every = keys(theirs.search(prefix, limit=50))
        assert keys(ours.search(prefix, limit=50)) == every
        pages = [ours.search(prefix, limit=2, offset=o) for o in range(0, len(every) + 2, 2)]
        assert sorted(k for page in pages for k in keys(page)) == every  # paging covers it, once
    # a namespace whose last item is deleted is no longer listed, as PostgresStore answers;
    # InMemoryStore keeps listing every namespace it has seen, even one only read
    for store in (ours, theirs):
        store.delete(("users", "bob"), "diet")
    assert ("users", "bob") in theirs.list_namespaces()
    assert ours.list_namespaces() == [ns for ns in theirs.list_namespaces() if ns != ("users", "bob")]


def test_index_fields_choose_what_is_embedded(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    """Before (issue 40): the store's `index` was not taken and `put(..., index=False)` was
    embedded like any other item. Now the fields named are the memory's text (what recall embeds
    and matches); an unindexed item has no score and comes after the ranked ones, as in
    InMemoryStore given the same embedder."""
    embedder = LocalEmbedder()
    theirs = InMemoryStore(index={"dims": 256, "embed": embedder.embed_sync, "fields": ["about"]})
    items = {
        "diet": {"about": "Ana is vegetarian and never eats meat", "notes": "a red bicycle"},
        "pet": {"about": "Bruno the dog loves long walks in the park", "notes": "likes cheese"},
        "office": {"about": "The office moved to Lisbon near the river", "notes": "parking"},
    }
    with MongogateStore.open(
        make_settings(engine_uri, db_name, tmp_path), tenant="acme", index=IndexConfig(fields=["about"])
    ) as ours:
        put_both((ours, theirs), ("facts",), items)
        for store in (ours, theirs):
            store.put(("facts",), "cookbook", {"about": "vegetarian recipes without meat"}, index=False)
            store.put(("facts",), "bike", {"about": "ignored", "notes": "a red bicycle"}, index=["notes"])
        for query, top in [
            ("what food does she refuse to eat", "diet"),
            ("which animal enjoys walking outside", "pet"),
            ("where is the workplace", "office"),
            ("red bicycle", "bike"),
        ]:
            assert ours.search(("facts",), query=query, limit=1)[0].key == top
            assert theirs.search(("facts",), query=query, limit=1)[0].key == top
        for store in (ours, theirs):
            page = store.search(("facts",), query="vegetarian meat", limit=10)
            assert [h.key for h in page][-1] == "cookbook" and page[-1].score is None
            assert all(h.score is not None for h in page[:-1]) and len(page) == 5
            assert store.get(("facts",), "cookbook").value == {"about": "vegetarian recipes without meat"}  # type: ignore[union-attr]
    client: MongoClient[dict[str, Any]] = MongoClient(engine_uri)
    with client:
        texts = {m["key"]: m["text"] for m in client[db_name]["memories"].find({})}
    assert texts["diet"] == "Ana is vegetarian and never eats meat" and texts["bike"] == "a red bicycle"
    copied: Any = {
        "dims": 256,
        "embed": embedder.embed_sync,
        "fields": ["about"],
    }  # as InMemoryStore takes it
    with pytest.raises(InvalidInput, match="embeds with mongogate's model"):
        MongogateStore.open(
            make_settings(engine_uri, db_name, tmp_path), tenant="acme", index=copied
        ).__enter__()


def test_a_value_as_large_as_the_memory_limits_allow(ours: MongogateStore) -> None:
    """Before (issue 40): a value with more than 8 KB of text was refused (the text limit of a
    memory); now its first `max_text_bytes` are indexed and the whole value is kept, up to the
    metadata limits (`[limits]`), past which the error names the setting."""
    theirs = InMemoryStore()
    words = " ".join(f"word{i}" for i in range(2000))  # about 17 KB
    big = {"text": words[:15_000], "n": 1}
    put_both((ours, theirs), ("big",), {"doc": big})
    assert ours.get(("big",), "doc").value == theirs.get(("big",), "doc").value == big  # type: ignore[union-attr]
    assert [h.key for h in ours.search(("big",), query="word17")] == ["doc"]
    with pytest.raises(InvalidInput, match=r"metadata_max_chars") as refused:
        ours.put(("big",), "huge", {"text": words})
    assert "('big',)/'huge'" in str(refused.value)
    theirs.put(("big",), "huge", {"text": words})  # InMemoryStore has no limit
    assert ours.get(("big",), "huge") is None
