"""MongogateStore: put/get/search by meaning and filter/delete, namespaces, tenant isolation."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("langgraph.store.base", reason="needs the extra: pip install 'mongogate[langgraph]'")

from mongogate.errors import InvalidInput
from mongogate.langgraph import MongogateStore
from tests.conftest import make_settings

pytestmark = pytest.mark.anyio

FACTS = {
    "diet": {"text": "Ana is vegetarian and never eats meat", "kind": "food"},
    "pet": {"text": "Ana has a dog called Bruno", "kind": "animal"},
    "city": {"text": "Ana lives in Lisbon near the river", "kind": "place"},
}


def test_put_get_search_by_meaning_and_filter_then_delete(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path)
    ns = ("users", "ana")
    with MongogateStore.open(settings, tenant="acme") as store:
        for key, value in FACTS.items():
            store.put(ns, key, value)
        store.put(("users", "bob"), "pet", {"text": "Bob has a cat", "kind": "animal"})
        got = store.get(ns, "pet")
        assert got is not None and got.value == FACTS["pet"] and got.namespace == ns and got.key == "pet"
        store.put(ns, "pet", {"text": "Ana has two dogs, Bruno and Rex", "kind": "animal"})
        assert store.get(ns, "pet").value["text"] == "Ana has two dogs, Bruno and Rex"  # type: ignore[union-attr]

        hits = store.search(ns, query="what food does she avoid eating?", limit=1)
        assert [h.key for h in hits] == ["diet"] and hits[0].score is not None
        animals = store.search(("users",), filter={"kind": "animal"})
        assert sorted((h.namespace, h.key) for h in animals) == [
            (("users", "ana"), "pet"),
            (("users", "bob"), "pet"),
        ]
        assert [h.key for h in store.search(ns, query="pets", filter={"kind": "place"})] == ["city"]
        assert len(store.search(ns, limit=2)) == 2 and len(store.search(ns, limit=2, offset=2)) == 1

        assert store.list_namespaces() == [("users", "ana"), ("users", "bob")]
        assert store.list_namespaces(prefix=("users", "bob")) == [("users", "bob")]
        assert store.list_namespaces(max_depth=1) == [("users",)]

        store.delete(ns, "pet")
        assert store.get(ns, "pet") is None
        assert {h.key for h in store.search(ns)} == {"diet", "city"}
        with pytest.raises(InvalidInput):  # a label longer than a namespace segment may be
            store.put(("x" * 100,), "k", {"text": "x"})


def test_a_label_holding_a_slash_stays_one_label(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    """Before (issue 36): ("a/b",) was stored as the namespace a/b and read back as ("a", "b"):
    two namespaces were one, and the second put replaced the first's item."""
    settings = make_settings(engine_uri, db_name, tmp_path)
    with MongogateStore.open(settings, tenant="acme") as store:
        store.put(("a/b",), "k", {"text": "one label"})
        store.put(("a", "b"), "k", {"text": "two labels"})
        store.put(("my notes", "c++", "+2F"), "k", {"text": "spaces, pluses"})
        one, two = store.get(("a/b",), "k"), store.get(("a", "b"), "k")
        assert one is not None and one.value["text"] == "one label" and one.namespace == ("a/b",)
        assert two is not None and two.value["text"] == "two labels" and two.namespace == ("a", "b")
        assert [(h.namespace, h.value["text"]) for h in store.search(("a/b",))] == [(("a/b",), "one label")]
        assert [h.namespace for h in store.search(("a",))] == [("a", "b")]
        odd = store.get(("my notes", "c++", "+2F"), "k")
        assert odd is not None and odd.namespace == ("my notes", "c++", "+2F")
        assert sorted(store.list_namespaces()) == [("a", "b"), ("a/b",), ("my notes", "c++", "+2F")]


def test_another_tenant_sees_none_of_it(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path)
    with MongogateStore.open(settings, tenant="acme") as acme:
        acme.put(("users", "ana"), "diet", FACTS["diet"])
    with MongogateStore.open(settings, tenant="globex") as globex:
        assert globex.get(("users", "ana"), "diet") is None
        assert globex.search(("users",), query="vegetarian") == []
        assert globex.search(("users",)) == []
        assert globex.list_namespaces() == []
        globex.delete(("users", "ana"), "diet")  # nothing of acme's to delete
    with MongogateStore.open(settings, tenant="acme") as acme:
        assert acme.get(("users", "ana"), "diet") is not None


async def test_the_async_interface(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path)
    with MongogateStore.open(settings, tenant="acme") as store:
        await store.aput(("notes",), "n1", {"text": "the release ships on Friday"})
        item = await store.aget(("notes",), "n1")
        assert item is not None and item.value == {"text": "the release ships on Friday"}
        assert [h.key for h in await store.asearch(("notes",), query="when is the release?")] == ["n1"]
        await store.adelete(("notes",), "n1")
        assert await store.aget(("notes",), "n1") is None
