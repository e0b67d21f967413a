"""No function of `src/` is more complex than 15 by radon's cyclomatic count (issue 41).

ruff's C901 (mccabe) counts an `and`/`or` chain or an inline conditional as nothing, so a function
it scored 9 scored 42 here (`IndexCache.fresh`, now split); radon counts every boolean operator,
comprehension test and conditional expression as a branch. `make lint` runs this file as a
script, and `make test` as a test: both fail naming each function over the limit.

`PENDING` held the scheduler's six, which another branch was rewriting when the check came in
(its claim path); once that was in (issue 38) they were split and the list is empty. An entry is
held at its count (it may not grow) and must be removed once no longer over the limit (the check
says so), so the list only shrinks (docs/decisions/packages-and-api.md, "Complexity").
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Class, Function

SRC = Path(__file__).resolve().parents[1] / "src" / "mongogate"
MAX = 15
PENDING: dict[str, int] = {}


def _functions(blocks: list[Function | Class]) -> Iterator[Function]:
    for block in blocks:
        if isinstance(block, Class):
            yield from _functions(list(block.methods) + list(block.inner_classes))
        else:
            yield block
            yield from _functions(list(block.closures))


def complexities() -> dict[str, int]:
    """`path:function` -> radon's count, for every function and method of `src/`."""
    out: dict[str, int] = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for fn in _functions(cc_visit(path.read_text(encoding="utf-8"))):
            name = f"{rel}:{fn.fullname}"
            out[name] = max(out.get(name, 0), fn.complexity)
    return out


def problems() -> list[str]:
    counts = complexities()
    found = []
    for name, n in sorted(counts.items()):
        held = PENDING.get(name)
        if held is None and n > MAX:
            found.append(f"{name} is {n} (at most {MAX}): split it")
        elif held is not None and n > held:
            found.append(f"{name} grew to {n} (pending at {held}): split it, do not grow it")
    for name in sorted(PENDING):
        if counts.get(name, 0) <= MAX:
            found.append(f"{name} is no longer over {MAX}: remove it from PENDING")
    return found


def test_no_function_is_more_complex_than_15() -> None:
    assert problems() == []


def main() -> int:
    found = problems()
    for line in found:
        print(f"complexity: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
