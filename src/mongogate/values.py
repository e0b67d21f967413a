"""Small shared value rules: the document type and integer range checks, defined once."""

from __future__ import annotations

from typing import Any

from mongogate.errors import InvalidInput

Doc = dict[str, Any]

#: the largest integer BSON can store (int64)
MAX_INT64 = 2**63 - 1


def clip(text: str, n: int = 40, *, mark: str = "...") -> str:
    """``text`` cut to ``n`` characters, with ``mark`` when it was longer (error texts stay short)."""
    return text if len(text) <= n else text[:n] + mark


def shown(value: object, n: int = 40) -> str:
    """``repr(value)`` cut to ``n`` characters: how a refused value appears in an error."""
    return clip(repr(value), n)


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
