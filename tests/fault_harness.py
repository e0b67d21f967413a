"""`python -m tests.fault_harness [--crash-at POINT] [--clock-skew-ms N] [--keep-freed-memory] serve ...`:
`mongogate` with test hooks, in a real process (crash and race tests, benchmarks/turn_soak.py,
benchmarks/slow_bodies.py).

The hooks go in through the public API (`mongogate.cli.main(..., clock=, faults=)`, which `serve`
hands to build_server and mongogate/assembly.py): `mongogate serve` itself reads no test switch.
``--crash-at POINT`` ends the process with status 137 (like kill -9) when the server reaches that
point between a write and its reply (the points: `mongogate.assembly.Faults`); ``--clock-skew-ms
N`` runs the server's clock N ms ahead, so it sees another server's lease as expired at once;
``--keep-freed-memory`` serves HTTP without handing large bodies' memory back once freed
(`serve_http(return_freed_memory=False)`, server/memory_return.py), the old behaviour.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

from mongogate.assembly import Faults
from mongogate.cli import main as mongogate
from mongogate.clock import SkewedClock


def crash_at(point: str) -> Callable[[str], None]:
    def crash(at: str) -> None:
        if at == point:
            os._exit(137)  # no reply, no cleanup: what a killed process leaves

    return crash


def command(crash: str | None = None, skew_ms: int | None = None) -> list[str]:
    """The start of a command line running `mongogate` with these hooks (then the subcommand);
    with none, `mongogate` itself."""
    if not crash and not skew_ms:
        return [sys.executable, "-m", "mongogate.cli"]
    words = [sys.executable, "-m", "tests.fault_harness"]
    if crash:
        words += ["--crash-at", crash]
    if skew_ms:
        words += ["--clock-skew-ms", str(skew_ms)]
    return words


def main(argv: Sequence[str]) -> int:
    words = list(argv)
    point: str | None = None
    skew: int | None = None
    keep = False
    while words and words[0] in ("--crash-at", "--clock-skew-ms", "--keep-freed-memory"):
        if words[0] == "--keep-freed-memory":
            keep, words = True, words[1:]
            continue
        flag, value, words = words[0], words[1], words[2:]
        if flag == "--crash-at":
            point = value
        else:
            skew = int(value)
    return mongogate(
        words,
        clock=SkewedClock(skew) if skew else None,
        faults=Faults(at=crash_at(point)) if point else None,
        return_freed_memory=not keep,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
