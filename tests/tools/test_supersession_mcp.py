"""Supersession and the similar-fact notice (issue 39 items 1-2) through the SDK's real client:
in-process with the injectable clock, and two real server processes, one killed between the two
halves of a link and the call retried on the other."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from mongogate.clock import ManualClock
from mongogate.server.app import build_server
from tests import fault_harness
from tests.conftest import make_settings
from tests.helpers import ROOT, failure, http_servers, ok

pytestmark = pytest.mark.anyio

PARIS = "Alice lives in Paris."
BERLIN = "Alice now lives in Berlin."
ROME = "Alice has moved on again and now lives in Rome."
CAT = "The cat is called Miso and eats salmon twice a day."
WHERE = "Where does Alice live?"


async def texts(c: Client, **args: Any) -> list[str]:
    got = await ok(c, "recall", query=WHERE, min_score=0, **args)
    return sorted(m["text"] for m in got["memories"])


def server(engine_uri: str, db_name: str, tmp_path: Path, clock: ManualClock, **more: Any) -> Any:
    return build_server(make_settings(engine_uri, db_name, tmp_path, **more), clock=clock)


async def test_supersedes_leaves_the_old_fact_out_marks_it_and_shows_the_chain(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    async with Client(server(engine_uri, db_name, tmp_path, clock)) as c:
        paris = await ok(c, "remember", text=PARIS)
        await ok(c, "remember", text=CAT)
        assert await texts(c) == sorted([CAT, PARIS])
        clock.advance(3600)
        in_paris = clock.now().isoformat()
        clock.advance(3600)
        berlin = await ok(c, "remember", text=BERLIN, supersedes=paris["id"])
        stated = clock.now().isoformat()
        assert berlin["status"] == "created" and berlin["supersedes"] == [{"id": paris["id"], "at": stated}]
        assert berlin["similar"] == []  # the one close to it is the one it replaces
        assert await texts(c) == sorted([BERLIN, CAT])  # the default: the replaced one left out

        every = {
            m["text"]: m for m in (await ok(c, "recall", query=WHERE, include_superseded=True))["memories"]
        }
        assert every[PARIS]["superseded_by"] == [{"id": berlin["id"], "at": stated}]
        assert every[BERLIN]["supersedes"] == [{"id": paris["id"], "at": stated}]
        assert every[BERLIN]["superseded_by"] == [] and every[PARIS]["supersedes"] == []
        assert await texts(c, as_of=in_paris) == sorted([CAT, PARIS])  # what was current then

        # a retry after a lost reply: the same answer, no new link time, nothing stored twice
        again = await ok(c, "remember", text=BERLIN, supersedes=paris["id"])
        assert again == berlin | {"status": "unchanged", "similar": again["similar"]}
        clock.advance(3600)
        rome = await ok(c, "remember", text=ROME, key="alice.home", supersedes=[berlin["id"], paris["id"]])
        assert [k["id"] for k in rome["supersedes"]] == sorted([berlin["id"], paris["id"]])
        assert await texts(c) == sorted([CAT, ROME])
        assert await texts(c, as_of=stated) == sorted([BERLIN, CAT])

        listed = {m["text"]: m for m in (await ok(c, "list_memories"))["memories"]}
        assert set(listed) == {PARIS, BERLIN, ROME, CAT}  # a listing shows everything, marked
        assert [k["id"] for k in listed[PARIS]["superseded_by"]] == [berlin["id"], rome["id"]]
        assert [k["id"] for k in listed[BERLIN]["superseded_by"]] == [rome["id"]]
        h = await ok(c, "memory_history", id=berlin["id"])
        assert [k["id"] for k in h["supersedes"]] == [paris["id"]]
        assert [k["id"] for k in h["superseded_by"]] == [rome["id"]]

        # by key, in the new memory's namespace; forgetting the newer one brings the older back
        fourth = await ok(c, "remember", text="Alice lives in Oslo now.", supersedes="alice.home")
        assert fourth["supersedes"][0]["id"] == rome["id"]
        assert (await ok(c, "forget", id=fourth["id"]))["deleted"] is True
        assert await texts(c) == sorted([CAT, ROME])


REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"supersedes": "no-such-key"}, "[not_found] supersedes: no memory 'no-such-key'"),
    ({"supersedes": []}, "[invalid_input] "),
    ({"supersedes": ["a"] * 11}, "[invalid_input] "),
    ({"supersedes": "x" * 300}, "[invalid_input] "),
]


@pytest.mark.parametrize(("args", "error"), REFUSED)
async def test_a_refused_supersedes_is_a_clear_error_and_stores_nothing(
    engine_uri: str, db_name: str, tmp_path: Path, args: dict[str, Any], error: str
) -> None:
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        assert (await failure(c, "remember", text=BERLIN, **args)).startswith(error)
        assert (await ok(c, "list_memories"))["memories"] == []


async def test_another_tenants_memory_cannot_be_superseded_and_reads_as_missing(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    globex = make_settings(engine_uri, db_name, tmp_path / "g", auth={"mode": "none", "tenant": "globex"})
    async with (
        Client(build_server(globex)) as g,
        Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as a,
    ):
        theirs = await ok(g, "remember", text=PARIS, key="alice.home")
        for ref in (theirs["id"], "alice.home"):
            err = await failure(a, "remember", text=BERLIN, supersedes=ref)
            assert err.startswith("[not_found] supersedes: no memory") and "Nothing was stored" in err
        assert (await ok(a, "list_memories"))["memories"] == []
        assert await texts(g) == [PARIS]  # untouched


async def test_remember_lists_very_close_older_memories_and_recall_marks_them(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    async with Client(server(engine_uri, db_name, tmp_path, clock)) as c:
        paris = await ok(c, "remember", text=PARIS)
        await ok(c, "remember", text=CAT)
        await texts(c)  # this server holds the scope's index from now on
        clock.advance(60)
        berlin = await ok(c, "remember", text=BERLIN)
        assert [(s["id"], s["text"]) for s in berlin["similar"]] == [(paris["id"], PARIS)]
        assert 0.6 <= berlin["similar"][0]["score"] < 1
        got = {m["text"]: m for m in (await ok(c, "recall", query=WHERE))["memories"]}
        assert got[PARIS]["newer_similar"]["id"] == berlin["id"]
        assert got[BERLIN]["newer_similar"] is None  # nothing newer is like it
        # the model decides it is an update: the notice is settled, the old fact left out
        again = await ok(c, "remember", text=BERLIN, supersedes=paris["id"])
        assert (again["status"], again["similar"]) == ("unchanged", None)  # no new fact: not checked
        assert await texts(c) == sorted([BERLIN, CAT])
        unrelated = await ok(c, "remember", text="The standup moved to 10:00 every morning.")
        assert unrelated["similar"] == []


def stdio(env: dict[str, str], crash_at: str | None = None) -> StdioServerParameters:
    exe, *args = fault_harness.command(crash=crash_at)
    return StdioServerParameters(command=exe, args=[*args, "serve"], env=env, cwd=str(ROOT))


@pytest.fixture
def env(tmp_path: Path, engine_uri: str, db_name: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")} | {
        "MONGOGATE_SERVER__DATA_DIR": str(tmp_path / "data"),
        "MONGOGATE_DATABASE__URI": engine_uri,
        "MONGOGATE_DATABASE__NAME": db_name,
        "MONGOGATE_AUTH__TENANT": "acme",
    }


async def test_a_server_killed_between_the_halves_of_a_link_leaves_the_old_fact_current_until_the_retry(
    env: dict[str, str],
) -> None:
    """The process dies after the newer memory's half of the link, before the older one's and any
    reply: no reader takes half a link for a link; the retry on another process finishes it with
    the link's first time."""
    with http_servers((env, [])) as [url]:
        async with Client(url) as a:
            paris = await ok(a, "remember", text=PARIS)
            assert await texts(a) == [PARIS]  # warm: it must see the retry's change at once
            with pytest.raises(Exception):  # noqa: B017 - the connection dies with the server
                async with Client(stdio(env, crash_at="remember.after_link")) as b:
                    await b.call_tool("remember", {"text": BERLIN, "supersedes": paris["id"]})
            assert await texts(a) == sorted([BERLIN, PARIS])  # half a link replaces nothing
            listed = {m["text"]: m for m in (await ok(a, "list_memories"))["memories"]}
            assert listed[PARIS]["superseded_by"] == []
            first_at = listed[BERLIN]["supersedes"][0]["at"]
            retry = await ok(a, "remember", text=BERLIN, supersedes=paris["id"])
            assert retry["status"] == "unchanged" and retry["supersedes"] == [
                {"id": paris["id"], "at": first_at}
            ]
            assert await texts(a) == [BERLIN]


