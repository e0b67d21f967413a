"""What a LangGraph item becomes as a memory, and back: its text, its metadata, its filter, its TTL.

- **The value** is the memory's metadata, bounded by the memory limits (`[limits]`
  `metadata_max_chars`, `metadata_max_keys`, `metadata_max_depth`: a clear `InvalidInput` beyond
  them, naming the setting). mongogate adds at most two keys of its own, named `mongogate:...`,
  which a value may not hold and an item never shows: `mongogate:ttl_minutes` (the item's TTL, so
  a read can refresh it) and `mongogate:unindexed` (the item has no text to search by meaning).
- **The text** recall embeds and matches is what the store's `IndexConfig` names (`fields`, as
  LangGraph's path syntax: `"about"`, `"notes[*].text"`, `"$"` for the whole value), or the
  put's own `index` list, the texts joined by new lines (LangGraph embeds each separately and
  keeps the best; recall has one vector per memory). Without an index config: the value's
  `"text"` when a string, else the value as JSON (as before). `index=False`, or no text at the
  fields, stores the item unindexed: its memory text is the value as JSON, and the store's
  search by query ranks it with none (`mongogate:unindexed`). A text longer than
  `memory.long_term.max_text_bytes` is indexed by its first that many bytes; the value is kept whole.
- **A filter** is LangGraph's: top-level keys, each an exact value or operators (`$eq`, `$ne`,
  `$gt`, `$gte`, `$lt`, `$lte`), as `recall.Compared` (docs/frameworks.md: where the answers
  differ from `InMemoryStore`'s and why).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

from langgraph.store.base import TTLConfig, get_text_at_path, tokenize_path

from mongogate.config import LimitsSettings, LongTermSettings
from mongogate.errors import InvalidInput
from mongogate.recall import OPERATORS, Compared, check_metadata, check_metadata_filter
from mongogate.values import Doc, shown

RESERVED = "mongogate:"
TTL_KEY = "mongogate:ttl_minutes"
UNINDEXED = "mongogate:unindexed"
#: the TTLConfig keys LangGraph defines (`omit_expired` is always true here: an expired memory
#: is never read, whatever the sweep has done)
TTL_KEYS = frozenset({"refresh_on_read", "default_ttl", "sweep_interval_minutes", "omit_expired"})
MINUTES_PER_DAY = 24 * 60

IndexArg = Literal[False] | list[str] | None


def text_of(value: Mapping[str, Any]) -> str:
    """The text of a value without an index config: its "text" when a string, else its JSON."""
    text = value.get("text")
    return text if isinstance(text, str) and text else json.dumps(value, sort_keys=True, default=str)


def cut(text: str, max_bytes: int) -> str:
    """`text` to its first `max_bytes` UTF-8 bytes, never inside a character."""
    raw = text.encode("utf-8", "surrogatepass")
    return text if len(raw) <= max_bytes else raw[:max_bytes].decode("utf-8", "ignore")


def check_index(index: object, dims: int) -> tuple[str, ...] | None:
    """The fields an `IndexConfig` embeds (None: no config). The embedder is mongogate's own
    (`[memory.embedding]`): the MCP recall tool reads the same vectors, so `embed` is refused and
    `dims`, if given, must be its size."""
    if index is None:
        return None
    if not isinstance(index, Mapping):
        raise InvalidInput("index must be a LangGraph IndexConfig (a dict), e.g. {'fields': ['text']}")
    unknown = sorted(set(index) - {"fields", "dims", "embed"})
    if unknown:
        raise InvalidInput(
            f"index: {', '.join(unknown)} is not read here; MongogateStore takes fields (and dims)"
        )
    if "embed" in index:
        raise InvalidInput(
            "index.embed: MongogateStore embeds with mongogate's model ([memory.embedding]), whose "
            "vectors the MCP recall tool reads too; choose the model there and pass index={'fields': [...]}"
        )
    if "dims" in index and index["dims"] != dims:
        raise InvalidInput(f"index.dims is {shown(index['dims'])}; the configured embedder makes {dims}")
    return check_fields(index.get("fields") or ["$"], "index.fields")


def check_fields(fields: object, what: str) -> tuple[str, ...]:
    if not isinstance(fields, list | tuple) or not all(isinstance(f, str) and f for f in fields):
        raise InvalidInput(f"{what} must be a list of field paths, e.g. ['text', 'notes[*].body'] or ['$']")
    for f in fields:
        if f != "$":
            tokenize_path(f)
    return tuple(fields)


def indexed_text(value: Mapping[str, Any], fields: tuple[str, ...] | None, index: IndexArg) -> str | None:
    """The text to embed (None: the item is unindexed): the put's `index`, else the config's fields."""
    if index is False:
        return None
    paths = check_fields(index, "index") if index is not None else fields
    if paths is None:
        return text_of(value)
    texts = [t for p in paths for t in get_text_at_path(dict(value), p)]
    joined = "\n".join(texts)
    return joined if joined.strip() else None


def check_value(value: Mapping[str, Any], limits: LimitsSettings, where: str) -> Doc:
    """A value as the memory's metadata stores it, or `InvalidInput` saying which limit it passes."""
    for k in value:
        if isinstance(k, str) and k.startswith(RESERVED):
            raise InvalidInput(f"{where}: the key {shown(k)} is mongogate's own; name it otherwise")
    try:
        return check_metadata(value, limits, "value")
    except InvalidInput as e:
        raise InvalidInput(
            f"{where}: {e}. A LangGraph value is stored as a memory's metadata, within [limits] "
            "metadata_max_chars, metadata_max_keys and metadata_max_depth",
            path=e.path,
        ) from e


