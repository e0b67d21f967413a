"""A tool's output schema in the form cheapest to validate, meaning the same.

The SDK's client validates every structured result against the tool's output schema with
`jsonschema` (mcp 2.3: `ClientSession.validate_tool_result`). For pydantic's form of a recall
result (ten memories, each a `$ref` into `$defs`, each nullable field an `anyOf` of two branches),
that validation was a quarter of the time a recall took over MCP at 1,000 memories (every node
visited is a `descend`, every `$ref` a resolver lookup; docs/decisions/recall-index.md). So the
published schema is rewritten once per model, accepting exactly the same documents:

- every `$ref` into `$defs` is replaced by the definition it names, and `$defs` dropped (kept
  as they are when a definition refers to itself, directly or not: those cannot be inlined);
- `anyOf: [S, {"type": "null"}]` becomes S with `"type": [t, "null"]` when S has one `type` t
  and only keywords that apply to values of that type alone (so a null still passes and
  nothing else changes), plus annotations.
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

from pydantic import BaseModel

from mongogate.compat.sdk import derived_output_schema

_DEFS = "#/$defs/"
#: keywords that constrain only values of their own type, or only annotate: merging a
#: `{"type": "null"}` branch into a schema made of these accepts exactly the union of both
_TYPE_SPECIFIC = frozenset(
    {
        *("type", "title", "description", "default", "examples", "format", "deprecated"),
        *("minLength", "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum"),
        *("exclusiveMaximum", "multipleOf", "items", "prefixItems", "minItems", "maxItems"),
        *("uniqueItems", "contains", "properties", "additionalProperties", "required"),
        *("patternProperties", "minProperties", "maxProperties", "propertyNames"),
    }
)


_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "deprecated"})


#: False: tools built from now on publish pydantic's schema as it is (benchmarks/recall_index.py
#: builds the server of the code before this module that way, to measure both in one run)
LEAN = True


def published(output_model: type[BaseModel] | None, given: dict[str, Any] | None) -> dict[str, Any] | None:
    """The output schema a tool publishes: `given` (hand-built) as it is, else the lean form of
    `output_model`'s (a fresh copy each call), else none."""
    if given is not None or output_model is None:
        return given
    if not LEAN:
        return derived_output_schema(output_model)
    loaded: dict[str, Any] = json.loads(_lean_text(output_model))
    return loaded


@functools.cache
def _lean_text(output_model: type[BaseModel]) -> str:
    return json.dumps(lean(derived_output_schema(output_model)))


class _Recursive(Exception):
    """A definition refers to itself: the schema is published as pydantic wrote it."""


def lean(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with its local `$ref`s inlined and its nullable `anyOf`s folded into type lists
    (a new dict; the argument is not changed)."""
    defs = schema.get("$defs")
    body = {k: v for k, v in schema.items() if k != "$defs"}
    try:
        inlined = _inline(body, defs if isinstance(defs, dict) else {}, ())
    except _Recursive:
        inlined = copy.deepcopy(schema)
    folded: dict[str, Any] = _fold_nullable(inlined)
    return folded


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


def _fold_nullable(node: Any) -> Any:
    if isinstance(node, list):
        return [_fold_nullable(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _fold_nullable(v) for k, v in node.items()}
    other = _nullable_branch(out.get("anyOf"))
    kind = other.get("type") if other is not None else None
    if other is None or not isinstance(kind, str) or kind == "null" or not set(other) <= _TYPE_SPECIFIC:
        return out
    if set(other) & (set(out) - {"anyOf"}) - _ANNOTATIONS:
        return out  # a keyword on both levels: keep the branches rather than merge them
    merged = {k: v for k, v in out.items() if k != "anyOf"}
    return {**other, **merged, "type": [kind, "null"]}


def _nullable_branch(branches: Any) -> dict[str, Any] | None:
    """The other branch of an `anyOf` of two whose one branch is `{"type": "null"}`, if a dict."""
    if not isinstance(branches, list) or len(branches) != 2 or {"type": "null"} not in branches:
        return None
    other = branches[0] if branches[1] == {"type": "null"} else branches[1]
    return other if isinstance(other, dict) else None
