"""The published output schemas (tools/output_schema.py) accept exactly the documents pydantic's
own schemas accept: checked for every tool output model, on a valid document and on every one-
place change of it (each value replaced by each kind of JSON value, each key removed, a key added).
A hand-built schema's type lists become `anyOf` branches that accept the same documents; no
published schema holds a type list (the MCP Inspector's `--strict` portability check warns on
each: tests/tools/test_strict_schemas.py runs it on the whole tool list)."""

from __future__ import annotations

import copy
import importlib
import pkgutil
from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel

from mongogate import tools
from mongogate.compat.sdk import derived_output_schema
from mongogate.tools.base import ToolOutput
from mongogate.tools.output_schema import lean, portable

PROBES: list[Any] = [None, True, 0, 7, 1.5, -2, "", "x", [], ["a"], [1], {}, {"k": 1}]


def output_models() -> list[type[BaseModel]]:
    """Every tool output model of `mongogate.tools` (each module imported first)."""
    for info in pkgutil.iter_modules(tools.__path__):
        importlib.import_module(f"{tools.__name__}.{info.name}")
    found: list[type[BaseModel]] = []
    todo: list[type[BaseModel]] = [ToolOutput]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls is not ToolOutput and cls.__module__.startswith(f"{tools.__name__}."):
            found.append(cls)
    return sorted(found, key=lambda c: c.__name__)


def example(schema: dict[str, Any], defs: dict[str, Any]) -> Any:
    """A valid document of `schema`, every property present, the first branch of each choice."""
    if "$ref" in schema:
        return example(defs[schema["$ref"].removeprefix("#/$defs/")], defs)
    if "anyOf" in schema:
        return example(schema["anyOf"][0], defs)
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        return {k: example(v, defs) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        item = example(schema.get("items") or {}, defs)
        return [item, copy.deepcopy(item)]
    return {"string": "s", "integer": 3, "number": 0.25, "boolean": False, "null": None}.get(str(kind), "s")


def variants(doc: Any) -> Iterator[Any]:
    """`doc`, and every document one change away from it."""
    yield doc
    if isinstance(doc, dict):
        yield {**doc, "unexpected": 1}
        for key, value in doc.items():
            yield {k: v for k, v in doc.items() if k != key}
            for other in [*PROBES, *variants(value)]:
                yield {**doc, key: other}
    elif isinstance(doc, list) and doc:
        for other in [*PROBES, *list(variants(doc[0]))[1:]]:
            yield [other, *doc[1:]]


@pytest.mark.parametrize("model", output_models(), ids=lambda m: m.__name__)
def test_the_lean_schema_accepts_exactly_what_pydantics_accepts(model: type[BaseModel]) -> None:
    original = derived_output_schema(model)
    published = lean(original)
    assert "$ref" not in str(published)  # no recursive output model today: every one is inlined
    before, after = Draft202012Validator(original), Draft202012Validator(published)
    doc = example(original, original.get("$defs") or {})
    assert before.is_valid(doc), model.__name__
    checked = 0
    for candidate in variants(doc):
        assert before.is_valid(candidate) == after.is_valid(candidate), (model.__name__, candidate)
        checked += 1
    assert checked > len(PROBES)


def test_a_recursive_definition_is_kept_as_written() -> None:
    schema: dict[str, Any] = {
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {"next": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]}},
            }
        },
        "type": "object",
        "properties": {
            "head": {"$ref": "#/$defs/Node"},
            "n": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        },
    }
    out = lean(schema)
    assert out["$defs"] == schema["$defs"] and out["properties"]["head"] == {"$ref": "#/$defs/Node"}
    assert out["properties"]["n"] == {
        "anyOf": [{"type": "integer"}, {"type": "null"}]
    }  # as pydantic wrote it
    assert schema["properties"]["n"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}  # not changed


@pytest.mark.parametrize(
    "node",
    [
        {"anyOf": [{"enum": ["a", "b"], "type": "string"}, {"type": "null"}]},  # enum applies to null too
        {"type": "object", "anyOf": [{"type": "string"}, {"type": "null"}]},  # a type on both levels
        {"anyOf": [{"type": "string"}, {"type": "integer"}]},  # no null branch
    ],
)
def test_choices_that_would_change_meaning_are_kept(node: dict[str, Any]) -> None:
    assert lean({"type": "object", "properties": {"v": node}})["properties"]["v"] == node


def test_a_ref_beside_a_constraint_of_its_own_keeps_both() -> None:
    schema = {
        "$defs": {"S": {"type": "string", "maxLength": 3}},
        "type": "object",
        "properties": {"v": {"$ref": "#/$defs/S", "maxLength": 5, "description": "d"}},
    }
    out = lean(schema)
    v = Draft202012Validator(out)
    assert not v.is_valid({"v": "abcd"}) and v.is_valid({"v": "abc"})
    assert "$ref" not in str(out)


def type_lists(node: Any) -> list[Any]:
    """Every `type` list anywhere in `node` (data such as `default` included: none is expected)."""
    if isinstance(node, list):
        return [t for v in node for t in type_lists(v)]
    if not isinstance(node, dict):
        return []
    own = [node["type"]] if isinstance(node.get("type"), list) else []
    return own + [t for v in node.values() for t in type_lists(v)]


@pytest.mark.parametrize("model", output_models(), ids=lambda m: m.__name__)
def test_no_published_output_schema_holds_a_type_list(model: type[BaseModel]) -> None:
    """Issue 40: nullable fields were folded into `"type": [t, "null"]`, 34 `--strict` warnings."""
    assert type_lists(lean(derived_output_schema(model))) == []


HAND_BUILT: list[dict[str, Any]] = [
    {"type": ["number", "string", "array", "null"], "items": {"type": ["number", "string", "null"]}},
    {"type": ["string", "array", "null"], "items": {"type": "string"}, "maxLength": 3, "description": "d"},
    {"type": ["object", "array", "null"], "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    {"type": ["integer", "string"], "minimum": 2, "pattern": "^x", "enum": [1, 5, "xa", "b"]},
    {"type": ["integer", "null"], "anyOf": [{"minimum": 3}, {"type": "null"}]},  # a choice already there
    {"type": ["string", "boolean", "object", "array", "number", "integer", "null"]},
]


@pytest.mark.parametrize("node", HAND_BUILT)
def test_a_hand_built_type_list_becomes_branches_that_accept_the_same_values(node: dict[str, Any]) -> None:
    schema = {"type": "object", "properties": {"v": node}, "default": {"type": ["kept", "as data"]}}
    out = portable(schema)
    assert type_lists(out["properties"]) == [] and out["default"] == schema["default"]  # data untouched
    before, after = Draft202012Validator(schema), Draft202012Validator(out)
    values: list[Any] = [
        *PROBES,
        "abcd",
        "ab",
        "xa",
        1,
        2,
        3,
        5,
        {"a": 1},
        {"a": "x"},
        [None],
        ["abcd"],
        [1.5, "a"],
    ]
    for value in values:
        assert before.is_valid({"v": value}) == after.is_valid({"v": value}), (node, value)
