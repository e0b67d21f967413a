"""How a policy error names a place and a value: short, escaped, never ambiguous.

Shared by the filter walk and the pipeline walk (split from filters.py).
"""

from __future__ import annotations

import json
import re
from typing import Any

_SEG_MAX = 64


def seg(key: object) -> str:
    """A key as quoted in a message: escaped (NUL, control chars) and shortened, never huge."""
    text = key if isinstance(key, str) else repr(key)
    if not text.isprintable():
        text = json.dumps(text)[1:-1]
    return text if len(text) <= _SEG_MAX else text[: _SEG_MAX - 1] + "…"


_PLAIN_KEY = re.compile(r"[^.\[\]\"\s]+")


def key_path(path: str, key: object) -> str:
    """``path.key``, or ``path["key"]`` when the key holds dots, brackets, quotes or odd characters,
    so ``filter["a.b"]`` (one dotted field) and ``filter.a.b`` (nested keys) never look alike."""
    if isinstance(key, str) and key.isprintable() and _PLAIN_KEY.fullmatch(key):
        return f"{path}.{seg(key)}" if path else seg(key)
    text = key if isinstance(key, str) else repr(key)
    if len(text) > _SEG_MAX:
        text = text[: _SEG_MAX - 1] + "…"
    return f"{path}[{json.dumps(text)}]"


#: where a value sits, built cheaply while walking and rendered only for an error:
#: (parent, key or list index); None is the filter itself
Loc = tuple[Any, object] | None


def where(loc: Loc) -> str:
    """``filter.$or[1].total.$where`` from a Loc."""
    keys: list[object] = []
    while loc is not None:
        loc, key = loc
        keys.append(key)
    out = "filter"
    for key in reversed(keys):
        out = f"{out}[{key}]" if type(key) is int else key_path(out, key)
    return out


def show(value: object, limit: int = 40) -> str:
    """A value as quoted in a message: JSON-ish and short."""
    if isinstance(value, str) and len(value) > limit:
        value = value[:limit]
    try:
        text = json.dumps(value, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
