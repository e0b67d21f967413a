"""Bounds on every argument of long-term memory, checked before any embedding or database work.

The tools layer measures arguments first (`tools/bounds.py`); these checks make the store safe
when called directly too, and add what only a stored value needs: finite numbers, storable keys,
namespaces without control characters. Every refusal is `InvalidInput` naming the argument
(and the path inside it) and what would work.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from mongogate.config import LimitsSettings, LongTermSettings
from mongogate.errors import InvalidInput
from mongogate.recall.compare import OPERATORS, RANGES, Compared, is_number
from mongogate.values import Doc, check_int, check_query_text, fits_int64, storable, utf8_size
from mongogate.values import shown as _clip

#: namespace shape: segments joined by "/", each of letters, digits and `_ . - : @ +`
MAX_NAMESPACE_DEPTH = 8
MAX_SEGMENT_CHARS = 64
MAX_NAMESPACE_CHARS = 256
MAX_KEY_CHARS = 200
MAX_ID_CHARS = 64
DEFAULT_NAMESPACE = "default"
_SEGMENT = re.compile(r"[\w.:@+-]+")
NAMESPACE_RULES = (
    f"segments joined by '/', at most {MAX_NAMESPACE_DEPTH} segments of at most {MAX_SEGMENT_CHARS} "
    "letters, digits or _ . - : @ + each (no spaces or control characters, no segment of only dots)"
)


def check_namespace(value: object, what: str = "namespace") -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} must be a non-empty string: {NAMESPACE_RULES}")
    if len(value) > MAX_NAMESPACE_CHARS:
        raise InvalidInput(f"{what} is {len(value)} characters; at most {MAX_NAMESPACE_CHARS}")
    parts = value.split("/")
    if len(parts) > MAX_NAMESPACE_DEPTH:
        raise InvalidInput(f"{what} {_clip(value)} has {len(parts)} segments; at most {MAX_NAMESPACE_DEPTH}")
    for part in parts:
        if not part or len(part) > MAX_SEGMENT_CHARS or not _SEGMENT.fullmatch(part):
            raise InvalidInput(f"{what} {_clip(value)} is not a namespace; use {NAMESPACE_RULES}")
        if not part.strip("."):  # "a/../b" reads as "b" to an operator, and is not
            raise InvalidInput(f"{what} {_clip(value)} has a segment of only dots; use {NAMESPACE_RULES}")
    return value


def namespace_path(namespace: str) -> list[str]:
    """ "a/b/c" -> ["a", "a/b", "a/b/c"]: stored, so a prefix is one indexed equality."""
    parts = namespace.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


#: bidirectional embeddings, overrides and isolates: they reorder what a reader sees
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def unprintable(c: str) -> bool:
    """C0 and C1 controls (NEL, CSI...), line and paragraph separators, bidi controls."""
    return unicodedata.category(c) in ("Cc", "Zl", "Zp") or c in _BIDI


def check_key(value: object) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_KEY_CHARS:
        raise InvalidInput(f"key must be a string of 1 to {MAX_KEY_CHARS} characters")
    storable(value, "key")
    if any(unprintable(c) for c in value):
        raise InvalidInput(
            f"key {_clip(value)} holds control, line-separator or bidirectional-override characters; "
            "use printable text"
        )
    return value


def check_memory_id(value: object, what: str = "id") -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_ID_CHARS:
        raise InvalidInput(
            f"{what} must be a memory id as remember returned it (1 to {MAX_ID_CHARS} characters)"
        )
    return storable(value, what)


def check_text(value: object, settings: LongTermSettings) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput("text must be a non-empty string: the fact to remember")
    size = utf8_size(value, "text")
    if size > settings.max_text_bytes:
        raise InvalidInput(
            f"text is {size} bytes; at most {settings.max_text_bytes} (memory.long_term.max_text_bytes). "
            "Remember a shorter fact, or split it into several memories"
        )
    return value


def check_query(value: object, settings: LongTermSettings) -> str:
    return check_query_text(value, settings.max_query_chars, setting="memory.long_term.max_query_chars")


def check_recall_limit(value: object, settings: LongTermSettings) -> int:
    return check_int(
        value,
        "limit",
        1,
        settings.max_recall_limit,
        default=min(settings.default_recall_limit, settings.max_recall_limit),
        hint="memories; memory.long_term.max_recall_limit",
    )


def check_min_score(value: object, settings: LongTermSettings) -> float:
    """A score floor in [0, 1]; None: `memory.long_term.min_score`."""
    if value is None:
        return settings.min_score
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise InvalidInput(f"min_score={value!r}: give a number from 0 to 1 (0 returns every match)")
    return float(value)


def check_ttl(value: object, settings: LongTermSettings) -> int | None:
    if value is None:
        return None
    return check_int(value, "ttl_days", 1, settings.max_ttl_days, hint="days until the memory is erased")


def check_metadata(value: object, limits: LimitsSettings, what: str = "metadata") -> Doc:
    """A JSON object MongoDB stores as given: bounded, finite numbers, keys without '$', '.' or NUL."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInput(f"{what} must be a JSON object")
    budget = [limits.metadata_max_keys, limits.metadata_max_chars]
    return dict(_value(value, what, 1, limits, budget))


