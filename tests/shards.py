"""`make test`: the suite as two pytest processes at once, one per half, each with its own engine.

One pytest process is bound by one core: the embedded engine the session starts runs on a thread
under the tests' own interpreter lock, so a 2-core machine runs one process no faster than one
core does (measured: 277 s under `taskset -c 0`, 268-278 s on both cores). Two processes over
disjoint halves of the suite use both cores. The halves: the top-level modules (the command line,
processes, the install, the examples, which share the checkout's `examples/.mongogate`) and the
scheduler's tests, against the packages' tests (every one on its own tmp_path and database).

    python tests/shards.py [pytest args...]     # e.g. -x, -k NAME; `make test-serial` runs one process

Each half writes to its own log, printed whole when both are done (never interleaved); the exit
status is the first non-zero of the two. Each half gets its own temporary base directory (a
private one, short enough for the engines' Unix sockets below it).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
#: the half that holds every test touching the checkout itself (README commands, examples/)
FIRST = ["tests/scheduler", *sorted(str(p.relative_to(ROOT)) for p in TESTS.glob("test_*.py"))]


def halves() -> list[list[str]]:
    packages = sorted(
        str(p.relative_to(ROOT))
        for p in TESTS.iterdir()
        if p.is_dir() and (p / "__init__.py").exists() and p.name != "scheduler"
    )
    return [FIRST, packages]


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="mg-") as tmp:  # short: engine sockets live below
        runs = []
        for i, paths in enumerate(halves()):
            log = Path(tmp) / f"half-{i}.log"
            base = Path(tmp) / str(i)
            out = log.open("w")
            cmd = [sys.executable, "-m", "pytest", "-q", f"--basetemp={base}", *argv, *paths]
            runs.append(
                (cmd, log, out, subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT))
            )
        status = 0
        for i, (_, log, out, proc) in enumerate(runs):
            code = proc.wait()
            out.close()
            print(f"===== half {i + 1} of {len(runs)} (exit {code}) =====", flush=True)
            sys.stdout.write(log.read_text(errors="replace"))
            sys.stdout.flush()
            status = status or code
        return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
