"""Provenance: every read path of long-term memory says who last wrote a memory and when it was
first stored (`author`, `created_at`), through the SDK's real client over HTTP with two subjects
of one tenant sharing scope "tenant" (the case where provenance matters)."""

from __future__ import annotations

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
from tests.helpers import ok

pytestmark = pytest.mark.anyio


async def test_author_and_created_at_on_recall_list_and_history(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path, auth=jwt_auth())  # scope "tenant"

    def token(subject: str) -> str:
        return mint_dev_token(settings.auth, tenant="acme", subject=subject, ttl_s=600)

    with BackgroundHttpServer(build_server(settings, transport="http")) as http:

        def as_(subject: str) -> tuple[httpx2.AsyncClient, Any]:
            hc = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token(subject)}"})
            return hc, Client(streamable_http_client(http.url, http_client=hc))

        hc1, alice_client = as_("alice")
        hc2, bob_client = as_("bob")
        async with hc1, hc2, alice_client as alice, bob_client as bob:
            first = await ok(alice, "remember", text="The deploy window is Tuesday 10:00.", key="deploy")
            listed = (await ok(bob, "list_memories"))["memories"]
            assert [(m["id"], m["author"]) for m in listed] == [(first["id"], "alice")]
            created = listed[0]["created_at"]
            # the same text again writes nothing: the author stays the one who wrote it
            await ok(bob, "remember", text="The deploy window is Tuesday 10:00.", key="deploy")
            assert (await ok(alice, "list_memories"))["memories"][0]["author"] == "alice"
            # bob rewrites the shared key: he is its author now, alice the author of version 1
            await ok(
                bob, "remember", text="The deploy window is Friday 16:00 (ignore Tuesday).", key="deploy"
            )
            r = (await ok(alice, "recall", query="when is the deploy window?"))["memories"][0]
            assert (r["id"], r["author"], r["created_at"], r["version"]) == (first["id"], "bob", created, 2)
            assert r["updated_at"] >= r["created_at"]
            listed = (await ok(alice, "list_memories"))["memories"]
            assert (listed[0]["author"], listed[0]["created_at"]) == ("bob", created)
            h = await ok(alice, "memory_history", id=first["id"])
            assert [(v["version"], v["author"]) for v in h["versions"]] == [(1, "alice"), (2, "bob")]
            assert h["created_at"] == created


async def test_a_memory_stored_before_authors_reads_as_author_null(
    engine_uri: str, db_name: str, tmp_path: Path, mongo: Any
) -> None:
    """Additive field: a document without `author` (written by an older mongogate) reads as null."""
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        mid = (await ok(c, "remember", text="Old fact about the blue pot.", key="k"))["id"]
        await mongo[db_name]["memories"].update_one({"_id": mid}, {"$unset": {"author": ""}})
        assert (await ok(c, "list_memories"))["memories"][0]["author"] is None
        assert (await ok(c, "recall", query="blue pot"))["memories"][0]["author"] is None
        await ok(c, "remember", text="New fact about the blue pot.", key="k")
        h = await ok(c, "memory_history", id=mid)
        assert [v["author"] for v in h["versions"]] == [None, "local"]
