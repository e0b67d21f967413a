"""Red team for issue 19, items 1-4: attacks on a real `mongogate serve --http` process.

One server process (JWT auth, dev tokens minted with the config's secret, the embedded engine
of a private data directory, real HTTP on 127.0.0.1) meets each attack in turn; per attack the
table says what was attempted, what was expected, what was observed and HELD / FAILED /
SKIPPED (the engine attack needs root for `setpriv`). Exit status 1 when anything FAILED.

1. huge responses: load_context / run_events over large stored items stay within
   `limits.max_response_bytes` and say `truncated`; oversized writes are `[invalid_input]`.
2. one caller hogging: many MCP sessions of one token, half-open connections beside the probes,
   withheld bodies and the server's RSS, a flooding tenant beside a quiet one (the clients of
   benchmarks/fairness.py), an aggregation whose group-count probe must share `max_time_ms`.
3. the engine's socket, tried as another local user (uid 65534).
4. audit dodges (each refused call's one event lists the operator) and planted audit files.

`--quick` sizes everything to a couple of minutes on a busy 2-core machine; the full run pushes
harder (defaults for the limits, more sessions, connections and bodies). A shared machine: run
it with `nice`.

    python benchmarks/redteam.py [--quick] [--only NAME,...] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import platform
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fairness import seed  # benchmarks/fairness.py, beside this script
from lib.redteam_access import audit_dodges, audit_files, engine_socket
from lib.redteam_base import DB, FAILED, FULL, QUICK, Outcome, Target, clean_env, make_target
from lib.redteam_load import (
    PROBED,
    fair_share,
    half_open,
    huge_context,
    huge_run_events,
    oversized_writes,
    probed_aggregation,
    session_flood,
    slow_bodies,
)
from lib.results import write_section
from pymongo import MongoClient

from mongogate.engine import client as engine_client

ATTACKS: dict[str, Callable[..., Any]] = {
    "huge-context": huge_context,
    "huge-run-events": huge_run_events,
    "oversized": oversized_writes,
    "sessions": session_flood,
    "half-open": half_open,
    "slow-bodies": slow_bodies,
    "fairness": fair_share,
    "max-groups": probed_aggregation,
    "engine-socket": engine_socket,
    "audit-dodges": audit_dodges,
    "audit-files": audit_files,
}


def seed_wide(uri: str, docs: int) -> None:
    """Tenant agg's orders in collection `wide`, 40 tags each: $unwind makes a pass long (the
    engine's overshoot of maxTimeMS is tens of ms, so the pass must be long beside it) from few
    inserts."""
    base = datetime(2026, 1, 1, tzinfo=UTC)
    tags = [f"t{k}" for k in range(40)]
    rows = [{"userId": "agg", "createdAt": base + timedelta(hours=7 * i), "tags": tags} for i in range(docs)]
    client: MongoClient[dict[str, Any]] = MongoClient(uri)
    with client:
        client[DB]["wide"].create_index([("userId", 1), ("createdAt", -1)], name="tenant_created")
        if rows:
            client[DB]["wide"].insert_many(rows)


def one_pass_ms(uri: str) -> float:
    """What one pass of the probed aggregation costs the engine (the tight tool's budget is 1.5x)."""
    pipeline: list[dict[str, Any]] = [{"$match": {"userId": "agg"}}, *PROBED[:-1]]
    client: MongoClient[dict[str, Any]] = MongoClient(uri)
    with client:
        took = []
        for _ in range(3):
            started = time.perf_counter()
            client[DB]["wide"].aggregate(pipeline, hint={"userId": 1, "createdAt": -1}).to_list()
            took.append((time.perf_counter() - started) * 1000)
    return statistics.median(took)  # the pass as the server runs it (with the index hint)


async def mount(t: Target, names: list[str], single_pass_ms: float) -> list[Outcome]:
    out: list[Outcome] = []
    for name in names:
        attack = ATTACKS[name]
        started = time.monotonic()
        try:
            args = (t, single_pass_ms) if name == "max-groups" else (t,)
            got = await attack(*args) if inspect.iscoroutinefunction(attack) else attack(*args)
            found = got if isinstance(got, list) else [got]
        except Exception as e:  # an attack that could not be mounted is a failure too
            found = [Outcome(0, name, "(could not mount)", "", f"{type(e).__name__}: {e}", FAILED)]
        out.extend(found)
        for o in found:
            print(f"{o.verdict:7} {o.name} ({time.monotonic() - started:.1f} s)", file=sys.stderr, flush=True)
    return out


def run(quick: bool, names: list[str], *, keep_freed_memory: bool = False) -> list[Outcome]:
    tmp = Path(tempfile.mkdtemp(prefix="mg-redteam-"))
    tmp.chmod(0o755)  # so another user meets the engine's own 0700 directory, not ours
    data = tmp / "data"
    lease = engine_client.lease(data, 600)
    lease.release()
    outcomes: list[Outcome] = []
    try:
        sizes = QUICK if quick else FULL
        seed(lease.uri, DB, sizes.flood_docs if "fairness" in names else 0)  # and tenant quiet's 20
        seed_wide(
            lease.uri, sizes.wide_docs if "max-groups" in names else 0
        )  # the index always: serve checks it
        single = one_pass_ms(lease.uri) if "max-groups" in names else 1000.0
        target = make_target(
            tmp, quick, tight_ms=max(150, round(1.5 * single)), keep_freed_memory=keep_freed_memory
        )
        with target.serving():
            outcomes = asyncio.run(mount(target, names, single))
        return outcomes
    finally:
        engine_client.stop(data)
        if outcomes and all(o.verdict != FAILED for o in outcomes):
            shutil.rmtree(tmp, ignore_errors=True)
        else:  # kept for a look: the server's log, the audit file, the engine's log
            print(f"kept {tmp} (server.log, audit/audit.jsonl, data/)", file=sys.stderr)


def table(outcomes: list[Outcome]) -> str:
    rows = ["| # | attack | attempted | expected | observed | verdict |", "|---|---|---|---|---|---|"]
    for o in outcomes:
        cells = [str(o.item), o.name, o.attempted, o.expected, o.observed, f"**{o.verdict}**"]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="smaller attacks: a couple of minutes")
    p.add_argument("--only", default="", help=f"comma-separated attacks of: {', '.join(ATTACKS)}")
    p.add_argument("--no-write", action="store_true", help="do not record the table in RESULTS.md")
    p.add_argument(
        "--keep-freed-memory",
        action="store_true",
        help="serve without handing large bodies' memory back (the old behaviour: slow-bodies gives way)",
    )
    args = p.parse_args()
    names = [n for n in args.only.split(",") if n] or list(ATTACKS)
    unknown = [n for n in names if n not in ATTACKS]
    if unknown:
        p.error(f"unknown attack {', '.join(unknown)}; attacks: {', '.join(ATTACKS)}")
    for name in set(os.environ) - set(clean_env()):  # this process reads the config as the server does
        del os.environ[name]
    load0, started = os.getloadavg(), time.monotonic()
    outcomes = run(args.quick, names, keep_freed_memory=args.keep_freed_memory)
    cmd = shlex.join(["nice", "python", "benchmarks/redteam.py", *sys.argv[1:]])
    failed = sum(o.verdict == FAILED for o in outcomes)
    body = (
        f"Command: `{cmd}`  \n"
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} cores shared with other work (load average {load0[0]:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end); whole run {time.monotonic() - started:.0f} s; "
        f"running as {'root' if os.getuid() == 0 else 'uid ' + str(os.getuid())}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n\n"
        + table(outcomes)
        + f"\n{len(outcomes) - failed} of {len(outcomes)} held or skipped, {failed} failed.\n"
    )
    print(body)
    if not args.no_write and not args.only:
        write_section("redteam", body)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
