"""MongogateStore's TTL as LangGraph's `BaseStore` defines it: `put(..., ttl=minutes)`, the
`TTLConfig` (`default_ttl`, `refresh_on_read`, `sweep_interval_minutes`), `refresh_ttl` on
get/search, `sweep_ttl` and the sweeper. InMemoryStore has no TTL (`supports_ttl` is False), so
these tests hold the store to LangGraph's contract on the store's own clock (a `ManualClock`:
no wall-clock waiting). Before (issue 40): the store's TTL code was never reached (`put` with a
ttl rounded minutes to whole days; nothing refreshed or swept).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

pytest.importorskip("langgraph.store.memory", reason="needs the extra: pip install 'mongogate[langgraph]'")

from langgraph.store.memory import InMemoryStore

from mongogate.clock import ManualClock
from mongogate.errors import InvalidInput
from mongogate.langgraph import MongogateStore
from tests.conftest import make_settings

NS = ("users", "ana")
MINUTE = 60.0


def open_store(engine_uri: str, db_name: str, tmp_path: Path, clock: Any, **kw: Any) -> Any:
    return MongogateStore.open(make_settings(engine_uri, db_name, tmp_path), tenant="acme", clock=clock, **kw)


def stored(engine_uri: str, db_name: str, key: str) -> int:
    client: MongoClient[dict[str, Any]] = MongoClient(engine_uri)
    with client:
        return client[db_name]["memories"].count_documents({"key": key})


def test_in_memory_store_has_no_ttl_and_this_store_does() -> None:
    assert InMemoryStore.supports_ttl is False and MongogateStore.supports_ttl is True


def test_an_item_expires_after_its_ttl_minutes_everywhere_it_is_read(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    with open_store(engine_uri, db_name, tmp_path, clock) as store:
        store.put(NS, "short", {"text": "the parking code is 4711"}, ttl=10)
        store.put(NS, "kept", {"text": "the office is in Lisbon"})
        clock.advance(9 * MINUTE)
        assert store.get(NS, "short", refresh_ttl=False) is not None
        clock.advance(2 * MINUTE)  # 11 minutes after the put: expired
        assert store.get(NS, "short", refresh_ttl=False) is None
        assert store.get(NS, "short") is None  # a read never brings it back
        assert [h.key for h in store.search(NS, limit=10)] == ["kept"]
        assert [h.key for h in store.search(NS, query="parking code", limit=10)] == ["kept"]
        assert store.get(NS, "kept") is not None  # no ttl: kept
        clock.advance(400 * 24 * 60 * MINUTE)
        assert store.get(NS, "kept") is not None


def test_a_read_refreshes_the_ttl_unless_told_not_to(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    clock = ManualClock()
    with open_store(engine_uri, db_name, tmp_path, clock) as store:
        store.put(NS, "a", {"text": "apples"}, ttl=10)
        store.put(NS, "b", {"text": "bananas"}, ttl=10)
        store.put(NS, "c", {"text": "cherries"}, ttl=10)
        clock.advance(8 * MINUTE)
        assert store.get(NS, "a") is not None  # refresh_ttl defaults to True: 10 more minutes
        assert {h.key for h in store.search(NS, query="bananas", filter={"text": "bananas"})} == {"b"}
        assert store.get(NS, "c", refresh_ttl=False) is not None
        clock.advance(8 * MINUTE)  # 16 minutes after the puts, 8 after the reads
        assert store.get(NS, "a", refresh_ttl=False) is not None
        assert store.get(NS, "b", refresh_ttl=False) is not None
        assert store.get(NS, "c", refresh_ttl=False) is None
        clock.advance(3 * MINUTE)  # 11 minutes after the reads
        assert store.search(NS, refresh_ttl=False) == []


def test_a_put_sets_a_new_ttl_or_none(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    clock = ManualClock()
    with open_store(engine_uri, db_name, tmp_path, clock) as store:
        store.put(NS, "k", {"v": 1}, ttl=5)
        store.put(NS, "k", {"v": 2})  # a put without a ttl keeps the item
        clock.advance(60 * MINUTE)
        assert store.get(NS, "k").value == {"v": 2}
        store.put(NS, "k", {"v": 2}, ttl=5)  # the same value with a ttl: the ttl applies
        clock.advance(6 * MINUTE)
        assert store.get(NS, "k") is None


def test_the_ttl_config_gives_the_default_and_whether_a_read_refreshes(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    ttl = {"default_ttl": 10, "refresh_on_read": False}
    with open_store(engine_uri, db_name, tmp_path, clock, ttl=ttl) as store:
        store.put(NS, "default", {"text": "expires by default"})
        store.put(NS, "forever", {"text": "kept"}, ttl=None)
        clock.advance(8 * MINUTE)
        assert store.get(NS, "default") is not None  # refresh_on_read False: no refresh
        assert store.get(NS, "forever") is not None
        clock.advance(3 * MINUTE)
        assert store.get(NS, "default") is None
        assert store.get(NS, "forever") is not None
        store.put(NS, "asked", {"text": "refreshed when asked"})
        clock.advance(8 * MINUTE)
        assert store.get(NS, "asked", refresh_ttl=True) is not None
        clock.advance(8 * MINUTE)
        assert store.get(NS, "asked") is not None


def test_sweep_ttl_erases_the_expired_memories(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    clock = ManualClock()
    with open_store(engine_uri, db_name, tmp_path, clock) as store:
        for i in range(3):
            store.put(NS, f"gone{i}", {"text": f"temporary {i}"}, ttl=1)
        store.put(NS, "later", {"text": "expires later"}, ttl=60)
        store.put(NS, "kept", {"text": "kept"})
        assert store.sweep_ttl() == 0
        clock.advance(2 * MINUTE)
        assert stored(engine_uri, db_name, "gone0") == 1  # expired, not yet erased
        assert store.sweep_ttl() == 3
        assert [stored(engine_uri, db_name, k) for k in ("gone0", "gone1", "gone2")] == [0, 0, 0]
        assert stored(engine_uri, db_name, "later") == 1 and stored(engine_uri, db_name, "kept") == 1
        assert store.sweep_ttl() == 0


class SteppedClock(ManualClock):
    """A clock whose `sleep` waits for the test: `waiting` is released each time the sweeper is
    about to sleep (a round done), `go` lets one sleep pass (the clock moves by its seconds)."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Semaphore(0)
        self.go = threading.Semaphore(0)

    async def sleep(self, seconds: float) -> None:
        self.waiting.release()
        await asyncio.get_running_loop().run_in_executor(None, self.go.acquire)
        await super().sleep(seconds)


