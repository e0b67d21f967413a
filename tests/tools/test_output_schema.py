"""The published output schemas (tools/output_schema.py) accept exactly the documents pydantic's
own schemas accept: checked for every tool output model, on a valid document and on every one-
place change of it (each value replaced by each kind of JSON value, each key removed, a key added)."""

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
from mongogate.tools.output_schema import lean

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
    assert out["properties"]["n"] == {"type": ["integer", "null"]}
    assert schema["properties"]["n"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}  # not changed


@pytest.mark.parametrize(
    "node",
    [
        {"anyOf": [{"enum": ["a", "b"], "type": "string"}, {"type": "null"}]},  # enum applies to null too
        {"type": "object", "anyOf": [{"type": "string"}, {"type": "null"}]},  # a type on both levels
        {"anyOf": [{"type": "string"}, {"type": "integer"}]},  # no null branch
        {"anyOf": [{"type": ["string", "integer"]}, {"type": "null"}]},  # no single type
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
