"""The MCP Inspector's tool-schema portability rules (`--strict`), in Python, for when the npm
registry is out of reach: the same four rules, the same walk, the same severities, written from
the Inspector's own source (`core/json/schemaLint.ts`, @modelcontextprotocol/inspector 2.12.0).

- `type-union` (warning): a `type` that is a list of distinct JSON Schema type names;
- `remote-ref` (warning): a `$ref` not starting with `#` when no subschema declares an `$id`;
- `untyped-schema` (warning): a schema object with no validation keyword (not under `not`);
- `boolean-schema` (error): a bare `true`/`false` where a schema object is expected (allowed
  only as `additionalProperties`, `unevaluatedProperties`, `additionalItems`, `unevaluatedItems`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BOOLEAN_VALUED = frozenset(
    {"additionalProperties", "unevaluatedProperties", "additionalItems", "unevaluatedItems"}
)
ONE = (
    *("items", "contains", "not", "propertyNames", "if", "then", "else"),
    *(
        "additionalProperties",
        "unevaluatedProperties",
        "additionalItems",
        "unevaluatedItems",
        "contentSchema",
    ),
)
MANY = ("allOf", "anyOf", "oneOf", "prefixItems")
NAMED = ("properties", "patternProperties", "dependentSchemas", "dependencies", "$defs", "definitions")
CONSTRAINING = frozenset(
    {
        *("type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum"),
        *("exclusiveMinimum", "maxLength", "minLength", "pattern", "format", "contentMediaType"),
        *("contentEncoding", "contentSchema", "maxItems", "minItems", "uniqueItems", "maxContains"),
        *("minContains", "maxProperties", "minProperties", "required", "dependentRequired"),
        *("allOf", "anyOf", "oneOf", "not", "items", "prefixItems", "contains", "additionalItems"),
        *("unevaluatedItems", "properties", "patternProperties", "additionalProperties"),
        *("unevaluatedProperties", "propertyNames", "dependentSchemas", "dependencies"),
        *("$ref", "$dynamicRef", "$recursiveRef"),
    }
)
TYPES = frozenset({"null", "boolean", "object", "array", "number", "string", "integer"})
MAX_DEPTH = 64


@dataclass(frozen=True)
class Finding:
    tool: str
    rule: str
    severity: str  # "warning" or "error"
    path: str  # as the Inspector prints it: "outputSchema.properties.x"


def _children(node: dict[str, Any], path: str) -> list[tuple[Any, str, str]]:
    out: list[tuple[Any, str, str]] = []
    for key in NAMED:
        if isinstance(node.get(key), dict):
            out += [(sub, f"{path}.{key}.{name}", key) for name, sub in node[key].items()]
    for key in MANY:
        if isinstance(node.get(key), list):
            out += [(sub, f"{path}.{key}[{i}]", key) for i, sub in enumerate(node[key])]
    for key in ONE:
        if key not in node:
            continue
        if key == "items" and isinstance(node[key], list):
            out += [(sub, f"{path}.items[{i}]", key) for i, sub in enumerate(node[key])]
        else:
            out.append((node[key], f"{path}.{key}", key))
    return out


def _declares_id(node: Any, depth: int = 0) -> bool:
    if depth > MAX_DEPTH or not isinstance(node, dict):
        return False
    if isinstance(node.get("$id"), str) and node["$id"]:
        return True
    return any(_declares_id(sub, depth + 1) for sub, _, _ in _children(node, ""))


def _walk(node: Any, path: str, keyword: str | None, depth: int, has_ids: bool, tool: str) -> list[Finding]:
    if depth > MAX_DEPTH:
        return []
    if isinstance(node, bool):
        ok = keyword is not None and keyword in BOOLEAN_VALUED
        return [] if ok else [Finding(tool, "boolean-schema", "error", path)]
    if not isinstance(node, dict):
        return []
    found: list[Finding] = []
    kind = node.get("type")
    if isinstance(kind, list) and kind and all(isinstance(k, str) and k in TYPES for k in kind):  # noqa: SIM102
        if len(set(kind)) == len(kind):  # the Inspector's isPortableTypeUnion: distinct names
            found.append(Finding(tool, "type-union", "warning", path))
    ref = node.get("$ref")
    if isinstance(ref, str) and ref and not ref.startswith("#") and not has_ids:
        found.append(Finding(tool, "remote-ref", "warning", path))
    constrains = bool(set(node) & CONSTRAINING) or ("if" in node and ("then" in node or "else" in node))
    if not constrains and keyword != "not":
        found.append(Finding(tool, "untyped-schema", "warning", path))
    for sub, sub_path, sub_keyword in _children(node, path):
        found += _walk(sub, sub_path, sub_keyword, depth + 1, has_ids, tool)
    return found


def lint_tools(tools: list[dict[str, Any]]) -> list[Finding]:
    """Every finding for a `tools/list` result's tools (their JSON, as on the wire)."""
    found: list[Finding] = []
    for tool in tools:
        for key in ("inputSchema", "outputSchema"):
            if key in tool:
                found += _walk(tool[key], key, None, 0, _declares_id(tool[key]), tool["name"])
    return found
