"""One rule on both sides of memory/ and recall/ (issue 30): the page cursor (`keyset.py`), the
query check and the lone-surrogate rule (`values.py`), and the response byte cap (`values.within`),
through the SDK's real client. Each table sends the same value to a conversation tool and a
long-term memory tool and expects the same kind of answer."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from mcp import Client

from mongogate.keyset import MAX_CURSOR_CHARS, encode_cursor
from mongogate.server.app import build_server
from tests.conftest import make_settings
from tests.helpers import failure, ok

pytestmark = pytest.mark.anyio

CAP = 8192


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def client(
    engine_uri: str, module_db: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Client]:
    settings = make_settings(
        engine_uri,
        module_db,
        tmp_path_factory.mktemp("shared"),
        memory={"long_term": {"max_response_bytes": CAP}},
    )
    async with Client(build_server(settings)) as c:
        yield c


def _b64(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


#: cursors no list tool returned: each is refused by both, naming the tool
BAD_CURSORS = {
    "lone surrogate": _b64('[0,"\\ud800"]'),
    "over the limit": "A" * (MAX_CURSOR_CHARS + 1),
    "not base64 json": "garbage",
    "not [int, str]": _b64('["x","y"]'),
    "a bool for the time": _b64('[true,"x"]'),
    "time out of range": _b64('[99999999999999999,"x"]'),
    "empty": "",
}
LISTS = ["list_sessions", "list_memories"]


@pytest.mark.parametrize("tool", LISTS)
@pytest.mark.parametrize("cursor", list(BAD_CURSORS.values()), ids=list(BAD_CURSORS))
async def test_a_forged_cursor_is_refused_alike_by_both_lists(client: Client, tool: str, cursor: str) -> None:
    text = await failure(client, tool, cursor=cursor)
    assert text.startswith(f"[invalid_input] cursor is not one {tool} returned"), text


@pytest.mark.parametrize("tool", LISTS)
async def test_a_long_cursor_within_the_limit_is_read_by_both_lists(client: Client, tool: str) -> None:
    """Broke before on list_memories: it refused any cursor over 512 characters, list_sessions any
    over 2,048; both now take the same ones (here ~700 characters, after every row)."""
    cursor = encode_cursor(datetime(2000, 1, 1, tzinfo=UTC), "\u00e9" * 80)
    assert 512 < len(cursor) <= MAX_CURSOR_CHARS
    page = await ok(client, tool, cursor=cursor)
    assert page["next_cursor"] is None


#: (query, what the refusal says): the same check for search_messages and recall
BAD_QUERIES = [
    ("", "[invalid_input] query must be a non-empty string: the words or identifier to look for"),
    ("   ", "[invalid_input] query must be a non-empty string: the words or identifier to look for"),
    ("x \ud800", "[invalid_input] query is not valid Unicode (it holds a lone surrogate)"),
]
SEARCHES = ["search_messages", "recall"]


@pytest.mark.parametrize("tool", SEARCHES)
@pytest.mark.parametrize(("query", "says"), BAD_QUERIES, ids=["empty", "blank", "lone surrogate"])
async def test_the_query_check_is_the_same_on_both_searches(
    client: Client, tool: str, query: str, says: str
) -> None:
    """Broke before: the two searches worded an empty query differently (the checks had drifted)."""
    assert await failure(client, tool, query=query) == says


#: (tool, arguments) storing a string the caller chose, one holding a lone surrogate
STORED: list[tuple[str, dict[str, Any], str]] = [
    ("create_session", {"title": "a\ud800"}, "title"),
    ("remember", {"text": "a\ud800"}, "text"),
    ("remember", {"text": "x", "key": "a\ud800"}, "key"),
]


@pytest.mark.parametrize(("tool", "args", "what"), STORED, ids=[f"{t}-{w}" for t, _, w in STORED])
async def test_a_lone_surrogate_in_stored_text_is_refused_in_one_wording(
    client: Client, tool: str, args: dict[str, Any], what: str
) -> None:
    text = await failure(client, tool, **args)
    assert text.startswith("[invalid_input] ") and "(retryable)" not in text, text
    assert f"{what} is not valid Unicode (it holds a lone surrogate)" in text, text


async def test_both_searches_keep_their_structured_reply_within_the_byte_cap(client: Client) -> None:
    """search_messages spends the same byte cap as recall (`values.within`): each item measured
    as the JSON the tool returns, the reply's other fields held back, the best item always kept."""
    sid = (await ok(client, "create_session"))["session_id"]
    for i in range(12):
        body = f"packing list {i}: " + "tent stove rope " * 60
        await ok(client, "append", session_id=sid, turn_id=f"t{i}", role="user", content=body)
        await ok(client, "remember", text=body, key=f"k{i}")
    for tool in SEARCHES:
        r = await client.call_tool(tool, {"query": "packing list tent", "limit": 12})
        assert not r.is_error and isinstance(r.structured_content, dict), tool
        structured = json.dumps(r.structured_content, ensure_ascii=False, separators=(",", ":"))
        assert len(structured.encode()) <= CAP, (tool, len(structured.encode()))
        assert r.structured_content["truncated"] is True, tool
        items = r.structured_content["messages" if tool == "search_messages" else "memories"]
        assert 1 <= len(items) < 12, tool
