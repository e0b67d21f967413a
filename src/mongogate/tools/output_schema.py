"""A tool's output schema in the form cheapest to validate that every client can read, meaning the same.

The SDK's client validates every structured result against the tool's output schema with
`jsonschema` (mcp 2.3: `ClientSession.validate_tool_result`). For pydantic's form of a recall
result (ten memories, each a `$ref` into `$defs`), that validation was a quarter of the time a
recall took over MCP at 1,000 memories (every node visited is a `descend`, every `$ref` a resolver
lookup; docs/decisions/recall-index.md). So the published schema is rewritten once per model,
accepting exactly the same documents:

- every `$ref` into `$defs` is replaced by the definition it names, and `$defs` dropped (kept
  as they are when a definition refers to itself, directly or not: those cannot be inlined);
- every `type` that is a list (`["string", "array", "null"]`, as the query tools' hand-built
  schemas write a stored value) becomes an `anyOf` of one branch per type, each branch holding
  the keywords that constrain values of that type alone (`items` goes with `array`). A client that
  maps tool schemas onto a single-`type` dialect (Gemini's OpenAPI subset) rejects type lists, and
  the MCP Inspector's `--strict` check warns on each (issue 40: 34 warnings across 11 tools).
  Nullable fields stay as pydantic writes them, `anyOf: [S, {"type": "null"}]`.
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any, TypeGuard

from pydantic import BaseModel

from mongogate.compat.sdk import derived_output_schema
from mongogate.tools import stored_schemas

_DEFS = "#/$defs/"
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "deprecated"})

_NUMBER = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
#: the keywords that constrain only values of one type (JSON Schema 2020-12, validation 6.2-6.5):
#: in a branch of that type alone they accept exactly what they accepted beside a type list
_ONLY_FOR: dict[str, frozenset[str]] = {
    "string": frozenset({"minLength", "maxLength", "pattern"}),
    "number": _NUMBER,
    "integer": _NUMBER,
    "array": frozenset(
        {
            "items",
            "prefixItems",
            "contains",
            "minContains",
            "maxContains",
            "minItems",
            "maxItems",
            "uniqueItems",
        }
    ),
    "object": frozenset(
        {
            *("properties", "patternProperties", "additionalProperties", "required", "propertyNames"),
            *("minProperties", "maxProperties", "dependentRequired", "dependentSchemas"),
        }
    ),
}
#: where a schema holds subschemas (the rest of its values are data: `default`, `enum`, ...)
_ONE = (
    *("items", "contains", "not", "propertyNames", "if", "then", "else", "contentSchema"),
    *("additionalProperties", "unevaluatedProperties", "additionalItems", "unevaluatedItems"),
)
_MANY = ("allOf", "anyOf", "oneOf", "prefixItems")
_NAMED = ("properties", "patternProperties", "dependentSchemas", "$defs", "definitions")


#: False: tools built from now on publish pydantic's schema as it is (benchmarks/recall_index.py
#: builds the server of the code before this module that way, to measure both in one run)
LEAN = True


def published(output_model: type[BaseModel] | None, given: dict[str, Any] | None) -> dict[str, Any] | None:
    """The output schema a tool publishes: `given` (hand-built) with its type lists split, else
    the lean form of `output_model`'s (a fresh copy each call), else none."""
    if given is not None:
        return portable(given)
    if output_model is None:
        return None
    if not LEAN:
        return derived_output_schema(output_model)
    loaded: dict[str, Any] = json.loads(_lean_text(output_model))
    return loaded


@functools.cache
def _lean_text(output_model: type[BaseModel]) -> str:
    """Stored beside the code for mongogate's own tools (tools/stored_schemas.py), else generated."""
    text = stored_schemas.stored("output", output_model)
    if text is not None:
        return text
    return stored_schemas.generated(
        "output", output_model, json.dumps(lean(derived_output_schema(output_model)))
    )


def clear_schema_cache() -> None:
    """Forget the output schemas made so far (tools/stored_schemas.py `generate`)."""
    _lean_text.cache_clear()


class _Recursive(Exception):
    """A definition refers to itself: the schema is published as pydantic wrote it."""


def lean(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with its local `$ref`s inlined and its type lists split into `anyOf` branches
    (a new dict; the argument is not changed)."""
    defs = schema.get("$defs")
    body = {k: v for k, v in schema.items() if k != "$defs"}
    try:
        inlined = _inline(body, defs if isinstance(defs, dict) else {}, ())
    except _Recursive:
        inlined = copy.deepcopy(schema)
    return portable(inlined)


def _inline(node: Any, defs: dict[str, Any], seen: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_inline(v, defs, seen) for v in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith(_DEFS) and ref[len(_DEFS) :] in defs:
        name = ref[len(_DEFS) :]
        if name in seen:
            raise _Recursive(name)
        target = _inline(defs[name], defs, (*seen, name))
        siblings = {k: _inline(v, defs, seen) for k, v in node.items() if k != "$ref"}
        if not isinstance(target, dict) or set(target) & set(siblings) - _ANNOTATIONS:
            return {"allOf": [target], **siblings}  # both apply, as beside a `$ref`
        return {**target, **siblings}
    return {k: (v if k == "$defs" else _inline(v, defs, seen)) for k, v in node.items()}


def portable(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with every `type` list written as `anyOf` branches of one `type` each (a new
    dict). `{"type": ["string", "array", "null"], "items": I}` becomes
    `{"anyOf": [{"type": "string"}, {"type": "array", "items": I}, {"type": "null"}]}`."""
    out: dict[str, Any] = _split(schema)
    return out


def _split(node: Any) -> Any:
    if not isinstance(node, dict):
        return copy.deepcopy(node)
    out = {key: _split_value(key, value) for key, value in node.items()}
    kinds = out.get("type")
    if not _splittable(kinds):
        return out
    if len(kinds) == 1:
        return {**out, "type": kinds[0]}
    moved = frozenset().union(*(_ONLY_FOR.get(k, frozenset()) for k in kinds))
    branches = [{"type": k, **{w: out[w] for w in _ONLY_FOR.get(k, ()) if w in out}} for k in kinds]
    rest = {k: v for k, v in out.items() if k != "type" and k not in moved}
    if "anyOf" in rest:  # a choice of its own already: both must hold
        return {**rest, "allOf": [*rest.get("allOf", []), {"anyOf": branches}]}
    return {**rest, "anyOf": branches}


def _split_value(key: str, value: Any) -> Any:
    """One keyword's value with its subschemas split (data such as `default` copied as is)."""
    if key in _ONE and isinstance(value, dict):
        return _split(value)
    if (key in _ONE or key in _MANY) and isinstance(value, list):
        return [_split(v) for v in value]
    if key in _NAMED and isinstance(value, dict):
        return {name: _split(v) for name, v in value.items()}
    return copy.deepcopy(value)


def _splittable(kinds: Any) -> TypeGuard[list[str]]:
    """A non-empty `type` list of types whose own keywords are known (anything else kept whole)."""
    if not isinstance(kinds, list) or not kinds:
        return False
    return all(k in _ONLY_FOR or k in ("boolean", "null") for k in kinds)
