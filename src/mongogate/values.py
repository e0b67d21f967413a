"""Small shared value rules: the document type and integer range checks, defined once."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from mongogate.errors import InvalidInput

if TYPE_CHECKING:
    from pymongo.asynchronous.database import AsyncDatabase

Doc = dict[str, Any]
T = TypeVar("T")


def bson(doc: Mapping[str, Any]) -> Doc:
    """A typed document (a `TypedDict` of `memory/documents.py` or `recall/documents.py`) as the
    driver's collections take it: the same dict, no copy."""
    return cast(Doc, doc)


#: the integers BSON can store (int64): every range check in mongogate uses these two
MAX_INT64 = 2**63 - 1
MIN_INT64 = -MAX_INT64 - 1


def fits_int64(value: int) -> bool:
    """Whether an integer fits in BSON's int64 (a larger one is refused or cannot be stored)."""
    return MIN_INT64 <= value <= MAX_INT64


def clip(text: str, n: int = 40, *, mark: str = "...") -> str:
    """``text`` cut to ``n`` characters, with ``mark`` when it was longer (error texts stay short)."""
    return text if len(text) <= n else text[:n] + mark


def shown(value: object, n: int = 40) -> str:
    """``repr(value)`` cut to ``n`` characters: how a refused value appears in an error."""
    return clip(repr(value), n)


def is_storable(text: str) -> bool:
    """Whether BSON can hold `text`: its UTF-8 has no lone surrogate (a JSON escape such as
    "\\ud800", or an in-process caller, can hand one over)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable(text: str, what: str) -> str:
    """`text` if BSON can hold it (`is_storable`), else `InvalidInput` naming `what`: the one rule
    every stored or queried string of memory, recall and the query tools keeps."""
    if not is_storable(text):
        raise InvalidInput(f"{what} is not valid Unicode (it holds a lone surrogate)")
    return text


def utf8_size(text: str, what: str) -> int:
    """The UTF-8 bytes of `text`, refused like `storable` when it holds a lone surrogate."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInput(f"{what} is not valid Unicode (it holds a lone surrogate)") from None


def check_query_text(value: object, max_chars: int, *, setting: str = "") -> str:
    """A search query (`recall`, `search_messages`): a non-empty string of at most `max_chars`
    characters that BSON can hold; `setting` names the setting behind `max_chars`, if any."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput("query must be a non-empty string: the words or identifier to look for")
    if len(value) > max_chars:
        where = f" ({setting})" if setting else ""
        raise InvalidInput(f"query is {len(value)} characters; at most {max_chars}{where}")
    return storable(value, "query")


def check_int(
    value: object, what: str, lo: int, hi: int, *, default: int | None = None, hint: str = ""
) -> int:
    """An integer argument within [lo, hi] (bools are not integers); None means `default` if given."""
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        where = f" ({hint})" if hint else ""
        raise InvalidInput(f"{what} must be an integer from {lo} to {hi}{where}; got {shown(value)}")
    return value


def non_finite_path(value: object, root: str) -> str | None:
    """The path of the first NaN or +-Infinity inside `value` (e.g. `state.a[2]`), or None.

    JSON has no such numbers and MongoDB engines store or compare them differently, so a stored
    value (metadata, state) holding one is the caller's error, not the database's. Iterative, so
    a deep value cannot exhaust the stack.
    """
    stack: list[tuple[object, str]] = [(value, root)]
    while stack:
        v, path = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return path
        if isinstance(v, dict):
            stack.extend((x, f"{path}.{k}") for k, x in v.items())
        elif isinstance(v, list | tuple):
            stack.extend((x, f"{path}[{i}]") for i, x in enumerate(v))
    return None


def check_finite(value: object, root: str) -> None:
    """Refuse a stored value holding NaN or +-Infinity, naming where (see `non_finite_path`)."""
    path = non_finite_path(value, root)
    if path is not None:
        raise InvalidInput(
            f"{path} is not a finite number (NaN and Infinity cannot be stored); use a finite number, "
            'null, or a string such as "NaN"'
        )


#: what a result's fields besides its list of items may take, within a response byte cap
RESPONSE_ENVELOPE = 64 * 1024
#: how much larger than its UTF-8 bytes a text can get as JSON (a control character is `\u0001`)
JSON_ESCAPE_FACTOR = 6


def json_size(value: object) -> int:
    """Bytes of `value` as compact UTF-8 JSON: how a response byte cap measures what it returns."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return len(text.encode("utf-8", "replace"))


