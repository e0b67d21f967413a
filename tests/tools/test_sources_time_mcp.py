"""Sources and event time (issue 39 item 3) through the SDK's real client: a memory's source is a
message of the caller's own conversations (another tenant's reads as missing, nothing stored),
`occurred_at` is kept apart from `created_at`, `occurred_after`/`occurred_before` filter recall
and list_memories, and every read path returns both (recall, list_memories, memory_history, the
memory resource)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mongogate.clock import ManualClock
from mongogate.server.app import build_server
from tests.conftest import make_settings
from tests.helpers import failure, ok

pytestmark = pytest.mark.anyio

APRIL = "We decided in April to delay the launch."
MAY = "We decided in May to launch in Lisbon."
JUNE = "We decided in June to cut the launch budget."
COLOURS = "We decided the launch colours: blue and white."
QUESTION = "what did we decide about the launch?"


async def said(c: Client, text: str) -> str:
    """A session holding one turn: the user's `text` (seq 1) and a reply (seq 2)."""
    sid = str((await ok(c, "create_session"))["session_id"])
    t = await ok(c, "begin_turn", session_id=sid, turn_id="t1", text=text)
    await ok(c, "end_turn", session_id=sid, turn_id="t1", lease_id=t["lease_id"], reply="noted")
    return sid


async def recalled(c: Client, **args: Any) -> list[str]:
    got = await ok(c, "recall", query=QUESTION, min_score=0, **args)
    return sorted(m["text"] for m in got["memories"])


async def listed(c: Client, **args: Any) -> list[str]:
    return sorted(m["text"] for m in (await ok(c, "list_memories", **args))["memories"])


async def test_source_and_event_time_are_stored_filtered_and_returned_everywhere(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path), clock=clock)) as c:
        sid = await said(c, "In May we decided to launch in Lisbon.")
        source = {"session_id": sid, "seq": 1}
        may = await ok(c, "remember", text=MAY, source=source, occurred_at="2025-05-14T10:00:00+02:00")
        await ok(c, "remember", text=APRIL, occurred_at="2025-04-20")
        await ok(c, "remember", text=JUNE, occurred_at="2025-06-01")
        await ok(c, "remember", text=COLOURS)  # no event time

        top = (await ok(c, "recall", query="Lisbon launch"))["memories"][0]
        assert (top["id"], top["source"], top["occurred_at"]) == (
            may["id"],
            source,
            "2025-05-14T08:00:00+00:00",
        )
        assert top["created_at"] == clock.now().isoformat() != top["occurred_at"]  # stored now, not then
        row = next(m for m in (await ok(c, "list_memories"))["memories"] if m["id"] == may["id"])
        assert (row["source"], row["occurred_at"]) == (source, top["occurred_at"])
        h = await ok(c, "memory_history", id=may["id"])
        assert [(v["source"], v["occurred_at"]) for v in h["versions"]] == [(source, top["occurred_at"])]
        read = await c.read_resource(f"mongogate://memories/{may['id']}")
        resource = json.loads(read.contents[0].text)  # type: ignore[union-attr]
        assert (resource["source"], resource["occurred_at"]) == (source, top["occurred_at"])

        # half-open: June 1st is not before June 1st; a memory without occurred_at is left out
        window = {"occurred_after": "2025-05-01", "occurred_before": "2025-06-01"}
        assert await recalled(c, **window) == [MAY] == await listed(c, **window)
        assert await recalled(c, occurred_after="2025-05-01") == sorted([JUNE, MAY])
        assert await listed(c, occurred_before="2025-05-01") == [APRIL]
        assert len(await recalled(c)) == len(await listed(c)) == 4


async def test_a_source_must_be_a_message_of_the_callers_own_conversations(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    globex = make_settings(engine_uri, db_name, tmp_path / "g", auth={"mode": "none", "tenant": "globex"})
    acme = make_settings(engine_uri, db_name, tmp_path)
    async with Client(build_server(globex)) as g, Client(build_server(acme)) as a:
        theirs = await said(g, "Our launch is secret.")
        mine = await said(a, "We launch in Lisbon.")
        for source, where in (
            ({"session_id": theirs, "seq": 1}, theirs),  # another tenant's message: as if missing
            ({"session_id": mine, "seq": 9}, mine),  # no such message
            ({"session_id": "no-such-session", "seq": 1}, "no-such-session"),
        ):
            err = await failure(a, "remember", text=MAY, source=source)
            assert err.startswith(f"[not_found] source: no message seq {source['seq']} in session '{where}'")
            assert "Nothing was stored" in err
        assert await listed(a) == []
        ok_source = {"session_id": mine, "seq": 2}  # the reply is a message of the conversation too
        assert (await ok(a, "remember", text=MAY, source=ok_source))["status"] == "created"


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("remember", {"text": MAY, "occurred_at": "last Tuesday"}, "[invalid_input] occurred_at"),
    ("remember", {"text": MAY, "source": {"session_id": "s", "seq": -1}}, "[invalid_input] "),
    ("remember", {"text": MAY, "source": {"session_id": "s"}}, "[invalid_input] "),
    ("recall", {"query": "x", "occurred_after": "2025-13-01"}, "[invalid_input] occurred_after"),
    ("recall", {"query": "x", "as_of": "soon"}, "[invalid_input] as_of"),
    ("list_memories", {"occurred_before": "x" * 41}, "[invalid_input] "),
    (
        "list_memories",
        {"occurred_after": "2025-06-01", "occurred_before": "2025-05-01"},
        "[invalid_input] occurred_after",
    ),
]


@pytest.mark.parametrize(("tool", "args", "error"), BAD)
async def test_a_malformed_time_or_source_is_a_clear_error_and_stores_nothing(
    engine_uri: str, db_name: str, tmp_path: Path, tool: str, args: dict[str, Any], error: str
) -> None:
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        assert (await failure(c, tool, **args)).startswith(error)
        assert await listed(c) == []


async def test_extract_memories_asks_for_the_source_the_event_time_and_what_a_fact_replaces(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        sid = await said(c, "We moved the launch from Lisbon to Porto on May 14th.")
        got = await c.get_prompt("extract_memories", {"session_id": sid})
        text = got.messages[0].content.text  # type: ignore[union-attr]
        assert f"source={{'session_id': {sid!r}, 'seq': <the seq of the message" in text
        assert "occurred_at=<when" in text and "supersedes=<that memory's id>" in text
        assert '"seq":1,"role":"user"' in text  # the seq the model copies is in the transcript
