"""list_sessions and delete_session through the SDK's real client, per tenant (stdio principals)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from mongogate.server.app import build_server
from tests.conftest import make_settings
from tests.helpers import failure, ok

pytestmark = pytest.mark.anyio


def _server(engine_uri: str, db_name: str, tmp: Path, tenant: str) -> Client:
    settings = make_settings(engine_uri, db_name, tmp / tenant, auth={"mode": "none", "tenant": tenant})
    return Client(build_server(settings))


async def test_list_pages_the_callers_sessions_only(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    async with _server(engine_uri, db_name, tmp_path, "globex") as other:
        theirs = (await ok(other, "create_session", title="theirs"))["session_id"]
    async with _server(engine_uri, db_name, tmp_path, "acme") as c:
        ids = [(await ok(c, "create_session", title=f"s{i}"))["session_id"] for i in range(3)]
        await ok(c, "append", session_id=ids[0], turn_id="t1", role="user", content="hi")
        first = await ok(c, "list_sessions", limit=2)
        assert first["sessions"][0]["session_id"] == ids[0]  # newest activity first
        assert first["sessions"][0]["last_seq"] == 1 and first["sessions"][0]["title"] == "s0"
        assert first["next_cursor"]
        rest = await ok(c, "list_sessions", limit=2, cursor=first["next_cursor"])
        listed = [s["session_id"] for s in first["sessions"] + rest["sessions"]]
        assert sorted(listed) == sorted(ids) and rest["next_cursor"] is None and theirs not in listed
        # Another tenant's session looks like a missing one, and stays.
        assert await ok(c, "delete_session", session_id=theirs) == {"deleted": False, "messages_deleted": 0}
        bad = await failure(c, "list_sessions", cursor="garbage")
        assert bad.startswith("[invalid_input] cursor is not one list_sessions returned")
    async with _server(engine_uri, db_name, tmp_path, "globex") as other:
        assert [s["session_id"] for s in (await ok(other, "list_sessions"))["sessions"]] == [theirs]


async def test_delete_during_a_turn_then_end_turn_is_not_found(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    async with _server(engine_uri, db_name, tmp_path, "acme") as c:
        sid = (await ok(c, "create_session"))["session_id"]
        start = await ok(c, "begin_turn", session_id=sid, turn_id="t1", text="forget me")
        assert await ok(c, "delete_session", session_id=sid) == {"deleted": True, "messages_deleted": 1}
        text = await failure(
            c, "end_turn", session_id=sid, turn_id="t1", lease_id=start["lease_id"], reply="x"
        )
        assert text == f"[not_found] session '{sid}' not found; create one with create_session"
        assert await ok(c, "delete_session", session_id=sid) == {"deleted": False, "messages_deleted": 0}
        assert (await ok(c, "list_sessions"))["sessions"] == []
