"""A serving MCP server process holding a warm recall index, and `mongogate erase` run beside it
(two processes on one engine, its write signal shared): the server never recalls an erased
memory afterwards, not after the scope was written to again as often as before, and not while
an erasure killed half way is unfinished (it reads back what the database still holds)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from tests.erase_world import Mongo, erase_cli
from tests.helpers import EXE, ROOT, ok

pytestmark = pytest.mark.anyio

OLD = [
    "Order ORD-58213 was shipped by DHL on Monday.",
    "The cat is called Miso and eats salmon twice a day.",
    "Invoices go to billing@acme.example by the fifth of each month.",
    "The wifi password is taped under the router, RT-4410.",
]
NEW = [
    "The office plant needs water every Thursday.",
    "Parking spot 14 belongs to the visiting auditor.",
    "The printer on floor two jams with glossy paper.",
    "Lunch on Fridays is ordered from the noodle bar.",
]
QUESTIONS = [
    "ORD-58213 DHL",
    "what is the cat called? Miso",
    "where do invoices go?",
    "wifi password RT-4410",
]


@pytest.fixture
async def server(engine_uri: str, db_name: str, tmp_path: Path) -> AsyncIterator[Client]:
    env = {
        "MONGOGATE_SERVER__DATA_DIR": str(tmp_path / "data"),
        "MONGOGATE_DATABASE__URI": engine_uri,
        "MONGOGATE_DATABASE__NAME": db_name,
        "MONGOGATE_AUTH__TENANT": "acme",
        "MONGOGATE_MEMORY__LONG_TERM__MIN_SCORE": "0",
    }
    exe, *args = EXE
    params = StdioServerParameters(command=exe, args=[*args, "serve"], env=env, cwd=str(ROOT))
    async with Client(params) as c:
        yield c


async def recalled(c: Client, query: str) -> list[str]:
    return [m["text"] for m in (await ok(c, "recall", query=query, limit=10, min_score=0))["memories"]]


async def warm(c: Client) -> None:
    for text in OLD:
        await ok(c, "remember", text=text)
    for q, text in zip(QUESTIONS, OLD, strict=True):
        assert text in await recalled(c, q)  # the index is built, and settled


async def test_a_server_with_a_warm_index_never_recalls_an_erased_memory(
    server: Client, engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    await warm(server)
    done = erase_cli(engine_uri, db_name, tmp_path, "--tenant", "acme")
    assert done.returncode == 0, done.stderr
    for text in NEW:  # the scope written again as often as before, before any recall looks
        await ok(server, "remember", text=text)
    for q in QUESTIONS:
        assert not set(await recalled(server, q)) & set(OLD), q
    assert NEW[1] in await recalled(server, "parking spot auditor")


async def test_an_erasure_killed_half_way_never_lets_the_server_recall_what_it_removed(
    server: Client, engine_uri: str, db_name: str, tmp_path: Path, mongo: Mongo
) -> None:
    await warm(server)
    args = ("--tenant", "acme", "--batch-size", "1")
    killed = erase_cli(engine_uri, db_name, tmp_path, *args, crash="erase.after_apply:removed:memories")
    assert killed.returncode == 137, killed.stderr
    left = {d["text"] async for d in mongo[db_name]["memories"].find({"tenant": "acme"}, {"text": 1})}
    assert left and left < set(OLD)  # one removed, the rest not yet
    for q in QUESTIONS:
        got: Any = set(await recalled(server, q))
        assert got <= left, (q, got - left)  # read back: the database decides
    skew = str(10 * 60 * 1000)
    finished = erase_cli(engine_uri, db_name, tmp_path, *args, skew_ms=int(skew))
    assert finished.returncode == 0, finished.stderr
    for q in QUESTIONS:
        assert await recalled(server, q) == [], q
