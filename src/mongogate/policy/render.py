"""Documents as the model sees them: projected, rendered as plain JSON, and capped in bytes."""

from __future__ import annotations

import base64
import json
import math
import re
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any

import pydantic_core
from bson import DBRef, Decimal128, ObjectId, Regex, Timestamp

from mongogate.specs import QueryToolSpec

_REGEX_FLAGS = (
    (re.IGNORECASE, "i"),
    (re.LOCALE, "l"),
    (re.MULTILINE, "m"),
    (re.DOTALL, "s"),
    (re.VERBOSE, "x"),
)


def iso_utc(dt: datetime) -> str:
    """ISO 8601 in UTC with a Z; naive datetimes are UTC (pymongo's default)."""
    offset = dt.utcoffset()
    if offset:
        dt = dt - offset
    return dt.replace(tzinfo=None).isoformat(timespec="milliseconds" if dt.microsecond else "seconds") + "Z"


def to_json(value: Any) -> Any:
    """Render BSON values as JSON values; anything unknown becomes its string form, never an error."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:  # the common cases, fast
        return value
    if kind is dict:
        return {k if type(k) is str else str(k): to_json(v) for k, v in value.items()}
    if kind is datetime:
        return iso_utc(value)
    if kind is float:
        return value if math.isfinite(value) else str(value)
    return _other(value)


def _other(value: Any) -> Any:
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, datetime):
        return iso_utc(value)
    return _bson_value(value)


def _bson_value(value: Any) -> Any:
    """BSON's own types as JSON: ids and decimals as text, binary as base64, timestamps as dates,
    regular expressions as /pattern/flags, references as {$ref, $id}; anything else as text."""
    if isinstance(value, ObjectId | Decimal128 | Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, bytes):  # bson.Binary is a bytes subclass
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Timestamp):
        return iso_utc(value.as_datetime())
    if isinstance(value, Regex):
        letters = "".join(c for flag, c in _REGEX_FLAGS if value.flags & flag)
        return f"/{to_json(value.pattern)}/{letters}"
    if isinstance(value, DBRef):
        return {"$ref": value.collection, "$id": to_json(value.id)}
    return str(value)


@lru_cache(maxsize=256)
def _paths(projection: tuple[str, ...]) -> tuple[tuple[str, list[str] | None], ...]:
    return tuple((p, p.split(".") if "." in p else None) for p in projection)


def project(doc: Mapping[str, Any], spec: QueryToolSpec) -> dict[str, Any]:
    """Keep only the spec's projection (``_id`` only if listed), whatever the server returned."""
    out: dict[str, Any] = {}
    for name, parts in _paths(tuple(spec.projection)):
        if parts is None:
            if name in doc:
                out[name] = doc[name]
        else:
            found, value = _pick(doc, parts)
            if found:
                _put(out, parts, value)
    return out


