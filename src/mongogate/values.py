"""Small shared value rules: the document type and integer range checks, defined once."""

from __future__ import annotations

import math
from typing import Any

from mongogate.errors import InvalidInput

Doc = dict[str, Any]

#: the largest integer BSON can store (int64)
MAX_INT64 = 2**63 - 1


def check_int(
    value: object, what: str, lo: int, hi: int, *, default: int | None = None, hint: str = ""
) -> int:
    """An integer argument within [lo, hi] (bools are not integers); None means `default` if given."""
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
        where = f" ({hint})" if hint else ""
        raise InvalidInput(f"{what} must be an integer from {lo} to {hi}{where}; got {shown}")
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
