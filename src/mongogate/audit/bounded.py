"""Bounded copies of what a model sent, for the audit log: clipped, counted, never merged.

Values in logged filters are truncated (or redacted to their types), so the log stays small
and does not become a copy of what the model tried to smuggle; ``trimmed`` says what was
cut, and two keys clipped to the same text get distinct names (``key #2``) instead of one
overwriting the other. ``resolve`` finds the offending node a policy path names.
"""

from __future__ import annotations

import json
import math
import re
from itertools import islice
from typing import Any

from mongogate import values
from mongogate.policy import to_json

MAX_ITEMS = 50  # per object/array in a logged filter
MAX_DEPTH = 12
MAX_PATH = 512
MAX_VALUES = 500  # per logged filter
OFFENDING_VALUES = 50  # the offending node's own copy is small: it is there to be read


class BoundedCopy:
    """The copying half of the audit log (``redact_values``, ``max_value_chars`` from audit.*)."""

    redact_values: bool
    max_value_chars: int

    def _bounded(self, value: object, max_values: int) -> tuple[Any, dict[str, int]]:
        """A JSON-safe, bounded copy of ``value`` (strings clipped, or scalars redacted to their
        types; at most 50 entries per object or array, 12 levels and ``max_values`` values), and
        what it left out: keys, items, subtrees cut by depth, values over budget."""
        budget = [max_values]
        cut = {"keys": 0, "items": 0, "deep": 0, "values": 0}

        def copy(v: object, depth: int) -> Any:
            budget[0] -= 1
            if budget[0] < 0:
                cut["values"] += 1
                return "…"
            if isinstance(v, dict | list | tuple):
                if depth >= MAX_DEPTH:
                    cut["deep"] += 1
                    return "<object>" if isinstance(v, dict) else "<array>"
                if isinstance(v, dict):
                    out: dict[str, Any] = {}
                    for k, x in islice(v.items(), MAX_ITEMS):
                        out[unique(self.key(k), out)] = copy(x, depth + 1)
                    if len(v) > MAX_ITEMS:
                        out[unique("…", out)] = f"{len(v) - MAX_ITEMS} more keys"
                        cut["keys"] += len(v) - MAX_ITEMS
                    return out
                items = [copy(x, depth + 1) for x in islice(v, MAX_ITEMS)]
                if len(v) > MAX_ITEMS:
                    items.append(f"… {len(v) - MAX_ITEMS} more items")
                    cut["items"] += len(v) - MAX_ITEMS
                return items
            return self.scalar(v)

        copied = copy(value, 0)
        return copied, {k: n for k, n in cut.items() if n}

    def key(self, k: object) -> str:
        return clip(k if isinstance(k, str) else repr(k), self.max_value_chars)

    def scalar(self, v: object) -> Any:
        if self.redact_values:
            return f"<{scalar_type(v)}>"
        if v is None or isinstance(v, bool) or (isinstance(v, int) and values.fits_int64(v)):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else str(v)
        text = v if isinstance(v, str) else render_value(v)
        return clip(text, self.max_value_chars)


_PATH_PART = re.compile(r'\.([^.\[\]"\s]+)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')


def resolve(root: object, path: str) -> tuple[bool, Any, str | None]:
    """Follow a rendered path (``filter.$or[1].total["a.b"]``) into ``root``, the logged filter.

    Returns (found, node, operator): the operator is the last ``$`` key on the path. Keys that
    the path shortened ("…") match by prefix; a path outside the filter (``sort.x``) is not found.
    """
    head, keys = _path_keys(path)
    operator = next((k for k in reversed(keys) if isinstance(k, str) and k.startswith("$")), None)
    node: Any = root
    if head != "filter":  # the caller logged the whole arguments (no filter argument)
        keys.insert(0, head)
    for key in keys:
        found, node = _step(node, key)
        if not found:
            return False, None, operator
    return True, node, operator


def _path_keys(path: str) -> tuple[str, list[str | int]]:
    """A rendered path's head (``filter``, or an argument's name) and the keys after it."""
    head, _, rest = path.partition(".") if not path.startswith("filter[") else ("filter", "", path[6:])
    if "[" in head:
        head, bracket, tail = head.partition("[")
        rest = bracket + tail + ("." + rest if rest else "")
    else:
        rest = "." + rest if rest else ""
    keys: list[str | int] = []
    for m in _PATH_PART.finditer(rest):
        if m.group(2) is not None:
            keys.append(int(m.group(2)))
        else:
            keys.append(json.loads(m.group(3)) if m.group(3) is not None else m.group(1))
    return head, keys


def _step(node: Any, key: str | int) -> tuple[bool, Any]:
    """One key into `node`: an index of a list, or a key of a dict (a shortened key, ending "…",
    by prefix)."""
    if isinstance(key, int) and isinstance(node, list) and 0 <= key < len(node):
        return True, node[key]
    if isinstance(key, str) and isinstance(node, dict):
        if key in node:
            return True, node[key]
        if key.endswith("…") and (hit := next((k for k in node if str(k).startswith(key[:-1])), None)):
            return True, node[hit]
    return False, None


def scalar_type(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "bool", int: "int", float: "number", str: "string"}.get(type(value), type(value).__name__)


def render_value(value: object) -> str:
    """bson types (and anything else) as text, never an error."""
    rendered = to_json(value)
    return rendered if isinstance(rendered, str) else json.dumps(rendered, default=str)


def unique(key: str, taken: dict[str, Any]) -> str:
    """``key``, or ``key #2``, ``#3``...: two keys clipped to the same text never merge into one."""
    if key not in taken:
        return key
    n = 2
    while f"{key} #{n}" in taken:
        n += 1
    return f"{key} #{n}"


def clip(text: str, limit: int) -> str:
    return values.clip(text, limit, mark=f"…(+{len(text) - limit} chars)")
