"""One error format everywhere: every registered tool, called wrongly, answers in the same shape.

The calls are generated from the tool list itself (memory, run, query and demo tools), so a tool
added later is walked too: each argument with a value of the wrong type, each required argument
left out, and an argument the tool does not know. Every answer must be
`[code] (retryable)? <one sentence>` naming the argument, with no library text (URLs, class
names, "validation error") and without the code repeated in the message.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import Tool

from mongogate.cli.common import registry_for
from mongogate.config import Settings
from mongogate.server.app import build_server
from tests.conftest import make_settings
from tests.helpers import failure

pytestmark = pytest.mark.anyio

SHAPE = re.compile(r"^\[(?P<code>[a-z_]+)\]( \(retryable\))? (?P<message>[^\n]+)$")
LIBRARY_WORDS = re.compile(
    r"https?://|pydantic|validation error|Error executing tool|Traceback|"
    r"\b(ValidationError|TypeError|ValueError|KeyError|InvalidInput|PolicyViolation|MongogateError|"
    r"NoneType|dict_type|int_parsing|string_type|model_type|extra_forbidden)\b"
)


def _kind(prop: dict[str, Any], root: dict[str, Any]) -> str:
    """The JSON type a property wants (the first non-null one)."""
    ref = prop.get("$ref")
    if isinstance(ref, str):
        return _kind(root["$defs"][ref.removeprefix("#/$defs/")], root)
    kind = prop.get("type")
    if isinstance(kind, str):
        return kind
    for branch in prop.get("anyOf") or []:
        k = _kind(branch, root)
        if k != "null":
            return k
    return "string" if "enum" in prop else "object"


GOOD: dict[str, Any] = {
    "string": "s1",
    "integer": 1000,
    "number": 1.5,
    "boolean": True,
    "object": {},
    "array": [],
}
WRONG: dict[str, Any] = {
    "string": 12345,
    "integer": "ten",
    "number": "lots",
    "boolean": [1],
    "object": "x",
    "array": "x",
}


def _valid(tool: Tool) -> dict[str, Any]:
    schema = tool.input_schema
    args: dict[str, Any] = {}
    for name in schema.get("required") or []:
        prop = schema["properties"][name]
        args[name] = prop["enum"][0] if "enum" in prop else GOOD[_kind(prop, schema)]
    return args


def wrong_calls(tools: list[Tool]) -> list[tuple[str, str, dict[str, Any], str]]:
    """(tool, case, arguments, the argument the answer must name)."""
    calls: list[tuple[str, str, dict[str, Any], str]] = []
    for t in tools:
        schema = t.input_schema
        base = _valid(t)
        for name, prop in (schema.get("properties") or {}).items():
            calls.append((t.name, f"wrong-type-{name}", {**base, name: WRONG[_kind(prop, schema)]}, name))
        for name in schema.get("required") or []:
            calls.append((t.name, f"missing-{name}", {k: v for k, v in base.items() if k != name}, name))
        calls.append((t.name, "unknown", {**base, "colour": "blue"}, "colour"))
    return calls


def _settings(tmp: Path) -> Settings:
    return make_settings("mongodb://127.0.0.1:1/", "unused", tmp)


def _demo_tools(tmp: Path) -> list[Tool]:
    """The tool list of the demo configuration, without a database (schemas only)."""
    settings = _settings(tmp)
    built = registry_for(settings, demo=True).build(settings)
    return [
        Tool(name=t.name, input_schema=t.parameters, title=t.title, description=t.description) for t in built
    ]


CALLS = wrong_calls(_demo_tools(Path("/nonexistent")))


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def client(engine_uri: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    tmp = tmp_path_factory.mktemp("errors")
    settings = make_settings(engine_uri, "contract_errors", tmp)
    async with Client(build_server(settings, registry_for(settings, demo=True))) as c:
        yield c


def test_the_walk_covers_every_kind_of_tool() -> None:
    names = {c[0] for c in CALLS}
    assert {
        "append",
        "list_sessions",
        "delete_session",
        "save_checkpoint",
        "find_orders",
        "order_stats",
    } <= names
    assert len(CALLS) > 60


@pytest.mark.parametrize(("tool", "case", "args", "arg"), CALLS, ids=[f"{c[0]}-{c[1]}" for c in CALLS])
async def test_every_wrong_call_gets_one_coded_sentence(
    client: Client, tool: str, case: str, args: dict[str, Any], arg: str
) -> None:
    text = await failure(client, tool, **args)
    m = SHAPE.match(text)
    assert m is not None, text
    code, message = m["code"], m["message"]
    assert LIBRARY_WORDS.search(text) is None, text
    assert code not in message, text  # e.g. "[operator_not_allowed] filter rejected (operator_not_allowed)"
    assert arg in message, text  # names the argument
    assert re.search(r"[.;:] [A-Z]", message) is None, text  # one sentence
    assert message.rstrip(".").count(".") <= 3, text
