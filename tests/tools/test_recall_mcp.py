"""The long-term memory tools through the SDK's real client: in-process, over HTTP with tokens
(scope "subject"), and every error path as a coded tool error."""

from __future__ import annotations

import json
import logging
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
from mongogate.specs import RECALL_TOOL_NAMES
from tests.conftest import jwt_auth, make_settings
from tests.helpers import failure, ok

pytestmark = pytest.mark.anyio


async def test_remember_recall_forget_history_in_process(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        a = await ok(
            c, "remember", text="My favourite editor is Helix.", namespace="user/prefs", key="editor"
        )
        assert a["status"] == "created" and a["version"] == 1 and a["namespace"] == "user/prefs"
        again = await ok(
            c, "remember", text="My favourite editor is Helix.", namespace="user/prefs", key="editor"
        )
        assert again == a | {"status": "unchanged"}
        b = await ok(
            c, "remember", text="My favourite editor is Zed now.", namespace="user/prefs", key="editor"
        )
        assert (b["id"], b["status"], b["version"]) == (a["id"], "updated", 2)
        await ok(
            c,
            "remember",
            text="Ticket SUP-8812 is about the broken invoice export.",
            metadata={"kind": "ticket"},
        )
        r = await ok(c, "recall", query="SUP-8812")
        assert r["memories"][0]["text"].startswith("Ticket SUP-8812") and r["returned"] == len(r["memories"])
        assert "untrusted" in r["notice"] and r["truncated"] is False
        assert set(r["memories"][0]) == {
            "id",
            "namespace",
            "key",
            "text",
            "metadata",
            "score",
            "similarity",
            "matched_terms",
            "version",
            "author",
            "created_at",
            "updated_at",
            "occurred_at",
            "source",
            "supersedes",
            "superseded_by",
            "newer_similar",
        }
        assert 0 <= r["memories"][0]["score"] <= 1 and r["memories"][0]["matched_terms"] == ["sup-8812"]
        r = await ok(c, "recall", query="which text editor do I use?", namespace="user", limit=2)
        assert r["memories"][0]["id"] == a["id"]
        r = await ok(c, "recall", query="invoice", metadata={"kind": "other"})
        assert r["memories"] == []
        h = await ok(c, "memory_history", id=a["id"])
        assert [v["text"] for v in h["versions"]] == [
            "My favourite editor is Helix.",
            "My favourite editor is Zed now.",
        ]
        page = await ok(c, "list_memories", limit=1)
        assert len(page["memories"]) == 1 and page["next_cursor"]
        rest = await ok(c, "list_memories", cursor=page["next_cursor"])
        assert len(rest["memories"]) == 1 and rest["next_cursor"] is None
        assert (await ok(c, "forget", namespace="user/prefs", key="editor")) == {"deleted": True}
        assert (await ok(c, "forget", id=a["id"])) == {"deleted": False}
        assert (await failure(c, "memory_history", id=a["id"])).startswith("[not_found]")


async def test_search_messages_finds_words_of_earlier_sessions(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        s1 = (await ok(c, "create_session", title="last week"))["session_id"]
        s2 = (await ok(c, "create_session", title="today"))["session_id"]
        for sid, text in ((s1, "my parcel number is PX-4410, please track it"), (s2, "what is the weather")):
            t = await ok(c, "begin_turn", session_id=sid, turn_id="t1", text=text)
            await ok(c, "end_turn", session_id=sid, turn_id="t1", lease_id=t["lease_id"], reply="noted")
        found = await ok(c, "search_messages", query="PX-4410")
        assert [(m["session_id"], m["seq"], m["role"]) for m in found["messages"]] == [(s1, 1, "user")]
        assert set(found["messages"][0]) == {"session_id", "seq", "role", "content", "created_at", "score"}
        assert "untrusted" in found["notice"]
        assert (await ok(c, "search_messages", query="PX-4410", session_id=s2))["messages"] == []
        assert len((await ok(c, "search_messages", query="noted", limit=5))["messages"]) == 2
        assert (await failure(c, "search_messages", query="x", session_id="nope")).startswith("[not_found]")


ERRORS: list[tuple[str, dict[str, Any], str]] = [
    ("remember", {}, "[invalid_input] argument 'text' is required"),
    ("remember", {"text": "x", "tenant": "globex"}, "[invalid_input] argument 'tenant' is not accepted"),
    ("remember", {"text": "x" * 9000}, "[invalid_input] text is 9000 bytes"),
    ("remember", {"text": "x", "namespace": "a/\u0007"}, "[invalid_input] namespace"),
    ("remember", {"text": "x", "metadata": {"a": {"$gt": 1}}}, "[invalid_input] argument metadata.a.$gt"),
    ("remember", {"text": "x", "metadata": {"a.b": 1}}, "[invalid_input] argument metadata.a.b"),
    ("remember", {"text": "x", "ttl_days": 0}, "[invalid_input] ttl_days"),
    ("remember", {"text": "x", "key": ""}, "[invalid_input] key"),
    ("recall", {"query": ""}, "[invalid_input] query"),
    ("recall", {"query": "x", "limit": 51}, "[invalid_input] limit"),
    ("recall", {"query": "x" * 2001}, "[invalid_input] query is 2001"),
    ("recall", {"query": "x", "metadata": {"a": [1]}}, "[invalid_input] metadata.a"),
    ("forget", {}, "[invalid_input] forget needs id"),
    ("forget", {"id": "x", "key": "k"}, "[invalid_input] forget takes either"),
    ("list_memories", {"cursor": "bogus"}, "[invalid_input] cursor"),
    ("list_memories", {"limit": 101}, "[invalid_input] limit"),
    ("memory_history", {"id": "0" * 32}, "[not_found] no memory"),
    ("memory_history", {"id": "0" * 65}, "[invalid_input] id must be a memory id"),
    ("forget", {"id": "0" * 65}, "[invalid_input] id must be a memory id"),
    ("forget", {"namespace": "a b", "key": "k"}, "[invalid_input] namespace"),
    ("search_messages", {"query": " "}, "[invalid_input] query"),
    ("search_messages", {"query": "x", "session_id": "a:b"}, "[invalid_input] session_id"),
]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def refusing(
    engine_uri: str, module_db: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Client]:
    """One server for every refused call of the module: each case checks that nothing is written,
    so a write by any earlier case would show too."""
    settings = make_settings(engine_uri, module_db, tmp_path_factory.mktemp("refusing"))
    async with Client(build_server(settings)) as c:
        yield c


@pytest.mark.parametrize(("tool", "args", "starts"), ERRORS, ids=[f"{t}-{s[:30]}" for t, _, s in ERRORS])
async def test_each_error_is_coded(refusing: Client, tool: str, args: dict[str, Any], starts: str) -> None:
    text = await failure(refusing, tool, **args)
    assert text.startswith(starts), text
    assert (await ok(refusing, "list_memories"))["memories"] == []  # nothing written


async def test_quota_is_a_coded_refusal(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path, memory={"long_term": {"max_per_scope": 1}})
    async with Client(build_server(settings)) as c:
        await ok(c, "remember", text="first")
        text = await failure(c, "remember", text="second")
        assert text.startswith("[quota_exceeded] ") and "(retryable)" not in text
        assert len((await ok(c, "list_memories"))["memories"]) == 1


async def test_tools_are_described_for_the_model(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools if t.name in RECALL_TOOL_NAMES}
        assert set(tools) == RECALL_TOOL_NAMES
        assert c.instructions is not None and all(n in c.instructions for n in ("remember", "recall"))
    for t in tools.values():
        assert t.title and t.description and t.output_schema is not None
        assert t.input_schema.get("additionalProperties") is False
        assert all(p.get("description") for p in t.input_schema["properties"].values()), t.name
    assert tools["recall"].annotations is not None and tools["recall"].annotations.read_only_hint is True
    assert tools["forget"].annotations is not None and tools["forget"].annotations.destructive_hint is True
    assert "8192 bytes" in tools["remember"].input_schema["properties"]["text"]["description"]


async def test_subject_scope_over_http_keeps_subjects_apart(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings = make_settings(
        engine_uri, db_name, tmp_path, auth=jwt_auth(), memory={"long_term": {"scope": "subject"}}
    )

    def token(tenant: str, subject: str) -> str:
        return mint_dev_token(settings.auth, tenant=tenant, subject=subject, ttl_s=600)

    with BackgroundHttpServer(build_server(settings, transport="http")) as http:

        async def as_(tenant: str, subject: str) -> Any:
            hc = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token(tenant, subject)}"})
            return hc, Client(streamable_http_client(http.url, http_client=hc))

        hc1, alice_client = await as_("acme", "alice")
        hc2, bob_client = await as_("acme", "bob")
        async with hc1, hc2, alice_client as alice, bob_client as bob:
            mine = await ok(alice, "remember", text="Alice's locker code is 5521.", key="locker")
            missing = (await failure(bob, "memory_history", id="f" * 32)).replace("f" * 32, "X")
            hidden = (await failure(bob, "memory_history", id=mine["id"])).replace(mine["id"], "X")
            assert hidden == missing  # exactly like a memory that does not exist
            assert (await ok(bob, "recall", query="locker code 5521"))["memories"] == []
            assert (await ok(bob, "list_memories"))["memories"] == []
            assert (await ok(bob, "forget", id=mine["id"])) == {"deleted": False}
            theirs = await ok(bob, "remember", text="Alice's locker code is 5521.", key="locker")
            assert theirs["status"] == "created" and theirs["id"] != mine["id"]
            assert (await ok(alice, "recall", query="5521"))["memories"][0]["id"] == mine["id"]


async def test_server_log_says_which_vector_path_ran(
    engine_uri: str, db_name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="mongogate")
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        await ok(c, "remember", text="The spare key is under the blue pot.")
        await ok(c, "recall", query="where is the spare key?")
    said = [r.getMessage() for r in caplog.records]
    assert any(
        m.startswith("long-term memory vector path: index (memory.long_term.vector_search = auto)")
        for m in said
    )
    assert any(m.startswith("recall: vector path index") for m in said)


async def test_a_failing_database_is_a_retryable_storage_error(
    engine_uri: str, db_name: str, tmp_path: Path, mongo: Any
) -> None:
    """The engine's failCommand failpoint fails the next insert into memories once, as a server would."""
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        await mongo.admin.command(
            {
                "configureFailPoint": "failCommand",
                "mode": {"times": 1},
                "data": {"failCommands": ["insert"], "errorCode": 2, "namespace": f"{db_name}.memories"},
            }
        )
        text = await failure(c, "remember", text="The gate code is 1234.")
        assert (
            text.startswith("[storage_error] (retryable) could not store the memory") and "(request " in text
        )
        assert (await ok(c, "list_memories"))["memories"] == []
        assert (await ok(c, "remember", text="The gate code is 1234."))["status"] == "created"


@pytest.mark.parametrize("query", ["-only", "---", '""', "{}", '"unbalanced'])
async def test_search_messages_odd_queries_are_answered(
    engine_uri: str, db_name: str, tmp_path: Path, query: str
) -> None:
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        sid = (await ok(c, "create_session"))["session_id"]
        await ok(c, "append", session_id=sid, turn_id="t", role="user", content="only unbalanced words")
        found = await ok(c, "search_messages", query=query)
        assert len(found["messages"]) <= 1


async def test_forced_vector_search_without_its_index_says_what_to_do(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path, memory={"long_term": {"vector_search": "atlas"}})
    async with Client(build_server(settings)) as c:
        await ok(c, "remember", text="The boiler was serviced in May.")
        text = await failure(c, "recall", query="boiler")
        assert text.startswith(
            "[storage_error] (retryable) could not run $vectorSearch: create the search index"
        )
        assert "vector_search = 'scan'" in text


async def test_required_scopes_refuse_every_memory_tool_over_http_and_write_nothing(
    engine_uri: str, db_name: str, tmp_path: Path, mongo: Any
) -> None:
    """`[memory.long_term] required_scopes`: the same per-tool check as a query tool's
    `required_scopes`. A JWT without the scope gets the coded refusal from each of the six tools,
    and nothing is written; one with it is served. The session tools keep needing none."""
    settings = make_settings(
        engine_uri, db_name, tmp_path, auth=jwt_auth(), memory={"long_term": {"required_scopes": ["memory"]}}
    )
    calls: dict[str, dict[str, Any]] = {
        "remember": {"text": "The gate code is 8812."},
        "recall": {"query": "gate code"},
        "forget": {"id": "f" * 32},
        "list_memories": {},
        "memory_history": {"id": "f" * 32},
        "search_messages": {"query": "gate"},
    }
    assert set(calls) == RECALL_TOOL_NAMES
    with BackgroundHttpServer(build_server(settings, transport="http")) as http:
        for scopes in ([], ["other", "memory:read"]):
            token = mint_dev_token(settings.auth, tenant="acme", ttl_s=600, scopes=scopes)
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as hc,
                Client(streamable_http_client(http.url, http_client=hc)) as c,
            ):
                for name, args in calls.items():
                    text = await failure(c, name, **args)
                    assert text.startswith(f"[unauthorized] tool {name!r} requires scope(s) memory "), text
                assert not (await c.call_tool("create_session", {})).is_error
        assert await mongo[db_name]["memories"].count_documents({}) == 0
        token = mint_dev_token(settings.auth, tenant="acme", ttl_s=600, scopes=["memory"])
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as hc,
            Client(streamable_http_client(http.url, http_client=hc)) as c,
        ):
            assert (await ok(c, "remember", text="The gate code is 8812."))["status"] == "created"
            assert (await ok(c, "recall", query="gate code 8812"))["returned"] == 1