def test_the_sweeper_runs_every_interval_of_the_store_clock(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    clock = SteppedClock()
    with open_store(engine_uri, db_name, tmp_path, clock, ttl={"sweep_interval_minutes": 5}) as store:
        assert clock.waiting.acquire(timeout=60)  # the sweeper started with the store
        store.put(NS, "gone", {"text": "temporary"}, ttl=3)
        store.put(NS, "later", {"text": "later"}, ttl=7)
        clock.go.release()  # 5 minutes pass, a round sweeps
        assert clock.waiting.acquire(timeout=60)
        assert stored(engine_uri, db_name, "gone") == 0 and stored(engine_uri, db_name, "later") == 1
        clock.go.release()  # 10 minutes
        assert clock.waiting.acquire(timeout=60)
        assert stored(engine_uri, db_name, "later") == 0
        running = store.start_ttl_sweeper()  # already running: the same task
        assert store.stop_ttl_sweeper(timeout=60) and running.result(timeout=60) is None
        clock.go.release()  # the executor thread of the cancelled sleep
    assert clock.now() == ManualClock().now().replace(minute=10)


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"ttl": {"sweep_interval_minutes": 0}}, "sweep_interval_minutes"),
        ({"ttl": {"default_ttl": -1}}, "ttl.default_ttl"),
        ({"ttl": {"refresh_on_read": "yes"}}, "refresh_on_read"),
        ({"ttl": {"expire": 5}}, "TTLConfig"),
    ],
)
def test_a_ttl_config_it_cannot_follow_is_a_clear_error(
    engine_uri: str, db_name: str, tmp_path: Path, kw: dict[str, Any], says: str
) -> None:
    with pytest.raises(InvalidInput, match=says):
        open_store(engine_uri, db_name, tmp_path, ManualClock(), **kw).__enter__()


def test_a_ttl_out_of_range_is_a_clear_error_and_stores_nothing(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    with open_store(engine_uri, db_name, tmp_path, ManualClock()) as store:
        for ttl in (0, -5, 10**9):
            with pytest.raises(InvalidInput, match="give minutes"):
                store.put(NS, "k", {"v": 1}, ttl=ttl)
        assert store.get(NS, "k") is None