def _value(v: Any, path: str, depth: int, limits: LimitsSettings, budget: list[int]) -> Any:
    if isinstance(v, Mapping | list | tuple):
        _count_items(v, path, depth, limits, budget)
    if isinstance(v, Mapping):
        return _mapping(v, path, depth, limits, budget)
    if isinstance(v, list | tuple):
        return [_value(x, f"{path}[{i}]", depth + 1, limits, budget) for i, x in enumerate(v)]
    budget[1] -= _scalar_chars(v, path)
    if budget[1] < 0:
        raise InvalidInput(
            f"{path}: metadata is larger than {limits.metadata_max_chars} characters "
            "(limits.metadata_max_chars); keep metadata small"
        )
    return v


def _count_items(v: Any, path: str, depth: int, limits: LimitsSettings, budget: list[int]) -> None:
    """A container: within the depth limit, its keys and items taken from the key budget."""
    if depth > limits.metadata_max_depth:
        raise InvalidInput(
            f"{path} is nested deeper than {limits.metadata_max_depth} levels "
            "(limits.metadata_max_depth); use a flatter object"
        )
    budget[0] -= len(v)
    if budget[0] < 0:
        raise InvalidInput(
            f"{path}: more than {limits.metadata_max_keys} keys and items in all "
            "(limits.metadata_max_keys); keep metadata small"
        )


def _mapping(v: Mapping[Any, Any], path: str, depth: int, limits: LimitsSettings, budget: list[int]) -> Doc:
    out: Doc = {}
    for k, x in v.items():
        if not isinstance(k, str) or not k or k.startswith("$") or "." in k or "\x00" in k:
            raise InvalidInput(
                f"{path}: key {_clip(k)} cannot be stored; use non-empty keys without a leading '$', "
                "'.' or NUL"
            )
        storable(k, f"{path}: a key")
        budget[1] -= len(k) + 4
        out[k] = _value(x, f"{path}.{k}", depth + 1, limits, budget)
    return out


def _scalar_chars(v: Any, path: str) -> int:
    """What a scalar costs the character budget; refused when MongoDB could not store or match it."""
    if isinstance(v, str):
        storable(v, path)
        return len(v) + 2
    if isinstance(v, bool) or v is None:
        return 5
    if isinstance(v, int):
        if not fits_int64(v):
            raise InvalidInput(f"{path} is an integer outside the 64-bit range; send it as a string")
        return 8
    if isinstance(v, float):
        if not math.isfinite(v):
            raise InvalidInput(f"{path} is {v!r}; use a finite number (NaN and Infinity cannot be matched)")
        return 8
    raise InvalidInput(f"{path} holds a {type(v).__name__}; use JSON values")


def check_metadata_filter(value: object, limits: LimitsSettings) -> Doc:
    """Top-level keys of metadata, each with an exact value (a string, number, boolean or null) or
    a `compare.Compared` (built by code: a JSON argument cannot hold one)."""
    compared: dict[str, Compared] = {}
    rest: object = value
    if isinstance(value, Mapping):
        compared = {k: v for k, v in value.items() if isinstance(v, Compared)}
        rest = {k: v for k, v in value.items() if not isinstance(v, Compared)}
    filt = check_metadata(rest, limits, "metadata")
    for k, v in filt.items():
        if isinstance(v, dict | list):
            raise InvalidInput(
                f"metadata.{k}: a filter value must be a string, number, boolean or null (exact match)"
            )
    for k, c in compared.items():
        check_metadata({k: [v for _, v in c.ops]}, limits, "metadata")
        _check_compared(k, c)
    return filt | compared


def _check_compared(key: str, c: Compared) -> None:
    """Known operators; a range takes a number or a string, every range of a key the same kind."""
    kinds = set()
    for op, v in c.ops:
        if op not in OPERATORS:
            raise InvalidInput(
                f"metadata.{key}: {_clip(op)} is not an operator; use one of {', '.join(OPERATORS)}"
            )
        if isinstance(v, dict | list):
            raise InvalidInput(f"metadata.{key}.{op}: compare with a string, number, boolean or null")
        if op in RANGES:
            if not (is_number(v) or isinstance(v, str)):
                raise InvalidInput(
                    f"metadata.{key}.{op} is {_clip(v)}; a range compares with a number or a string"
                )
            kinds.add(is_number(v))
    if len(kinds) > 1:
        raise InvalidInput(f"metadata.{key}: its ranges compare with a number and a string; use one kind")
