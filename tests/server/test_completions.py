"""completion/complete (issue 40 item 4) through the SDK's real Client, in-process and over HTTP:
the caller's own session ids and memory ids by prefix, never another tenant's; a session made or
erased through another server is seen at once (the session_revisions revision); an unknown prompt,
template or argument is -32602; at most 100 values with hasMore."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import PromptReference, ResourceTemplateReference

from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer
from tests.conftest import jwt_auth, make_settings
from tests.helpers import ok

pytestmark = pytest.mark.anyio

SUMMARIZE = PromptReference(name="summarize_session")
CONTEXT = ResourceTemplateReference(uri="mongogate://sessions/{id}/context")
MEMORY = ResourceTemplateReference(uri="mongogate://memories/{id}")


def _server(engine_uri: str, db: str, tmp: Path, tenant: str) -> Any:
    return build_server(make_settings(engine_uri, db, tmp, auth={"mode": "none", "tenant": tenant}))


async def _values(c: Client, ref: Any, arg: str, prefix: str) -> list[str]:
    return list((await c.complete(ref, {"name": arg, "value": prefix})).completion.values)


async def _sessions(c: Client, n: int) -> list[str]:
    return [str((await ok(c, "create_session", title=f"s{i}"))["session_id"]) for i in range(n)]


async def test_session_and_memory_ids_are_the_callers_own(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    acme = _server(engine_uri, db_name, tmp_path, "acme")
    globex = _server(engine_uri, db_name, tmp_path, "globex")
    async with Client(acme) as a, Client(globex) as g:
        assert a.server_capabilities.completions is not None
        mine, theirs = await _sessions(a, 3), await _sessions(g, 2)
        my_mem = (await ok(a, "remember", text="the office is in Lyon", key="office"))["id"]
        their_mem = (await ok(g, "remember", text="the office is in Oslo", key="office"))["id"]
        for ref in (SUMMARIZE, PromptReference(name="extract_memories")):
            assert await _values(a, ref, "session_id", "") == sorted(mine)
        assert await _values(a, CONTEXT, "id", "") == sorted(mine)
        assert await _values(g, CONTEXT, "id", "") == sorted(theirs)
        # by prefix: one of mine by its first characters; another tenant's id by its whole text: nothing
        assert await _values(a, SUMMARIZE, "session_id", mine[0][:12]) == [mine[0]]
        assert await _values(a, SUMMARIZE, "session_id", theirs[0]) == []
        assert await _values(a, MEMORY, "id", "") == [my_mem]
        assert await _values(a, MEMORY, "id", their_mem) == []
        assert await _values(g, MEMORY, "id", "") == [their_mem]
        # a value no id could start with: no values, no error
        assert await _values(a, SUMMARIZE, "session_id", "a:b\n") == []


async def test_a_change_made_through_another_server_is_offered_at_once(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Two servers on one database (two processes of one deployment): each completion index is
    brought up to date by the scope's revision document, never by time."""
    one, two = _server(engine_uri, db_name, tmp_path, "acme"), _server(engine_uri, db_name, tmp_path, "acme")
    async with Client(one) as c1, Client(two) as c2:
        first = await _sessions(c1, 2)
        assert await _values(c2, SUMMARIZE, "session_id", "") == sorted(first)  # read whole once
        [made] = await _sessions(c1, 1)
        assert await _values(c2, SUMMARIZE, "session_id", "") == sorted([*first, made])
        await ok(c1, "delete_session", session_id=first[0])
        assert await _values(c2, SUMMARIZE, "session_id", "") == sorted([first[1], made])
        mem = (await ok(c1, "remember", text="tea, no sugar", key="drink"))["id"]
        assert await _values(c2, MEMORY, "id", "") == [mem]
        await ok(c1, "forget", id=mem)
        assert await _values(c2, MEMORY, "id", "") == []


async def test_at_most_100_values_then_has_more(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    async with Client(_server(engine_uri, db_name, tmp_path, "acme")) as c:
        made = await _sessions(c, 101)
        got = (await c.complete(CONTEXT, {"name": "id", "value": ""})).completion
        assert got.values == sorted(made)[:100] and got.has_more is True and got.total is None
        one = (await c.complete(CONTEXT, {"name": "id", "value": made[0]})).completion
        assert one.values == [made[0]] and one.has_more is False and one.total == 1


@pytest.mark.parametrize(
    ("ref", "arg", "said"),
    [
        (PromptReference(name="nope"), "session_id", "[not_found] no prompt 'nope' to complete"),
        (ResourceTemplateReference(uri="mongogate://x/{id}"), "id", "[not_found] no resource template"),
        (SUMMARIZE, "turn_id", "has no argument 'turn_id' to complete; it takes session_id"),
    ],
)
async def test_an_unknown_prompt_template_or_argument_is_invalid_params(
    engine_uri: str, db_name: str, tmp_path: Path, ref: Any, arg: str, said: str
) -> None:
    async with Client(_server(engine_uri, db_name, tmp_path, "acme")) as c:
        with pytest.raises(MCPError) as e:
            await c.complete(ref, {"name": arg, "value": ""})
        assert e.value.error.code == -32602 and said in e.value.error.message


async def test_over_http_each_token_completes_its_own_ids(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path, auth=jwt_auth())
    tokens = {t: mint_dev_token(settings.auth, tenant=t, ttl_s=600, subject="s") for t in ("acme", "globex")}
    made: dict[str, list[str]] = {}
    with BackgroundHttpServer(build_server(settings, transport="http")) as http:
        for tenant in ("acme", "globex", "acme"):
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {tokens[tenant]}"}, timeout=30) as hc,
                Client(streamable_http_client(http.url, http_client=hc)) as c,
            ):
                if tenant not in made:  # the second acme connection makes none: it finds its own two
                    made[tenant] = await _sessions(c, 2)
                assert await _values(c, SUMMARIZE, "session_id", "") == sorted(made[tenant])
