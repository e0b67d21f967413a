"""The tool list as an agent sees it: strict-inspector-style checks and limits that match the stores.

`strict_problems` checks what `mcp-inspector --cli --strict` warns about (as far as it can be
reproduced in Python): every tool has a title and a description, every input property is
described and typed, every output schema is typed down to the document fields, and the server
sends instructions. The demo configuration must report 0 problems.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from mcp import Client
from mcp_types import Tool

from mongogate.cli.common import registry_for
from mongogate.errors import InvalidInput
from mongogate.memory.keys import check_id
from mongogate.server.app import build_server
from tests.conftest import make_settings
from tests.helpers import failure, ok

pytestmark = pytest.mark.anyio


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target: dict[str, Any] = root["$defs"][ref.removeprefix("#/$defs/")]
        return _resolve(target, root)
    return node


def _typed(node: dict[str, Any], root: dict[str, Any]) -> bool:
    node = _resolve(node, root)
    if "type" in node or "enum" in node or "const" in node:
        return True
    branches: list[dict[str, Any]] = node.get("anyOf") or node.get("oneOf") or []
    return bool(branches) and all(_typed(b, root) for b in branches)


def _untyped_properties(node: dict[str, Any], root: dict[str, Any], where: str) -> list[str]:
    """Every property, at any depth (items included), must say its type."""
    node = _resolve(node, root)
    problems: list[str] = []
    for name, prop in (node.get("properties") or {}).items():
        if not _typed(prop, root):
            problems.append(f"{where}.{name}: no type")
        problems += _untyped_properties(prop, root, f"{where}.{name}")
    items = node.get("items")
    if isinstance(items, dict):
        if not _typed(items, root):
            problems.append(f"{where}[]: no type")
        problems += _untyped_properties(items, root, f"{where}[]")
    for branch in node.get("anyOf") or []:
        problems += _untyped_properties(branch, root, where)
    return problems


def strict_problems(tools: list[Tool], instructions: str | None) -> list[str]:
    problems = [] if instructions else ["server: no instructions"]
    for t in tools:
        if not t.title:
            problems.append(f"{t.name}: no title")
        if not t.description:
            problems.append(f"{t.name}: no description")
        if t.annotations is None:
            problems.append(f"{t.name}: no annotations")
        schema = t.input_schema
        Draft202012Validator.check_schema(schema)
        if schema.get("type") != "object":
            problems.append(f"{t.name}: input schema is not an object")
        for name, prop in (schema.get("properties") or {}).items():
            if not prop.get("description"):
                problems.append(f"{t.name}.{name}: no description")
            if not _typed(prop, schema):
                problems.append(f"{t.name}.{name}: no type")
        if t.output_schema is None:
            problems.append(f"{t.name}: no output schema")
        else:
            Draft202012Validator.check_schema(t.output_schema)
            problems += _untyped_properties(t.output_schema, t.output_schema, f"{t.name} output")
    return problems


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def demo(
    engine_uri: str, demo_db: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Client]:
    """The demo configuration's server, once per module: the tests that take it only list its
    tools and read (its demo seeding finds the module's seeded orders there already)."""
    settings = make_settings(engine_uri, demo_db, tmp_path_factory.mktemp("contract"))
    async with Client(build_server(settings, registry_for(settings, demo=True))) as c:
        yield c


async def test_the_demo_configuration_has_no_strict_problems(demo: Client) -> None:
    tools = (await demo.list_tools()).tools
    assert len(tools) == 22  # 9 memory, 5 run, 6 long-term memory, find_orders, order_stats
    assert strict_problems(tools, demo.instructions) == []


def test_the_checks_catch_what_the_old_contract_had() -> None:
    """The inspector's four warnings on the old query output schema, and the untitled tools."""
    old = Tool(
        name="find_orders",
        description="d",
        input_schema={"type": "object", "properties": {"limit": {"type": "integer"}}},
        output_schema={
            "type": "object",
            "properties": {
                "documents": {"type": "array", "items": {"type": "object", "properties": {"a": {}}}}
            },
        },
    )
    assert strict_problems([old], None) == [
        "server: no instructions",
        "find_orders: no title",
        "find_orders: no annotations",
        "find_orders.limit: no description",
        "find_orders output.documents[].a: no type",
    ]


async def test_instructions_describe_the_turn_protocol(demo: Client) -> None:
    text = demo.instructions or ""
    for word in ("begin_turn", "append", "end_turn", "turn_id", "lease_id", "retryable"):
        assert word in text
    assert len(text.splitlines()) <= 12


@pytest.mark.parametrize("max_id_length", [200, 64])
async def test_id_limits_in_the_schema_are_the_ones_the_store_enforces(
    engine_uri: str, db_name: str, tmp_path: Path, max_id_length: int
) -> None:
    """Issue 14.1: the schema said maxLength 1000 for turn_id while the store refused 201."""
    settings = make_settings(engine_uri, db_name, tmp_path, memory={"max_id_length": max_id_length})
    async with Client(build_server(settings)) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        begin = tools["begin_turn"].input_schema["properties"]
        assert begin["turn_id"]["maxLength"] == max_id_length
        assert f"at most {max_id_length} characters" in begin["turn_id"]["description"]
        assert "new for each user message" in begin["turn_id"]["description"]
        lease = tools["append"].input_schema["properties"]["lease_id"]["anyOf"][0]
        assert lease["maxLength"] == max_id_length
        assert tools["acquire_run"].input_schema["properties"]["run_id"]["maxLength"] == max_id_length
        # What the schema accepts, the store accepts; one character more is refused by both.
        v = Draft202012Validator(tools["begin_turn"].input_schema)
        longest, too_long = "t" * max_id_length, "t" * (max_id_length + 1)
        assert v.is_valid({"session_id": "s", "turn_id": longest, "text": "x"})
        assert check_id(longest, "turn_id", max_id_length) == longest
        assert not v.is_valid({"session_id": "s", "turn_id": too_long, "text": "x"})
        with pytest.raises(InvalidInput):
            check_id(too_long, "turn_id", max_id_length)
        assert not v.is_valid({"session_id": "s", "turn_id": "a:b", "text": "x"})  # the ':' rule too
        sid = (await ok(c, "create_session"))["session_id"]
        text = await failure(c, "begin_turn", session_id=sid, turn_id=too_long, text="x")
        n = max_id_length
        assert text == f"[invalid_input] turn_id is {n + 1} characters long; the maximum is {n}"


async def test_every_limit_in_a_description_comes_from_the_settings(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings = make_settings(
        engine_uri,
        db_name,
        tmp_path,
        memory={"max_message_bytes": 777, "max_context_limit": 33, "max_lease_ms": 4444, "lease_ms": 222},
        limits={"metadata_max_keys": 7},
    )
    async with Client(build_server(settings)) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    props = tools["begin_turn"].input_schema["properties"]
    assert "777 bytes" in props["text"]["description"]
    assert props["lease_ms"]["maximum"] == 4444 and "default 222" in props["lease_ms"]["description"]
    assert tools["load_context"].input_schema["properties"]["limit"]["maximum"] == 33
    assert "at most 7 keys" in tools["create_session"].input_schema["properties"]["metadata"]["description"]
    every = json.dumps([t.input_schema for t in tools.values()])
    assert "{" + "max_" not in every and "x-limits" not in every  # every placeholder was filled
    # A second server in the same process fills in its own settings: the schemas generated once
    # per model (tools/base.py) are copied for each tool, never shared between servers.
    other = make_settings(engine_uri, db_name, tmp_path, memory={"max_message_bytes": 555})
    async with Client(build_server(other)) as c:
        again = {t.name: t for t in (await c.list_tools()).tools}
    text = again["begin_turn"].input_schema["properties"]["text"]["description"]
    assert "555 bytes" in text and "777" not in text
    assert again["load_context"].input_schema["properties"]["limit"]["maximum"] != 33


async def test_tools_say_where_they_fit(demo: Client) -> None:
    tools = {t.name: t for t in (await demo.list_tools()).tools}
    assert "final answer" in (tools["end_turn"].description or "")
    assert "end_turn" in (tools["append"].description or "") and "tool call" in (
        tools["append"].description or ""
    )
    assert (tools["delete_session"].annotations or None) is not None
    assert tools["delete_session"].annotations.destructive_hint is True  # type: ignore[union-attr]
    assert tools["list_sessions"].annotations.read_only_hint is True  # type: ignore[union-attr]


async def test_defs_and_refs_work_with_the_sdk_client_and_jsonschema(demo: Client) -> None:
    """The query schema uses $defs/$ref: the SDK client lists and calls it, validating the typed
    output schema on every result; jsonschema resolves the refs for the arguments."""
    tool = next(t for t in (await demo.list_tools()).tools if t.name == "find_orders")
    assert "$defs" in tool.input_schema and len(json.dumps(tool.input_schema, separators=(",", ":"))) < 2048
    args = {
        "filter": {
            "$or": [{"status": "paid"}, {"total": {"$gte": 100}}],
            "createdAt": {"$gte": "2026-01-01"},
        },
        "limit": 5,
        "sort": {"total": -1},
    }
    v = Draft202012Validator(tool.input_schema)
    assert v.is_valid(args)
    assert not v.is_valid({"filter": {"createdAt": {"$gte": "yesterday"}}})
    assert not v.is_valid({"filter": {"status": {"$regex": "x"}}})
    result = await ok(demo, "find_orders", **args)
    assert result["returned"] > 0
    assert Draft202012Validator(tool.output_schema or {}).is_valid(result)
    assert all(isinstance(d["total"], float | int) for d in result["documents"])
