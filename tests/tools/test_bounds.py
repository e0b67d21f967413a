"""Every tool argument is bounded before schema, policy or database work (tools/bounds.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mongogate.config import LimitsSettings, PolicySettings
from mongogate.demo import FIND_ORDERS
from mongogate.errors import InvalidInput
from mongogate.policy.schema import input_schema
from mongogate.server.app import build_server
from mongogate.tools.bounds import check_arguments, key_caps_from_schema
from mongogate.tools.registry import ToolRegistry
from tests.conftest import make_settings
from tests.policy.specs import ORDERS  # the demo spec without its index

LIMITS = LimitsSettings()
HUGE_SORT = {f"k{i}": 1 for i in range(330_000)}  # about 3.8 MB as JSON


def _refused(args: dict[str, Any], match: str, **kw: Any) -> str:
    with pytest.raises(InvalidInput, match=match) as info:
        check_arguments(args, LIMITS, **kw)
    return str(info.value)


def test_sort_keys_capped_by_the_sortable_fields() -> None:
    schema = input_schema(FIND_ORDERS, PolicySettings())
    assert key_caps_from_schema(schema) == {"sort": len(FIND_ORDERS.fields)}
    check_arguments({"filter": {}, "sort": {"total": 1, "status": -1}}, LIMITS, schema=schema)
    started = time.thread_time()
    text = _refused(
        {"filter": {}, "sort": HUGE_SORT}, "argument 'sort' has 330000 keys; at most 4", schema=schema
    )
    assert time.thread_time() - started < 0.5  # the length is read, the keys are not
    assert "Use only the listed fields" in text


@pytest.mark.parametrize(
    ("metadata", "match"),
    [
        ({f"k{i}": i for i in range(65)}, r"more than 64 keys .*limits.metadata_max_keys"),
        ({"k": "x" * 17_000}, r"larger than 16384 characters \(limits.metadata_max_chars\)"),
        ({"a": {"b": {"c": {"d": {"e": 1}}}}}, r"metadata.a.b.c.d is nested deeper than 4 levels"),
        ({"$where": "1"}, r"key '\$where' cannot be stored"),
        ({"a": {"x\x00y": 1}}, r"cannot be stored"),
        ({"a.b": 1}, r"key 'a.b' cannot be stored"),
        ({"": 1}, r"key '' cannot be stored"),
        ({"n": 2**63}, r"integer outside the 64-bit range"),
        ({"n": [-(2**63) - 1]}, r"metadata.n\[0\] holds an integer outside"),
    ],
)
def test_metadata_caps(metadata: dict[str, Any], match: str) -> None:
    _refused({"metadata": metadata}, match)


def test_metadata_within_caps_passes() -> None:
    ok = {f"k{i}": {"n": 2**63 - 1, "list": [1, "a", None]} for i in range(8)}  # 48 keys and items
    check_arguments({"metadata": ok, "title": "t"}, LIMITS)


def test_every_argument_has_general_caps() -> None:
    _refused({"state": {"x": [[1]] * 10_000}}, r"argument state has more than 10000 keys")
    _refused({"content": "x" * (2 * 1024 * 1024 + 1)}, r"argument content is larger than")
    deep: Any = 1
    for _ in range(40):
        deep = [deep]
    _refused({"filter": {"$or": deep}}, r"nested deeper than 32 levels")
    _refused({f"a{i}": 1 for i in range(10_001)}, r"10001 arguments; at most 10000")
    _refused({"state": {"$set": 1}}, r"state.\$set key '\$set' cannot be stored")
    check_arguments({"state": {"a.b": 1}}, LIMITS)  # runs keep their own key rules for state


@pytest.mark.anyio
async def test_hostile_arguments_refused_through_mcp(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    """Each tool refuses its bomb with [invalid_input] quickly, and nothing is stored."""
    settings = make_settings(engine_uri, db_name, tmp_path)
    bombs: list[tuple[str, dict[str, Any]]] = [
        ("find_orders", {"filter": {}, "sort": HUGE_SORT}),
        ("find_orders", {"filter": {"total": {"$gt": 2**64}}}),
        ("create_session", {"metadata": {f"m{i}": i for i in range(245_000)}}),
        ("create_session", {"metadata": {"big": 2**63}}),
        ("save_checkpoint", {"run_id": "r", "lease_id": "l", "version": 1, "state": {"x": [[1]] * 200_000}}),
        ("append", {"session_id": "s", "turn_id": "t", "role": "user", "content": "x" * 3_000_000}),
    ]
    # nothing here creates the demo index, and build_server would refuse to start without it
    async with Client(build_server(settings, ToolRegistry([ORDERS])), mode="legacy") as c:
        for tool, args in bombs:
            started = time.thread_time()  # client and server share this thread; the engine's is not counted
            r = await c.call_tool(tool, args)
            spent = time.thread_time() - started  # both sides of the call, framing included
            assert r.is_error and "[invalid_input]" in r.content[0].text, (tool, r.content)  # type: ignore[union-attr]
            # the audit's forbidden-operator scan reads every key of a refused call once
            assert spent < 1.5, (tool, spent)
        ok = await c.call_tool("create_session", {"metadata": {"team": "a", "n": 1}})
        assert not ok.is_error, ok.content