async def test_a_local_operator_is_granted_long_term_memorys_required_scopes(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Auth mode "none" (stdio, or --insecure-no-auth): the launch principal is granted every scope
    the server's tools require, long-term memory's too, as it is a query tool's; the HTTP metadata
    lists them. Old code: only the query tools' scopes, so with `[memory.long_term]
    required_scopes` a stdio server refused each of its own memory tools to its only caller."""
    settings = make_settings(
        engine_uri, db_name, tmp_path, memory={"long_term": {"required_scopes": ["memory"]}}
    )
    async with Client(build_server(settings)) as c:
        assert (await ok(c, "remember", text="The gate code is 8812."))["status"] == "created"
        assert (await ok(c, "recall", query="gate code 8812"))["returned"] == 1
    jwt = make_settings(
        engine_uri, db_name, tmp_path, auth=jwt_auth(), memory={"long_term": {"required_scopes": ["memory"]}}
    )
    with BackgroundHttpServer(build_server(jwt, transport="http")) as http:
        async with httpx2.AsyncClient(timeout=30) as hc:
            meta = (
                await hc.get(http.url.removesuffix("/mcp") + "/.well-known/oauth-protected-resource")
            ).json()
    assert "memory" in meta["scopes_supported"]


async def test_the_byte_cap_bounds_the_structured_reply_and_the_text_content_repeats_it(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """What `memory.long_term.max_response_bytes` means (docs/decisions/long-term-memory.md): the
    structured reply, as compact JSON, stays within it (its items and its other fields); the text
    content is that same JSON again, as MCP asks of a tool with structured content, so the reply on
    the wire is at most about twice the cap."""
    cap = 8192
    settings = make_settings(engine_uri, db_name, tmp_path, memory={"long_term": {"max_response_bytes": cap}})
    async with Client(build_server(settings)) as c:
        for i in range(12):
            await ok(c, "remember", text=f"packing list {i}: " + "tent stove rope " * 60, key=f"k{i}")
        for _ in range(3):
            await ok(c, "remember", text="packing list 0 again: " + "tent stove rope " * 60, key="k0")
        calls: dict[str, dict[str, Any]] = {
            "recall": {"query": "packing list tent", "limit": 12},
            "list_memories": {"limit": 12},
            "memory_history": {"id": (await ok(c, "list_memories", limit=12))["memories"][-1]["id"]},
        }
        for name, args in calls.items():
            r = await c.call_tool(name, args)
            assert not r.is_error and isinstance(r.structured_content, dict), name
            structured = json.dumps(r.structured_content, ensure_ascii=False, separators=(",", ":"))
            assert len(structured.encode()) <= cap, (name, len(structured.encode()))
            text = r.content[0].text  # type: ignore[union-attr]
            assert json.loads(text) == r.structured_content, name
            assert len(text.encode()) <= cap + 1024, name  # the copy is the same JSON (with spaces)
        assert r.structured_content["truncated"] is False  # 4 versions of ~1 KB fit
        cut = await ok(c, "recall", query="packing list tent", limit=12)
        assert cut["truncated"] is True and 1 <= cut["returned"] < 12
