"""Red team of the long-term memory tools, as a hostile caller and as another tenant, over the SDK's
real client (in-process, and over HTTP with real tokens). Each test names the attack; the ones that
broke before their fix say so in their docstring."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer
from tests.conftest import jwt_auth, make_settings
from tests.helpers import failure, ok

pytestmark = pytest.mark.anyio

SURROGATE = "\ud800"
#: each entry point that takes a string the model chose; a lone surrogate cannot be stored or queried
SURROGATES: list[tuple[str, dict[str, Any]]] = [
    ("remember", {"text": "x", "metadata": {"a": SURROGATE}}),
    ("remember", {"text": "x", "metadata": {"a": [1, {"b": SURROGATE}]}}),
    ("remember", {"text": "x", "key": SURROGATE}),
    ("recall", {"query": "x", "metadata": {"a": SURROGATE}}),
    ("forget", {"id": SURROGATE}),
    ("memory_history", {"id": SURROGATE}),
    ("list_memories", {"cursor": "WzAsIlx1ZDgwMCJd"}),  # base64url of [0,"\ud800"]
    ("search_messages", {"query": "x " + SURROGATE}),
]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def refusing(
    engine_uri: str, module_db: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Client]:
    """One server for the module's refused calls: each case checks that nothing is written, so a
    write by any earlier case would show too."""
    settings = make_settings(engine_uri, module_db, tmp_path_factory.mktemp("refusing"))
    async with Client(build_server(settings)) as c:
        yield c


@pytest.mark.parametrize(("tool", "args"), SURROGATES, ids=[f"{t}-{sorted(a)}" for t, a in SURROGATES])
async def test_a_lone_surrogate_is_invalid_input_not_an_internal_error(
    refusing: Client, tool: str, args: dict[str, Any]
) -> None:
    """Broke before the fix: `[internal] (retryable) ... failed unexpectedly` (BSON's UnicodeEncodeError).
    An in-process client hands such strings over as they are (a JSON one cannot: the SDK's parser
    refuses a lone surrogate escape with -32700)."""
    text = await failure(refusing, tool, **args)
    assert text.startswith("[invalid_input] ") and "(retryable)" not in text, text
    assert (await ok(refusing, "list_memories"))["memories"] == []


@pytest.mark.parametrize("key", ["a\x85b", "a\x9bb", "line\u2028break", "\u202egnp.exe", "a\u2066b"])
async def test_a_key_with_a_control_or_bidi_character_is_refused(
    engine_uri: str, db_name: str, tmp_path: Path, key: str
) -> None:
    """Broke before the fix: C1 controls (NEL, CSI), line separators and bidi overrides were stored,
    though a key promises "no control characters" (they break log lines and reverse what is read)."""
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        text = await failure(c, "remember", text="x", key=key)
        assert text.startswith("[invalid_input] key"), text
        assert (await ok(c, "list_memories"))["memories"] == []
        assert (await ok(c, "remember", text="x", key="caf\u00e9-\U0001f600"))["status"] == "created"


@pytest.mark.parametrize("namespace", ["a/../b", "..", "./x", "a/.", "a/..."])
async def test_dot_segments_in_a_namespace_are_refused(
    engine_uri: str, db_name: str, tmp_path: Path, namespace: str
) -> None:
    """Broke before the fix: "a/../b" was stored, and read by an operator as the namespace "b";
    recall(namespace="a") included it."""
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        assert (await failure(c, "remember", text="x", namespace=namespace)).startswith("[invalid_input] ")
        assert (await failure(c, "recall", query="x", namespace=namespace)).startswith("[invalid_input] ")
        assert (await ok(c, "remember", text="x", namespace="v1.2/a..b"))["status"] == "created"


async def test_namespaces_are_literal_not_patterns_nor_folded(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Held: '.' and '+' are not regex, a full-width look-alike is another namespace."""
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        for ns in ("user", "uxer", "aa", "\uff55ser"):
            await ok(c, "remember", text=f"fact kept in {ns}", namespace=ns)
        for asked, seen in (("u.er", []), ("a+", []), ("\uff55ser", ["\uff55ser"]), ("user", ["user"])):
            got = await ok(c, "recall", query="fact kept", namespace=asked, limit=10)
            assert [m["namespace"] for m in got["memories"]] == seen, asked
            listed = await ok(c, "list_memories", namespace=asked)
            assert [m["namespace"] for m in listed["memories"]] == seen, asked


@pytest.mark.parametrize(
    "metadata",
    [{"a": {"$ne": 1}}, {"$where": "1"}, {"a.b": 1}, {"$or": [{"a": 1}]}, {"a": {"b": 1}}, {"": 1}],
)
async def test_operators_in_a_metadata_filter_are_refused(
    engine_uri: str, db_name: str, tmp_path: Path, metadata: dict[str, Any]
) -> None:
    """Held: a filter is exact top-level values; no operator, dotted path or object gets through."""
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        await ok(c, "remember", text="the secret plan", metadata={"a": 2, "b": {"c": 1}})
        text = await failure(c, "recall", query="secret plan", metadata=metadata)
        assert text.startswith("[invalid_input] ") and "metadata" in text, text


def escaped_settings(engine_uri: str, db_name: str, tmp_path: Path) -> Any:
    return make_settings(engine_uri, db_name, tmp_path, memory={"long_term": {"max_response_bytes": 16384}})


async def test_memory_history_stays_under_the_byte_cap_when_the_text_needs_escaping(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Broke before the fix: the cap counted raw UTF-8, a control character is six bytes of JSON
    (\\u0001): 7 versions, 84 KB in reply to a 16 KiB cap."""
    async with Client(build_server(escaped_settings(engine_uri, db_name, tmp_path))) as c:
        for i in range(8):
            mid = (await ok(c, "remember", text=f"v{i}" + "\x01" * 2000, key="k"))["id"]
        r = await c.call_tool("memory_history", {"id": mid})
        assert not r.is_error and isinstance(r.structured_content, dict)
        assert len(r.content[0].text.encode()) <= 16384  # type: ignore[union-attr]
        assert r.structured_content["truncated"] is True
        assert r.structured_content["versions"][-1]["text"].startswith("v7")


async def test_search_messages_stays_under_the_byte_cap_when_the_text_needs_escaping(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Broke before the fix: same as memory_history, 85 KB in reply to a 16 KiB cap."""
    async with Client(build_server(escaped_settings(engine_uri, db_name, tmp_path))) as c:
        sid = (await ok(c, "create_session"))["session_id"]
        for i in range(8):
            content = "needle " + "\x01" * 2000
            await ok(c, "append", session_id=sid, turn_id=f"t{i}", role="user", content=content)
        r = await c.call_tool("search_messages", {"query": "needle", "limit": 20})
        assert not r.is_error and isinstance(r.structured_content, dict)
        assert len(r.content[0].text.encode()) <= 16384  # type: ignore[union-attr]
        assert r.structured_content["truncated"] is True and r.structured_content["messages"]


async def test_another_tenant_over_http_meets_only_absence(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Held: with globex's token, acme's ids, cursor, key and session look like ones that never
    existed, for every tool, and nothing globex does touches acme's memory."""
    settings = make_settings(engine_uri, db_name, tmp_path, auth=jwt_auth())
    with BackgroundHttpServer(build_server(settings, transport="http")) as http:

        def client(tenant: str) -> tuple[httpx2.AsyncClient, Client]:
            token = mint_dev_token(settings.auth, tenant=tenant, subject=f"{tenant}-agent", ttl_s=600)
            hc = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
            return hc, Client(streamable_http_client(http.url, http_client=hc))

        (hc1, acme_client), (hc2, globex_client) = client("acme"), client("globex")
        async with hc1, hc2, acme_client as acme, globex_client as globex:
            mine = await ok(
                acme, "remember", text="Vault code ZX-9931 is in drawer 4.", namespace="ops", key="v"
            )
            await ok(acme, "remember", text="Vault code ZX-9931 moved to drawer 5.", namespace="ops", key="v")
            await ok(acme, "remember", text="Second acme fact about ZX-9931.")
            cursor = (await ok(acme, "list_memories", limit=1))["next_cursor"]
            sid = (await ok(acme, "create_session"))["session_id"]
            await ok(acme, "append", session_id=sid, turn_id="t", role="user", content="the word ZX-9931")

            def same(a: str, b: str, secret: str, stand_in: str) -> None:
                assert (
                    a.replace(secret, "X").split(" (request ")[0]
                    == b.replace(stand_in, "X").split(" (request ")[0]
                )

            fake = "0" * 32
            same(
                await failure(globex, "memory_history", id=mine["id"]),
                await failure(globex, "memory_history", id=fake),
                mine["id"],
                fake,
            )
            assert await ok(globex, "forget", id=mine["id"]) == {"deleted": False}
            assert await ok(globex, "forget", namespace="ops", key="v") == {"deleted": False}
            assert (await ok(globex, "recall", query="ZX-9931 vault drawer", namespace="ops"))[
                "memories"
            ] == []
            assert (await ok(globex, "recall", query="ZX-9931"))["memories"] == []
            assert (await ok(globex, "list_memories", cursor=cursor))["memories"] == []
            assert (await ok(globex, "search_messages", query="ZX-9931"))["messages"] == []
            same(
                await failure(globex, "search_messages", query="ZX-9931", session_id=sid),
                await failure(globex, "search_messages", query="ZX-9931", session_id="s-" + "1" * 30),
                sid,
                "s-" + "1" * 30,
            )
            theirs = await ok(
                globex, "remember", text="Vault code ZX-9931 is in drawer 4.", namespace="ops", key="v"
            )
            assert theirs["status"] == "created" and theirs["id"] != mine["id"]
            h = await ok(acme, "memory_history", id=mine["id"])
            assert [v["version"] for v in h["versions"]] == [1, 2]
            assert len((await ok(acme, "list_memories"))["memories"]) == 2


async def test_one_memory_larger_than_the_cap_neither_ends_the_listing_nor_hides_from_recall(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Broke before the fix: a memory whose JSON alone passes max_response_bytes (8 KiB of text that
    needs escaping, a legal size) made its page empty with next_cursor null, so every older memory
    was unreachable by list_memories, and recall answered nothing even with limit 1."""
    async with Client(build_server(escaped_settings(engine_uri, db_name, tmp_path))) as c:
        oldest = await ok(c, "remember", text="the oldest small memory")
        big = await ok(c, "remember", text="bigword " + "\x01" * 8000)
        newest = await ok(c, "remember", text="the newest small memory")
        seen, cursor, pages = [], None, 0
        while pages < 10:
            page = await ok(c, "list_memories", limit=10, **({"cursor": cursor} if cursor else {}))
            seen += [m["id"] for m in page["memories"]]
            cursor, pages = page["next_cursor"], pages + 1
            if cursor is None:
                break
        assert seen == [newest["id"], big["id"], oldest["id"]]
        got = await ok(c, "recall", query="bigword", limit=1)
        assert [m["id"] for m in got["memories"]] == [big["id"]]


async def test_search_messages_returns_a_message_larger_than_the_cap(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Broke before the fix: a message whose JSON passes max_response_bytes was never found (an
    empty answer, truncated); with the defaults, any message near max_message_bytes."""
    async with Client(build_server(escaped_settings(engine_uri, db_name, tmp_path))) as c:
        sid = (await ok(c, "create_session"))["session_id"]
        await ok(c, "append", session_id=sid, turn_id="t", role="user", content="needle " + "z " * 10_000)
        found = await ok(c, "search_messages", query="needle")
        assert [m["seq"] for m in found["messages"]] == [1]


@pytest.mark.parametrize("victim", ["bob\u00a0smith", "bob\tsmith", "bob\u200bsmith"])
async def test_a_subject_spelled_as_anothers_escape_does_not_share_its_memories(
    engine_uri: str, db_name: str, tmp_path: Path, victim: str
) -> None:
    """Broke before the fix: under scope "subject" the owner was the subject as escaped for display
    (auth.printable), which maps 'bob<NBSP>smith' and the literal 'bob\\xa0smith' to one string: a
    caller who could pick such a `sub` read, changed and forgot the other's memories."""
    settings = make_settings(
        engine_uri, db_name, tmp_path, auth=jwt_auth(), memory={"long_term": {"scope": "subject"}}
    )
    impostor = victim.encode("unicode_escape").decode("ascii")
    assert impostor != victim
    with BackgroundHttpServer(build_server(settings, transport="http")) as http:

        def client(subject: str) -> tuple[httpx2.AsyncClient, Client]:
            token = mint_dev_token(settings.auth, tenant="acme", subject=subject, ttl_s=600)
            hc = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
            return hc, Client(streamable_http_client(http.url, http_client=hc))

        (hc1, victim_client), (hc2, impostor_client) = client(victim), client(impostor)
        async with hc1, hc2, victim_client as bob, impostor_client as eve:
            mine = await ok(bob, "remember", text="Bob's bank PIN is 8810.", key="pin")
            assert (await ok(eve, "recall", query="bank PIN 8810"))["memories"] == []
            assert (await ok(eve, "list_memories"))["memories"] == []
            assert (await failure(eve, "memory_history", id=mine["id"])).startswith("[not_found]")
            assert await ok(eve, "forget", namespace="default", key="pin") == {"deleted": False}
            assert (await ok(bob, "recall", query="bank PIN"))["memories"][0]["id"] == mine["id"]


async def test_a_subject_that_is_not_valid_unicode_is_refused_with_a_code(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """A JWT's `sub` may decode to a lone surrogate (JSON allows the escape): under scope "subject"
    it cannot own memories and is `[unauthorized]`, not an internal error; scope "tenant" serves it."""
    for scope, starts in (("subject", "[unauthorized] "), ("tenant", None)):
        settings = make_settings(
            engine_uri,
            f"{db_name}_{scope}",
            tmp_path,
            auth=jwt_auth(),
            memory={"long_term": {"scope": scope}},
        )
        token = mint_dev_token(settings.auth, tenant="acme", subject="x\ud800", ttl_s=600)
        with BackgroundHttpServer(build_server(settings, transport="http")) as http:
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as hc,
                Client(streamable_http_client(http.url, http_client=hc)) as c,
            ):
                if starts is None:
                    assert (await ok(c, "remember", text="a fact"))["status"] == "created"
                else:
                    assert (await failure(c, "remember", text="a fact")).startswith(starts)