async def test_two_server_processes_superseding_one_fact_at_once_keep_both_links(
    env: dict[str, str], tmp_path: Path
) -> None:
    envs = [env | {"MONGOGATE_SERVER__DATA_DIR": str(tmp_path / n)} for n in ("a", "b")]
    with http_servers((envs[0], []), (envs[1], [])) as [url_a, url_b]:
        async with Client(url_a) as a, Client(url_b) as b:
            paris = await ok(a, "remember", text=PARIS)
            assert await texts(a) == [PARIS] == await texts(b)  # both warm
            made: dict[str, dict[str, Any]] = {}

            async def one(c: Client, text: str) -> None:
                made[text] = await ok(c, "remember", text=text, supersedes=paris["id"])

            async with anyio.create_task_group() as tg:
                tg.start_soon(one, a, BERLIN)
                tg.start_soon(one, b, ROME)
            for c in (a, b):
                assert await texts(c) == sorted([BERLIN, ROME])
            h = await ok(b, "memory_history", id=paris["id"])
            assert sorted(k["id"] for k in h["superseded_by"]) == sorted(m["id"] for m in made.values())
            listed = {m["text"]: m for m in (await ok(a, "list_memories"))["memories"]}
            assert await texts(b, as_of=listed[PARIS]["created_at"]) == [PARIS]
