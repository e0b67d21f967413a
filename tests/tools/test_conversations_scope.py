"""Conversations per subject under `[memory.long_term] scope = "subject"` (`[memory] conversations =
"scope"`, the default), and shared by the tenant with `conversations = "tenant"`: two subjects of one
tenant over HTTP with tokens, through the SDK's real client. Before this, every subject of a tenant
listed, loaded and searched the others' sessions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pymongo import AsyncMongoClient

from mongogate.memory.store import MemoryStore
from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer
from tests.conftest import jwt_auth, make_settings
from tests.helpers import failure, ok

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def two_subjects(settings: Any) -> AsyncIterator[tuple[Any, Any, Any]]:
    def client(tenant: str, subject: str) -> tuple[httpx2.AsyncClient, Any]:
        token = mint_dev_token(settings.auth, tenant=tenant, subject=subject, ttl_s=600)
        hc = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
        return hc, Client(streamable_http_client(http.url, http_client=hc))

    with BackgroundHttpServer(build_server(settings, transport="http")) as http:
        (h1, a), (h2, b), (h3, c) = client("acme", "alice"), client("acme", "bob"), client("globex", "alice")
        async with h1, h2, h3, a as alice, b as bob, c as other_alice:
            yield alice, bob, other_alice


async def talk(c: Any, text: str) -> str:
    sid = str((await ok(c, "create_session", title="mine"))["session_id"])
    t = await ok(c, "begin_turn", session_id=sid, turn_id="t1", text=text)
    await ok(c, "end_turn", session_id=sid, turn_id="t1", lease_id=t["lease_id"], reply="noted")
    return sid


async def test_under_scope_subject_each_subject_sees_only_its_own_conversations(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings = make_settings(
        engine_uri, db_name, tmp_path, auth=jwt_auth(), memory={"long_term": {"scope": "subject"}}
    )
    async with two_subjects(settings) as (alice, bob, other_alice):
        sid = await talk(alice, "my locker code is walrus")
        theirs = await talk(bob, "my locker code is penguin")
        assert [s["session_id"] for s in (await ok(alice, "list_sessions"))["sessions"]] == [sid]
        assert [s["session_id"] for s in (await ok(bob, "list_sessions"))["sessions"]] == [theirs]
        assert (await ok(other_alice, "list_sessions"))["sessions"] == []  # same subject, other tenant
        missing = (await failure(bob, "load_context", session_id="no-such-session")).replace(
            "no-such-session", "X"
        )
        hidden = (await failure(bob, "load_context", session_id=sid)).replace(sid, "X")
        assert hidden == missing  # exactly like a session that does not exist
        found = await ok(bob, "search_messages", query="locker code")
        assert {m["session_id"] for m in found["messages"]} == {theirs}
        assert (await ok(bob, "search_messages", query="walrus"))["messages"] == []
        assert (await failure(bob, "search_messages", query="locker", session_id=sid)).startswith(
            "[not_found]"
        )
        assert (await failure(bob, "begin_turn", session_id=sid, turn_id="t2", text="hi")).startswith(
            "[not_found]"
        )
        assert (await ok(bob, "delete_session", session_id=sid))["deleted"] is False
        ctx = await ok(alice, "load_context", session_id=sid)
        assert [m["content"] for m in ctx["messages"]] == ["my locker code is walrus", "noted"]
        hits = await ok(alice, "search_messages", query="walrus")
        assert [m["session_id"] for m in hits["messages"]] == [sid]


async def test_conversations_tenant_keeps_them_shared_under_scope_subject(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings = make_settings(
        engine_uri,
        db_name,
        tmp_path,
        auth=jwt_auth(),
        memory={"conversations": "tenant", "long_term": {"scope": "subject"}},
    )
    async with two_subjects(settings) as (alice, bob, other_alice):
        sid = await talk(alice, "the meeting room is Orion")
        assert [s["session_id"] for s in (await ok(bob, "list_sessions"))["sessions"]] == [sid]
        assert [m["session_id"] for m in (await ok(bob, "search_messages", query="Orion"))["messages"]] == [
            sid
        ]
        assert (await ok(other_alice, "list_sessions"))["sessions"] == []
        # long-term memories stay per subject all the same
        await ok(alice, "remember", text="Orion is on the third floor.")
        assert (await ok(bob, "recall", query="Orion"))["memories"] == []


async def test_a_subject_that_is_not_valid_unicode_cannot_own_conversations(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """A JWT's `sub` may decode to a lone surrogate: per-subject conversations refuse it with a
    code (`[unauthorized]`), not an internal error."""
    settings = make_settings(
        engine_uri, db_name, tmp_path, auth=jwt_auth(), memory={"long_term": {"scope": "subject"}}
    )
    token = mint_dev_token(settings.auth, tenant="acme", subject="x\ud800", ttl_s=600)
    with BackgroundHttpServer(build_server(settings, transport="http")) as http:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as hc,
            Client(streamable_http_client(http.url, http_client=hc)) as c,
        ):
            assert (await failure(c, "create_session", title="t")).startswith("[unauthorized] ")
            assert (await failure(c, "list_sessions")).startswith("[unauthorized] ")


async def test_prompts_and_resources_follow_the_same_conversations_as_the_tools(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """The session resources and prompts read the caller's conversations as the tools do: under
    per-subject conversations bob neither lists nor reads alice's session (the resources and
    prompts first read by tenant, so bob saw alice's session in `mongogate://sessions`)."""
    from mcp.shared.exceptions import MCPError

    settings = make_settings(
        engine_uri, db_name, tmp_path, auth=jwt_auth(), memory={"long_term": {"scope": "subject"}}
    )
    async with two_subjects(settings) as (alice, bob, _):
        sid = await talk(alice, "my locker code is walrus")
        listed = await bob.list_resources()
        assert all(sid not in str(r.uri) for r in listed.resources)
        with pytest.raises(MCPError):
            await bob.read_resource(f"mongogate://sessions/{sid}/context")
        with pytest.raises(MCPError):
            await bob.get_prompt("summarize_session", {"session_id": sid})
        own = await alice.read_resource(f"mongogate://sessions/{sid}/context")
        assert "walrus" in str(own.contents[0])
        prompt = await alice.get_prompt("summarize_session", {"session_id": sid})
        assert "walrus" in str(prompt.messages[0].content)