def stored_value(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The item's value: the memory's metadata without mongogate's keys."""
    return {k: v for k, v in metadata.items() if not k.startswith(RESERVED)}


def ttl_of(metadata: Mapping[str, Any]) -> float | None:
    ttl = metadata.get(TTL_KEY)
    return float(ttl) if isinstance(ttl, int | float) and not isinstance(ttl, bool) else None


def check_ttl(ttl: object, settings: LongTermSettings, what: str = "ttl") -> float | None:
    """Minutes (LangGraph's unit), more than 0 and at most `memory.long_term.max_ttl_days`."""
    if ttl is None:
        return None
    most = settings.max_ttl_days * MINUTES_PER_DAY
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl <= most:
        raise InvalidInput(
            f"{what}={shown(ttl)}: give minutes, more than 0 and at most {most} "
            "(memory.long_term.max_ttl_days), or None to keep the item"
        )
    return float(ttl)


def coarse_days(minutes: float, settings: LongTermSettings) -> int:
    """Whole days at least `minutes` long: the expiry a remember sets before the exact one, so a
    put interrupted between the two still expires."""
    return min(settings.max_ttl_days, max(1, math.ceil(minutes / MINUTES_PER_DAY)))


def check_ttl_config(ttl: object, settings: LongTermSettings) -> TTLConfig | None:
    if ttl is None:
        return None
    if not isinstance(ttl, Mapping) or set(ttl) - TTL_KEYS:
        raise InvalidInput(f"ttl must be a LangGraph TTLConfig with keys among {', '.join(sorted(TTL_KEYS))}")
    check_ttl(ttl.get("default_ttl"), settings, "ttl.default_ttl")
    sweep = ttl.get("sweep_interval_minutes")
    if sweep is not None and (isinstance(sweep, bool) or not isinstance(sweep, int | float) or sweep <= 0):
        raise InvalidInput(f"ttl.sweep_interval_minutes={shown(sweep)}: give minutes, more than 0")
    for flag in ("refresh_on_read", "omit_expired"):
        if not isinstance(ttl.get(flag, True), bool):
            raise InvalidInput(f"ttl.{flag} must be true or false")
    return cast(TTLConfig, dict(ttl))


def memory_filter(given: Mapping[str, Any] | None, limits: LimitsSettings) -> Doc:
    """A LangGraph `filter` as recall's metadata filter: exact values, and operators as `Compared`."""
    wanted: Doc = {}
    for key, want in (given or {}).items():
        if isinstance(key, str) and key.startswith(RESERVED):
            raise InvalidInput(f"filter: the key {shown(key)} is mongogate's own")
        if isinstance(want, Mapping) and want and all(str(op).startswith("$") for op in want):
            bad = [op for op in want if op not in OPERATORS]
            if bad:
                raise InvalidInput(
                    f"filter.{key}: {shown(bad[0])} is not one of LangGraph's operators "
                    f"({', '.join(OPERATORS)})"
                )
            wanted[key] = Compared(tuple(cast(Sequence[Any], want.items())))
        elif isinstance(want, Mapping | list | tuple):
            raise InvalidInput(
                f"filter.{key}: MongogateStore matches top-level values (a string, number, boolean or "
                "null) or LangGraph's operators, e.g. {'$gt': 3}; not a whole object or list"
            )
        else:
            wanted[key] = want
    return check_metadata_filter(wanted, limits)
