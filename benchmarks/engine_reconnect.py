"""How long a running process takes to find the embedded engine again after a stop and a restart.

A `Database` (what `serve` and `worker` hold) is opened on a fresh data directory; then, per
round: `engine stop`, a restart by another process (`python -m mongogate.engine run --detach`,
which returns once the engine serves), and from that moment the same process's calls (a
`count_documents`, each with the default `database.timeout_ms` of 5000 as its budget) until one
succeeds. Reported: the time from "engine back" to the first successful call, and how many
calls failed first. The issue's requirement: within 5 s, no restart of the process.

    python benchmarks/engine_reconnect.py [--rounds 5] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lib.results import write_section  # benchmarks/lib/results.py, beside this script

from mongogate.config import DatabaseSettings
from mongogate.db import Database
from mongogate.engine import client as engine_client


async def measure(rounds: int) -> list[tuple[float, int]]:
    data = Path(tempfile.mkdtemp(prefix="mg-reconnect-")) / "data"
    db = Database(DatabaseSettings(name="bench"), data)
    await db.open()
    out: list[tuple[float, int]] = []
    try:
        await db.memory["notes"].insert_one({"_id": 1})
        for _ in range(rounds):
            engine_client.stop(data)
            run = [sys.executable, "-m", "mongogate.engine", "run", "--detach", "--data-dir", str(data)]
            subprocess.run(run, check=True, capture_output=True, timeout=120)
            back = time.perf_counter()
            failed = 0
            while True:
                try:
                    await db.memory["notes"].count_documents({})
                    break
                except Exception:
                    failed += 1
                    if failed > 10:
                        raise
            out.append((time.perf_counter() - back, failed))
    finally:
        await db.close()
        engine_client.stop(data)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    load0 = os.getloadavg()
    results = asyncio.run(measure(args.rounds))
    load1 = os.getloadavg()
    ms = [t * 1000 for t, _ in results]
    rows = "\n".join(f"| {i + 1} | {t * 1000:.0f} | {f} |" for i, (t, f) in enumerate(results))
    cmd = "python " + " ".join(shlex.quote(a) for a in ["benchmarks/engine_reconnect.py", *sys.argv[1:]])
    body = (
        f"Command: `{cmd}`  \n"
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} cores (shared with other work: load average {load0[0]:.2f} at the start, "
        f"{load1[0]:.2f} at the end); {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n\n"
        "A running process's `Database` after `engine stop` and a restart by another process: time "
        "from the restarted engine serving to this process's first successful call (no process "
        "restart; each call's budget is `database.timeout_ms` = 5000).\n\n"
        "| round | engine back → first success (ms) | calls that failed first |\n|---:|---:|---:|\n"
        f"{rows}\n\n"
        f"Median {statistics.median(ms):.0f} ms, worst {max(ms):.0f} ms (requirement: under 5000). "
        "Before the engine listened on a fixed Unix socket, a restarted engine took a new TCP port "
        "and these calls failed for as long as the process ran.\n"
    )
    print(body)
    if not args.no_write:
        write_section("engine_reconnect", body)


if __name__ == "__main__":
    main()