async def test_compact_context_follows_the_same_conversations_as_the_tools(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Under per-subject conversations `compact_context` wrote by the plain tenant: alice could
    not compact her own session ([not_found]) while every other tool found it."""
    settings = make_settings(
        engine_uri, db_name, tmp_path, auth=jwt_auth(), memory={"long_term": {"scope": "subject"}}
    )
    async with two_subjects(settings) as (alice, bob, _):
        sid = await talk(alice, "my locker code is walrus")
        assert (
            await failure(bob, "compact_context", session_id=sid, through_seq=2, summary="bob was here")
        ).startswith("[not_found]")
        done = await ok(alice, "compact_context", session_id=sid, through_seq=2, summary="locker: walrus")
        assert done["status"] == "inserted"
        ctx = await ok(alice, "load_context", session_id=sid)
        assert ctx["summary"]["text"] == "locker: walrus"
        assert ctx["messages"] == []


async def test_a_conversation_stores_the_form_existing_databases_hold(
    engine_uri: str, db_name: str, tmp_path: Path, mongo: AsyncMongoClient[dict[str, object]]
) -> None:
    """The scope travels as a value (`MemoryScope`), and what it stores is byte for byte what the
    previous version stored: the tenant and the subject joined by U+001F on the session and its
    messages. A session written that way before is the subject's own; a subject named "*" keeps
    its own sessions apart from the tenant-wide ones (the OpenAI Agents session's)."""
    settings = make_settings(
        engine_uri, db_name, tmp_path, auth=jwt_auth(), memory={"long_term": {"scope": "subject"}}
    )
    db = mongo[db_name]
    earlier = MemoryStore(db, settings.memory)
    old = await earlier.create_session("acme\x1fbob", title="from before")
    shared = await earlier.create_session("acme", title="tenant-wide")
    async with two_subjects(settings) as (alice, bob, _):
        sid = await talk(alice, "the key is under the mat")
        assert [s["session_id"] for s in (await ok(bob, "list_sessions"))["sessions"]] == [old]
    session = await db["sessions"].find_one({"_id": sid})
    assert session is not None and session["tenant"] == "acme\x1falice"
    messages = await db["messages"].find({"session_id": sid}).to_list()
    assert len(messages) == 2 and {m["tenant"] for m in messages} == {"acme\x1falice"}
    token = mint_dev_token(settings.auth, tenant="acme", subject="*", ttl_s=600)
    with BackgroundHttpServer(build_server(settings, transport="http")) as http:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as hc,
            Client(streamable_http_client(http.url, http_client=hc)) as star,
        ):
            mine = str((await ok(star, "create_session", title="star's"))["session_id"])
            listed = [s["session_id"] for s in (await ok(star, "list_sessions"))["sessions"]]
            assert listed == [mine] and shared not in listed
    star_session = await db["sessions"].find_one({"_id": mine})
    assert star_session is not None and star_session["tenant"] == "acme\x1f*"
