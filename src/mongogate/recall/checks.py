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
from datetime import UTC, date, datetime
from typing import Any

from mongogate.clock import as_utc, truncate_ms
from mongogate.config import LimitsSettings, LongTermSettings
from mongogate.errors import InvalidInput
from mongogate.indexing import OPERATORS, RANGES, Compared, is_number
from mongogate.recall.chain import MAX_SUPERSEDES
from mongogate.recall.model import Source
from mongogate.values import MAX_INT64, Doc, check_int, check_query_text, fits_int64, storable, utf8_size
from mongogate.values import shown as _clip

#: namespace shape: segments joined by "/", each of letters, digits and `_ . - : @ +`
MAX_NAMESPACE_DEPTH = 8
MAX_SEGMENT_CHARS = 64
MAX_NAMESPACE_CHARS = 256
MAX_KEY_CHARS = 200
MAX_ID_CHARS = 64
#: a `source.session_id`: the longest `memory.max_id_length` allows
MAX_SESSION_ID_CHARS = 1000
#: an ISO 8601 time as an argument ("2025-05-14T09:30:00.000+02:00" is 29)
MAX_TIME_CHARS = 40
TIME_FORMS = "ISO 8601, e.g. '2025-05-14' or '2025-05-14T09:30:00Z' (UTC when no offset is given)"
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


def check_time(value: object, what: str) -> datetime | None:
    """A point in time as ISO 8601 text (a date alone is its midnight UTC; no offset: UTC), cut to
    the millisecond MongoDB stores; None stays None."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return truncate_ms(as_utc(value))
    if not isinstance(value, str) or not value or len(value) > MAX_TIME_CHARS:
        raise InvalidInput(f"{what} must be a time as {TIME_FORMS}")
    text = value.strip()
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            return datetime(day.year, day.month, day.day, tzinfo=UTC)
        return truncate_ms(as_utc(datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))))
    except ValueError:
        raise InvalidInput(f"{what}={_clip(value)} is not a time; give {TIME_FORMS}") from None


def check_time_range(after: datetime | None, before: datetime | None) -> None:
    if after is not None and before is not None and after >= before:
        raise InvalidInput(
            f"occurred_after ({after.isoformat()}) must be earlier than occurred_before "
            f"({before.isoformat()}): the range is [occurred_after, occurred_before)"
        )


def check_flag(value: object, what: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidInput(f"{what} must be true or false")
    return value


def check_source(value: object) -> Source | None:
    """`{session_id, seq}`: a message of the caller's conversations (whether it is one is the
    caller's check: the tool reads it before remember runs)."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) != {"session_id", "seq"}:
        raise InvalidInput(
            "source must be an object with exactly session_id and seq: the message of your conversation "
            "the fact came from (as load_context or list_sessions name them)"
        )
    sid = value["session_id"]
    if not isinstance(sid, str) or not sid or len(sid) > MAX_SESSION_ID_CHARS or ":" in sid:
        raise InvalidInput(
            f"source.session_id must be a session id (1 to {MAX_SESSION_ID_CHARS} characters, no ':')"
        )
    if any(unprintable(c) for c in sid):
        raise InvalidInput("source.session_id holds control characters; give a session id as returned")
    storable(sid, "source.session_id")
    seq = check_int(value["seq"], "source.seq", 0, MAX_INT64, hint="the message's seq in its session")
    return Source(sid, seq)


def check_supersedes(value: object) -> tuple[str, ...]:
    """What a remember replaces: one memory id or key, or a list of them (at most `MAX_SUPERSEDES`),
    each once, in order."""
    if value is None:
        return ()
    refs = [value] if isinstance(value, str) else value
    if not isinstance(refs, list) or not refs or len(refs) > MAX_SUPERSEDES:
        raise InvalidInput(
            f"supersedes must be a memory id or key, or a list of 1 to {MAX_SUPERSEDES} of them "
            "(ids as remember, recall or list_memories returned them; keys of the new memory's namespace)"
        )
    out: list[str] = []
    for i, ref in enumerate(refs):
        what = "supersedes" if isinstance(value, str) else f"supersedes[{i}]"
        if not isinstance(ref, str) or not ref or len(ref) > max(MAX_KEY_CHARS, MAX_ID_CHARS):
            raise InvalidInput(f"{what} must be a memory id or a key ({MAX_KEY_CHARS} characters at most)")
        if any(unprintable(c) for c in ref):
            raise InvalidInput(f"{what} {_clip(ref)} holds control characters; give an id or key as stored")
        storable(ref, what)
        if ref not in out:
            out.append(ref)
    return tuple(out)


def check_told(source: object, occurred_at: object) -> Doc:
    """A version's `source` and `occurred_at` as stored (checked; None when not given)."""
    src = check_source(source)
    return {
        "source": None if src is None else {"session_id": src.session_id, "seq": src.seq},
        "occurred_at": check_time(occurred_at, "occurred_at"),
    }