class ByteBudget:
    """The byte cap of one tool response, spent item by item while the items are read.

    Every tool that returns a list (messages, sessions, events, memories) makes one per call,
    ``ByteBudget(settings.limits.max_response_bytes)``, and hands it to the domain call, which
    asks ``take(item)`` before keeping each item and stops reading at the first refusal; the tool
    then reports ``capped`` as ``truncated`` (with what was left out). So reading stops at the cap
    instead of after it (`reply_batch` bounds each database reply on the way). ``reserve``
    is what the result's other fields may take (`RESPONSE_ENVELOPE`); an item is measured as the
    compact JSON of what the tool returns for it (`json_size`).
    """

    def __init__(self, max_bytes: int, reserve: int = RESPONSE_ENVELOPE) -> None:
        self.max_bytes = max_bytes
        self.room = max(0, max_bytes - reserve)
        self.used = 0
        #: an item was refused: the result leaves something out for size
        self.capped = False

    def take(self, item: object) -> bool:
        """Spend the item's size and return True, or return False (and stay capped) if it does not fit."""
        if self.capped:
            return False
        size = json_size(item) + 1  # the comma
        if self.used + size > self.room:
            self.capped = True
            return False
        self.used += size
        return True

    def fits(self, size: int) -> bool:
        """Whether `size` more bytes would fit, without spending them."""
        return not self.capped and self.used + size <= self.room


#: what a recall or search_messages reply's fields besides its list take at most (notice, cursor,
#: counts, id): their byte cap is `memory.long_term.max_response_bytes`, smaller than the tools' cap
ITEMS_ENVELOPE = 1024


def items_budget(max_bytes: int) -> ByteBudget:
    """The byte cap of one recall, list_memories, memory_history or search_messages reply, its
    other fields held back (`ITEMS_ENVELOPE`)."""
    return ByteBudget(max_bytes, reserve=ITEMS_ENVELOPE)


def within(cap: ByteBudget, items: Iterable[T], measure: Callable[[T], object]) -> list[T]:
    """The leading items `cap` takes, each measured as `measure(item)`. The first one always: one
    item larger than the cap alone (bounded by the text limits) must not empty a listing or hide
    from a search; the reply then passes the cap by that one item."""
    kept: list[T] = []
    for item in items:
        if not cap.take(measure(item)) and kept:
            break
        kept.append(item)
    return kept


#: the most one database reply may carry while a tool reads: MongoDB's own batch cap
REPLY_BYTES = 16 * 1024 * 1024
#: the wire limit assumed before the driver has heard from a server (MongoDB's and mongoeco's)
DEFAULT_WIRE_BYTES = 48_000_000


def wire_bytes(db: AsyncDatabase[Any]) -> int:
    """The smallest `maxMessageSizeBytes` the connected servers announced (the driver refuses any
    reply larger), or `DEFAULT_WIRE_BYTES` before it knows."""
    sizes = [
        sd.max_message_size
        for sd in db.client.topology_description.server_descriptions().values()
        if sd.is_server_type_known
    ]
    return min(sizes, default=DEFAULT_WIRE_BYTES)


def reply_batch(max_item_bytes: int, count: int, wire: int = DEFAULT_WIRE_BYTES) -> int:
    """Items per database reply when each may be as large as `max_item_bytes` (as stored): as many
    as `REPLY_BYTES`, or half the wire limit if smaller, hold (at least 1, at most `count`), so a
    large read never becomes one reply the wire cannot carry, and memory per reply stays bounded."""
    per_reply = min(REPLY_BYTES, wire // 2)
    return max(1, min(count, per_reply // max(1, max_item_bytes)))
