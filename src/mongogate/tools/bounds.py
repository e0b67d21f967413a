"""Bounded work before anything expensive: every tool argument is measured before schema or policy.

One iterative walk per argument counts characters, keys (object keys and array items, all
levels) and depth, and stops at the first limit passed, so its cost is bounded by the limits,
not by what the caller sent: a 330,000-key `sort` is refused after reading its length.
Stored arguments (`metadata`, `state`) must also be storable by MongoDB (keys, and no NaN or
Infinity: the caller's error, named with its path, not a database failure), and no argument may
hold an integer outside int64. Refusals are `InvalidInput` naming the argument, the limit
and what would work.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mongogate.errors import InvalidInput
from mongogate.values import MAX_INT64, MIN_INT64, clip, fits_int64

if TYPE_CHECKING:
    from mongogate.config import LimitsSettings

#: arguments written to the database as given: their keys must be storable
STORED_ARGUMENTS = frozenset({"metadata", "state"})
_SCALAR_CHARS = 8  # a rough JSON size for numbers, booleans and null

# A location is built only when something is refused: (parent, key or index), or None at the top.
_Loc = tuple[Any, str | int] | None


@dataclass(frozen=True)
class Bounds:
    """The caps of one argument; ``setting`` names where they are configured."""

    max_chars: int
    max_keys: int
    max_depth: int
    setting: str


def bounds_for(name: str, limits: LimitsSettings) -> Bounds:
    """`metadata` has its own (small) caps; every other argument shares the general ones."""
    if name == "metadata":
        return Bounds(
            limits.metadata_max_chars,
            limits.metadata_max_keys,
            limits.metadata_max_depth,
            "limits.metadata_max",
        )
    return Bounds(
        limits.max_argument_chars, limits.max_argument_keys, limits.max_argument_depth, "limits.max_argument"
    )


def key_caps_from_schema(parameters: Mapping[str, Any]) -> dict[str, int]:
    """Per-argument key caps implied by a tool's input schema: an object argument with
    ``maxProperties``, or with ``additionalProperties: false`` and listed ``properties``, has at
    most that many keys."""
    caps: dict[str, int] = {}
    props = parameters.get("properties")
    if not isinstance(props, Mapping):
        return caps
    for name, schema in props.items():
        if isinstance(schema, Mapping) and isinstance(schema.get("maxProperties"), int):
            caps[str(name)] = int(schema["maxProperties"])  # e.g. `sort`: one key per sortable field
        elif (
            isinstance(schema, Mapping)
            and schema.get("type") == "object"
            and schema.get("additionalProperties") is False
            and isinstance(schema.get("properties"), Mapping)
        ):
            caps[str(name)] = len(schema["properties"])
    return caps


def check_arguments(
    args: Mapping[str, Any],
    limits: LimitsSettings,
    *,
    schema: Mapping[str, Any] | None = None,
    key_caps: Mapping[str, int] | None = None,
) -> None:
    """Refuse, cheaply, any argument over its caps (see the module docstring); else return.

    ``key_caps`` (argument -> most keys) default to those implied by the tool's input ``schema``.
    """
    if len(args) > limits.max_argument_keys:
        raise InvalidInput(
            f"{len(args)} arguments; at most {limits.max_argument_keys} (limits.max_argument_keys). "
            "Send only the arguments the tool's schema lists"
        )
    caps = key_caps if key_caps is not None else key_caps_from_schema(schema or {})
    for name, value in args.items():
        cap = caps.get(name)
        if cap is not None and isinstance(value, Mapping) and len(value) > cap:
            raise InvalidInput(
                f"argument {clip(name, mark='…')!r} has {len(value)} keys; at most {cap} (one per field "
                "the tool's schema lists for it). Use only the listed fields",
                path=clip(name, mark="…"),
            )
        _Walk(name, bounds_for(name, limits), stored=name in STORED_ARGUMENTS).run(value)


class _Walk:
    def __init__(self, name: str, bounds: Bounds, *, stored: bool) -> None:
        self.name = name
        self.b = bounds
        self.stored = stored
        self.chars = 0
        self.keys = 0

    def run(self, value: object) -> None:
        stack: list[tuple[object, int, _Loc]] = [(value, 0, None)]
        while stack:
            v, depth, loc = stack.pop()
            if isinstance(v, dict):
                self.container(len(v), depth + 1, loc)
                for k, x in v.items():
                    if not isinstance(k, str):
                        self.refuse(f"key {k!r} is not a string", (loc, str(k)), "string keys")
                    self.chars += len(k) + 4
                    if self.stored:
                        self.storable_key(k, (loc, k))
                    stack.append((x, depth + 1, (loc, k)))
            elif isinstance(v, list | tuple):
                self.container(len(v), depth + 1, loc)
                stack.extend((x, depth + 1, (loc, i)) for i, x in enumerate(v))
            else:
                self.chars += self.scalar(v, loc)
            if self.chars > self.b.max_chars:
                self.refuse(
                    f"is larger than {self.b.max_chars} characters ({self.b.setting}_chars)",
                    None,
                    "a smaller value; keep large data elsewhere and pass a reference",
                )

    def scalar(self, v: object, loc: _Loc) -> int:
        """What a scalar costs the character budget; refused when MongoDB could not store it."""
        if isinstance(v, str):
            return len(v) + 2
        if isinstance(v, int) and not isinstance(v, bool):
            if not fits_int64(v):
                self.refuse(
                    "holds an integer outside the 64-bit range MongoDB stores",
                    loc,
                    f"integers from {MIN_INT64} to {MAX_INT64} (send larger numbers as strings)",
                )
            return _SCALAR_CHARS
        if self.stored and isinstance(v, float) and not math.isfinite(v):
            self.refuse(
                "is not a finite number (NaN and Infinity cannot be stored)",
                loc,
                'a finite number, null, or a string such as "NaN"',
            )
        return _SCALAR_CHARS

    def container(self, size: int, depth: int, loc: _Loc) -> None:
        if depth > self.b.max_depth:
            self.refuse(
                f"is nested deeper than {self.b.max_depth} levels ({self.b.setting}_depth)",
                loc,
                "a flatter value",
            )
        self.keys += size
        if self.keys > self.b.max_keys:
            self.refuse(
                f"has more than {self.b.max_keys} keys and items in all ({self.b.setting}_keys)",
                None,
                "fewer keys and items",
            )

    def storable_key(self, key: str, loc: _Loc) -> None:
        if not key or key.startswith("$") or "\x00" in key or (self.name == "metadata" and "." in key):
            dots = ", '.'" if self.name == "metadata" else ""
            self.refuse(
                f"key {clip(key, mark='…')!r} cannot be stored",
                loc,
                f"non-empty keys without a leading '$', NUL{dots} (MongoDB would refuse or misread them)",
            )

    def refuse(self, what: str, loc: _Loc, works: str) -> None:
        where = _render(self.name, loc)
        raise InvalidInput(f"argument {where} {what}; use {works}", path=where)


def _render(name: str, loc: _Loc) -> str:
    parts: list[str | int] = []
    while loc is not None:
        loc, part = loc
        parts.append(part)
    out = clip(name, mark="…")
    for p in reversed(parts[-8:]):  # the innermost few levels say enough
        out += f"[{p}]" if isinstance(p, int) else f".{clip(p, mark='…')}"
    return out