def _scalar_ok(ftype: str) -> Callable[[Any], bool]:
    """Whether one stored (BSON) value is of the declared type, as the filter walk compares it."""
    if ftype == "string":
        return lambda v: isinstance(v, str)
    if ftype == "number":
        return lambda v: isinstance(v, int | float | Decimal128) and not isinstance(v, bool)
    if ftype == "int":
        return lambda v: (
            (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
        )
    if ftype == "bool":
        return lambda v: isinstance(v, bool)
    if ftype == "date":
        return lambda v: isinstance(v, datetime)
    if ftype == "objectId":
        return lambda v: isinstance(v, ObjectId)
    raise ValueError(f"unknown field type {ftype!r}")


@lru_cache(maxsize=16)
def type_check(ftype: str) -> Callable[[Any], bool]:
    """``ok(value)``: null, a value of ``ftype``, or an array of those (MongoDB filters match an
    array's elements, so an array of the declared type is that type). Anything else is drift."""
    scalar = _scalar_ok(ftype)

    def ok(value: Any) -> bool:
        if value is None or scalar(value):
            return True
        return isinstance(value, list) and all(v is None or scalar(v) for v in value)

    return ok


class Renderer:
    """``to_json(project(doc, spec))`` for one spec, in one pass when no projected path is dotted.

    A projected value that does not match its declared type is returned as null and counted
    (``render_all``): one drifted document never makes the result violate the tool's own output
    schema, and never hides the rest of the result from a validating client."""

    def __init__(self, spec: QueryToolSpec) -> None:
        self.spec = spec
        self.flat: tuple[str, ...] | None = (
            tuple(spec.projection) if all("." not in p for p in spec.projection) else None
        )
        self.checks: tuple[tuple[str, Callable[[Any], bool] | None], ...] = tuple(
            (p, type_check(spec.fields[p]) if p in spec.fields else None) for p in spec.projection
        )

    def __call__(self, doc: Mapping[str, Any], bad: list[str] | None = None) -> dict[str, Any]:
        """One document; the names of fields nulled for a type mismatch are added to ``bad``."""
        if self.flat is None:
            return self._nested(doc, bad)
        out: dict[str, Any] = {}
        for name, ok in self.checks:
            if name in doc:
                value = doc[name]
                if ok is None or ok(value):
                    out[name] = to_json(value)
                else:
                    out[name] = None
                    if bad is not None:
                        bad.append(name)
        return out

    def _nested(self, doc: Mapping[str, Any], bad: list[str] | None) -> dict[str, Any]:
        out = project(doc, self.spec)
        for name, ok in self.checks:
            if ok is None:
                continue
            parts = name.split(".")
            holder: Any = out
            for p in parts[:-1]:
                holder = holder.get(p) if isinstance(holder, dict) else None
            if isinstance(holder, dict) and parts[-1] in holder and not ok(holder[parts[-1]]):
                holder[parts[-1]] = None
                if bad is not None:
                    bad.append(name)
        return to_json(out)  # type: ignore[no-any-return]

    def render_all(
        self, raw: list[Mapping[str, Any]], max_bytes: int
    ) -> tuple[list[dict[str, Any]], bool, dict[str, int]]:
        """(documents capped to ``max_bytes``, whether any were cut, type mismatches per field
        among the documents returned)."""
        marks: list[list[str]] = []
        docs = []
        for doc in raw:
            bad: list[str] = []
            docs.append(self(doc, bad))
            marks.append(bad)
        docs, cut = cap_documents(docs, max_bytes)
        return docs, cut, count_marks(marks[: len(docs)])


def count_marks(marks: list[list[str]]) -> dict[str, int]:
    """``{field: documents in which it was nulled}`` (empty when nothing drifted)."""
    counts: dict[str, int] = {}
    for bad in marks:
        for name in bad:
            counts[name] = counts.get(name, 0) + 1
    return counts


def _pick(value: Any, parts: list[str]) -> tuple[bool, Any]:
    if not parts:
        return True, value
    if isinstance(value, Mapping):
        if parts[0] not in value:
            return False, None
        return _pick(value[parts[0]], parts[1:])
    if isinstance(value, list):  # like MongoDB: a dotted path reaches into arrays of documents
        picked = [
            v for found, v in (_pick(item, parts) for item in value if isinstance(item, Mapping)) if found
        ]
        return True, picked
    return False, None


def _put(out: dict[str, Any], parts: list[str], value: Any) -> None:
    for p in parts[:-1]:
        nxt = out.get(p)
        if not isinstance(nxt, dict):
            nxt = out[p] = {}
        out = nxt
    out[parts[-1]] = value


def encode(value: Any) -> str:
    """Compact UTF-8 JSON of an already rendered value (pydantic-core: several times json.dumps)."""
    try:
        return pydantic_core.to_json(value).decode("utf-8")
    except (pydantic_core.PydanticSerializationError, UnicodeDecodeError, ValueError):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def json_size(value: Any) -> int:
    """Bytes of ``value`` as sent (compact UTF-8 JSON)."""
    try:
        return len(pydantic_core.to_json(value))
    except (pydantic_core.PydanticSerializationError, ValueError):
        return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace"))


def cap_documents(docs: list[dict[str, Any]], max_bytes: int) -> tuple[list[dict[str, Any]], bool]:
    """The longest prefix of ``docs`` whose JSON array fits in ``max_bytes``; True if any were cut."""
    if json_size(docs) <= max_bytes:  # the usual case: one encoding, no cut
        return docs, False
    total = 2  # the brackets
    for i, doc in enumerate(docs):
        total += json_size(doc) + (1 if i else 0)
        if total > max_bytes:
            return docs[:i], True
    return docs, False
